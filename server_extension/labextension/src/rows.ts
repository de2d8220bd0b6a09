/**
 * One session in the panel's list, and the order of the list (forks under their parent).
 *
 * A row is built once and then updated in place on every poll: rebuilding the
 * DOM each second would drop a half-done click or a hovered tooltip, and would
 * make the list flicker while the server's state does not change.
 */
import {
  LabIcon,
  closeIcon,
  copyIcon,
  duplicateIcon,
  notebookIcon,
  refreshIcon,
  stopIcon
} from '@jupyterlab/ui-components';

import { ISession } from './api';

/** What a row's buttons do; the panel implements them. */
export interface IRowActions {
  open(session: ISession): void;
  interrupt(session: ISession): void;
  restart(session: ISession): void;
  shutdown(session: ISession): void;
  fork(session: ISession): void;
  copyId(session: ISession): void;
}

type Action = keyof IRowActions;

const BUTTONS: Array<[Action, LabIcon, string]> = [
  ['open', notebookIcon, "Open the session's notebook (joins its kernel)"],
  ['interrupt', stopIcon, 'Interrupt the running cell'],
  ['restart', refreshIcon, 'Restart the kernel (its state is lost)'],
  ['fork', duplicateIcon, 'Fork: a new session from this state'],
  ['copyId', copyIcon, "Copy the session's id (to hand it to an agent)"],
  ['shutdown', closeIcon, 'Shut the session down (the notebook stays)']
];

/** The session's kernel status, also for servers that predate the `status` field. */
export function statusOf(session: ISession): string {
  return session.status ?? (session.kernel.alive ? 'idle' : 'dead');
}

/** "just now", "12 s ago", "3 min ago", "2 h ago", "4 d ago". */
export function ago(iso: string | undefined, now: number): string {
  const then = iso ? Date.parse(iso) : NaN;
  if (Number.isNaN(then)) {
    return '';
  }
  const seconds = Math.max(0, Math.round((now - then) / 1000));
  if (seconds < 3) {
    return 'just now';
  }
  for (const [unit, size] of [
    ['d', 86400],
    ['h', 3600],
    ['min', 60]
  ] as Array<[string, number]>) {
    if (seconds >= size) {
      return `${Math.floor(seconds / size)} ${unit} ago`;
    }
  }
  return `${seconds} s ago`;
}

function idOf(ref: string | { id: string } | null | undefined): string | null {
  if (typeof ref === 'string') {
    return ref;
  }
  return ref && typeof ref.id === 'string' ? ref.id : null;
}

/** The parent of a fork, from whichever field the server uses (`parent`, `parent_id`). */
export function parentOf(session: ISession): string | null {
  return idOf(session.parent) ?? idOf(session.parent_id);
}

/**
 * The sessions in display order with their depth: each fork right under its parent
 * (found from the fork's `parent` or the parent's `forks`), oldest first.
 */
export function ordered(sessions: ISession[]): Array<[ISession, number]> {
  const byId = new Map(sessions.map(s => [s.id, s]));
  const parent = new Map<string, string>();
  for (const s of sessions) {
    for (const child of s.forks ?? []) {
      const id = idOf(child);
      if (id && byId.has(id) && id !== s.id) {
        parent.set(id, s.id);
      }
    }
  }
  for (const s of sessions) {
    const p = parentOf(s);
    if (p && byId.has(p) && p !== s.id) {
      parent.set(s.id, p);
    }
  }
  const children = new Map<string | null, ISession[]>();
  for (const s of sessions) {
    const key = parent.get(s.id) ?? null;
    children.set(key, [...(children.get(key) ?? []), s]);
  }
  const out: Array<[ISession, number]> = [];
  const seen = new Set<string>();
  const walk = (key: string | null, depth: number): void => {
    const list = [...(children.get(key) ?? [])].sort((a, b) => a.created.localeCompare(b.created));
    for (const s of list) {
      if (!seen.has(s.id)) {
        seen.add(s.id);
        out.push([s, depth]);
        walk(s.id, depth + 1);
      }
    }
  };
  walk(null, 0);
  for (const s of sessions) {
    if (!seen.has(s.id)) {
      out.push([s, 0]); // a parent cycle: show it flat rather than lose it
    }
  }
  return out;
}

/** One `<li>` of the list, updated in place. */
export class SessionRow {
  readonly node = document.createElement('li');
  private readonly _name = document.createElement('span');
  private readonly _status = document.createElement('span');
  private readonly _meta = document.createElement('div');
  private readonly _workDir = document.createElement('div');
  private readonly _running = document.createElement('pre');
  private readonly _buttons = new Map<Action, HTMLButtonElement>();
  private _session: ISession;

  constructor(session: ISession, actions: IRowActions) {
    this._session = session;
    this.node.className = 'jp-ExecSessions-item';
    this.node.dataset.sessionId = session.id;
    const head = document.createElement('div');
    head.className = 'jp-ExecSessions-head';
    const dot = document.createElement('span');
    dot.className = 'jp-ExecSessions-dot';
    this._name.className = 'jp-ExecSessions-name';
    this._status.className = 'jp-ExecSessions-status';
    head.append(dot, this._name, this._status);
    this._meta.className = 'jp-ExecSessions-meta';
    this._workDir.className = 'jp-ExecSessions-workdir';
    this._running.className = 'jp-ExecSessions-running';
    const bar = document.createElement('div');
    bar.className = 'jp-ExecSessions-actions';
    for (const [action, icon, title] of BUTTONS) {
      const button = document.createElement('button');
      button.className = 'jp-ExecSessions-button jp-Button jp-mod-minimal';
      button.dataset.action = action;
      button.title = title;
      button.setAttribute('aria-label', title);
      button.appendChild(icon.element({ tag: 'span', elementPosition: 'center' }));
      button.addEventListener('click', event => {
        event.stopPropagation();
        actions[action](this._session);
      });
      this._buttons.set(action, button);
      bar.appendChild(button);
    }
    head.addEventListener('dblclick', () => actions.open(this._session));
    this.node.append(head, this._meta, this._workDir, this._running, bar);
  }

  get session(): ISession {
    return this._session;
  }

  /** Show `session` as of `now` (ms); `canFork`: the server lists forks, so it can make them. */
  update(session: ISession, depth: number, now: number, canFork: boolean): void {
    this._session = session;
    const status = statusOf(session);
    this.node.dataset.status = status;
    this.node.dataset.depth = String(depth);
    this.node.style.setProperty('--jp-exec-depth', String(depth));
    this.node.classList.toggle('jp-mod-fork', depth > 0);
    setText(this._name, session.name);
    this._name.title = `${session.notebook.path}\nid ${session.id}`;
    setText(this._status, status);
    const cells = `${session.cells} cell${session.cells === 1 ? '' : 's'}`;
    const when = ago(session.last_activity ?? session.created, now);
    // A session on a running kernel it did not start (a person's): shutting it down spares it.
    const attached = session.owns_kernel === false;
    const backend = attached ? `${session.backend}, attached` : session.backend;
    setText(this._meta, [backend, cells, when].filter(Boolean).join(' · '));
    setText(this._workDir, session.work_dir || '/');
    this._workDir.title = `work dir: ${session.work_dir || '(server root)'}`;
    const code = (session.running?.code ?? '').replace(/^(\s*\n)+/, '').trimEnd();
    setText(this._running, code);
    this._running.hidden = !code;
    const dead = status === 'dead';
    this._button('interrupt').disabled = dead || status === 'idle';
    this._button('restart').disabled = dead;
    this._button('fork').disabled = dead;
    this._button('fork').hidden = !canFork;
  }

  private _button(action: Action): HTMLButtonElement {
    return this._buttons.get(action)!;
  }
}

function setText(node: HTMLElement, text: string): void {
  if (node.textContent !== text) {
    node.textContent = text;
  }
}
