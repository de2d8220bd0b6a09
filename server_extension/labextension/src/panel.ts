/**
 * The sessions side panel: the server's jupyter-exec sessions, live.
 *
 * Live means polled: GET /api/exec/sessions once a second while the panel is
 * visible (paused while it is hidden or the browser tab is in the background,
 * backing off when the server does not answer).  The listing is one small
 * authenticated request that already carries everything shown (status, last
 * activity, the running cell), so polling needs no new server machinery, and a
 * server push would add a long-lived connection per open panel for a state
 * that a person reads at human speed.
 */
import {
  Clipboard,
  Dialog,
  Notification,
  showDialog,
  showErrorMessage
} from '@jupyterlab/apputils';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { ExecAPI, IApproval, IRunningKernel, ISession } from './api';
import { renderApprovals } from './approvals';
import { IRowActions, SessionRow, ordered } from './rows';

/** Milliseconds between two looks at the listing while the panel is visible. */
export const POLL_INTERVAL = 1000;

/** The value of a "Running kernel" choice: this prefix and the kernel's id. */
const KERNEL = 'kernel:';

/** Polls between two checks whether a server without approvals has gained them. */
const APPROVALS_RECHECK = 30;

export interface ISessionsPanelOptions {
  api: ExecAPI;
  /** Opens a notebook (by API path) in the main area. */
  open: (path: string) => Promise<unknown>;
}

export class SessionsPanel extends Widget implements IRowActions {
  constructor(options: ISessionsPanelOptions) {
    super();
    this._api = options.api;
    this._open = options.open;
    this.addClass('jp-ExecSessions');
    this.node.append(this._header(), this._form(), this._created, this._error, this._list);
    this.node.append(this._empty, this._approvalsSection());
    this._created.className = 'jp-ExecSessions-created';
    this._created.hidden = true;
    this._error.className = 'jp-ExecSessions-error';
    this._error.hidden = true;
    this._list.className = 'jp-ExecSessions-list';
    this._empty.className = 'jp-ExecSessions-empty';
    this._empty.textContent = 'No jupyter-exec sessions on this server yet.';
    this._empty.hidden = true;
    this._poll = new Poll({
      factory: () => this.refresh(),
      frequency: { interval: POLL_INTERVAL, backoff: true, max: 30 * 1000 },
      name: 'jupyter-exec:sessions',
      standby: () => (this.isVisible ? 'when-hidden' : true)
    });
  }

  /** Fetch the listing (and pending approvals) now and show it. */
  async refresh(): Promise<void> {
    try {
      const sessions = await this._api.listSessions();
      this._render(sessions);
      this._showError('');
    } catch (error) {
      this._showError(`Cannot list sessions: ${(error as Error).message}`);
      throw error; // the poll backs off
    }
    await this._refreshApprovals();
  }

  dispose(): void {
    if (!this.isDisposed) {
      this._poll.dispose();
    }
    super.dispose();
  }

  protected onAfterShow(): void {
    void this._poll.refresh();
  }

  // -- actions (IRowActions) -------------------------------------------------------

  open(session: ISession): void {
    void this._run('Cannot open the notebook', () => this._open(session.notebook.path));
  }

  interrupt(session: ISession): void {
    void this._run('Cannot interrupt', () => this._api.interrupt(session.id));
  }

  restart(session: ISession): void {
    void this._confirm(
      'Restart kernel?',
      `Restart the kernel of ${session.name}? Its variables and imports are lost; ` +
        'the notebook keeps every cell.',
      'Restart'
    ).then(
      ok =>
        ok &&
        this._run(
          'Cannot restart',
          () => this._api.restart(session.id),
          `Restarted the kernel of ${session.name}`
        )
    );
  }

  shutdown(session: ISession): void {
    void this._confirm(
      'Shut down session?',
      `Shut down ${session.name}? ` +
        (session.owns_kernel === false
          ? 'The running kernel it was attached to keeps running; '
          : 'Its kernel stops; ') +
        `the notebook and its files stay in ${session.work_dir || 'the server root'}.`,
      'Shut Down'
    ).then(
      ok =>
        ok &&
        this._run(
          'Cannot shut down',
          () => this._api.shutdown(session.id),
          `Shut down ${session.name}`
        )
    );
  }

  fork(session: ISession): void {
    void this._run('Cannot fork', () => this._api.fork(session.id));
  }

  copyId(session: ISession): void {
    Clipboard.copyToSystem(session.id);
    Notification.info(`Copied the id of ${session.name}: ${session.id}`, { autoClose: 3000 });
  }

  // -- building ----------------------------------------------------------------------

  private _header(): HTMLElement {
    const header = document.createElement('header');
    header.className = 'jp-ExecSessions-header';
    header.textContent = 'jupyter-exec sessions';
    return header;
  }

  private _form(): HTMLElement {
    const form = document.createElement('form');
    form.className = 'jp-ExecSessions-new';
    const name = document.createElement('input');
    name.className = 'jp-mod-styled jp-ExecSessions-newName';
    name.name = 'name';
    name.placeholder = 'name (optional)';
    name.setAttribute('aria-label', 'Name of the new session');
    const backend = document.createElement('select');
    backend.className = 'jp-mod-styled jp-ExecSessions-newBackend';
    backend.name = 'backend';
    backend.setAttribute('aria-label', 'Kernel of the new session: a new one, or a running one');
    const fresh = document.createElement('optgroup');
    fresh.label = 'New kernel';
    for (const value of ['local', 'docker']) {
      fresh.appendChild(new Option(value, value));
    }
    this._running.label = 'Running kernel';
    this._running.className = 'jp-ExecSessions-runningKernels';
    backend.append(fresh, this._running);
    // The running kernels are looked up when the person is about to choose, not polled.
    backend.addEventListener('focus', () => void this._refreshKernels());
    const start = document.createElement('button');
    start.type = 'submit';
    start.className = 'jp-Button jp-mod-styled jp-mod-accept jp-ExecSessions-newStart';
    start.textContent = 'New session';
    form.append(name, backend, start);
    form.addEventListener('submit', event => {
      event.preventDefault();
      start.disabled = true;
      const given = name.value.trim();
      const kernel = backend.value.startsWith(KERNEL) ? backend.value.slice(KERNEL.length) : '';
      const body = {
        ...(kernel ? { kernel_id: kernel } : { backend: backend.value }),
        ...(given ? { name: given } : {})
      };
      this._api
        .createSession(body)
        .then(session => {
          name.value = '';
          backend.value = 'local';
          this._showCreated(session);
          return this._poll.refresh();
        })
        .catch(error => showErrorMessage('Cannot start a session', error))
        .finally(() => (start.disabled = false));
    });
    return form;
  }

  /** Fill the "Running kernel" choices: kernels no jupyter-exec session serves yet. */
  private async _refreshKernels(): Promise<void> {
    let kernels: IRunningKernel[];
    try {
      kernels = await this._api.listKernels();
    } catch {
      return; // the person can still start a new kernel
    }
    const taken = new Set(Array.from(this._rows.values(), row => row.session.kernel.id));
    const select = this._running.parentElement as HTMLSelectElement | null;
    const chosen = select?.value;
    this._running.replaceChildren(
      ...kernels.filter(k => !taken.has(k.id)).map(k => new Option(k.label, KERNEL + k.id))
    );
    if (select && chosen) {
      select.value = Array.from(select.options).some(o => o.value === chosen) ? chosen : 'local';
    }
  }

  private _showCreated(session: ISession): void {
    const box = this._created;
    box.replaceChildren();
    box.dataset.sessionId = session.id;
    const text = document.createElement('div');
    const how = session.owns_kernel === false ? 'Attached' : 'Started';
    text.textContent = `${how} ${session.name}. Hand its id to the agent:`;
    const id = document.createElement('code');
    id.className = 'jp-ExecSessions-createdId';
    id.textContent = session.id;
    const copy = document.createElement('button');
    copy.className = 'jp-Button jp-mod-styled jp-mod-accept';
    copy.dataset.action = 'copyId';
    copy.textContent = 'Copy id';
    copy.addEventListener('click', () => this.copyId(session));
    const close = document.createElement('button');
    close.className = 'jp-Button jp-mod-styled jp-mod-reject';
    close.textContent = 'Dismiss';
    close.addEventListener('click', () => (box.hidden = true));
    box.append(text, id, copy, close);
    box.hidden = false;
  }

  private _approvalsSection(): HTMLElement {
    const section = this._approvals;
    section.className = 'jp-ExecSessions-approvals';
    section.hidden = true;
    const title = document.createElement('header');
    title.className = 'jp-ExecSessions-header';
    title.textContent = 'Network approvals';
    this._approvalList.className = 'jp-ExecSessions-approvalList';
    section.append(title, this._approvalList);
    return section;
  }

  // -- showing -----------------------------------------------------------------------

  private _render(sessions: ISession[]): void {
    const now = Date.now();
    const canFork = sessions.some(s => 'forks' in s || 'parent' in s || 'parent_id' in s);
    const order = ordered(sessions);
    const live = new Set(sessions.map(s => s.id));
    for (const [id, row] of this._rows) {
      if (!live.has(id)) {
        row.node.remove();
        this._rows.delete(id);
      }
    }
    const nodes: HTMLElement[] = [];
    for (const [session, depth] of order) {
      let row = this._rows.get(session.id);
      if (!row) {
        row = new SessionRow(session, this);
        this._rows.set(session.id, row);
      }
      row.update(session, depth, now, canFork);
      nodes.push(row.node);
    }
    const current = Array.from(this._list.children);
    if (current.length !== nodes.length || nodes.some((n, i) => current[i] !== n)) {
      this._list.replaceChildren(...nodes); // only when the order changed: clicks stay put
    }
    this._empty.hidden = sessions.length > 0;
  }

  private async _refreshApprovals(): Promise<void> {
    if (this._approvalsMissing > 0) {
      this._approvalsMissing = (this._approvalsMissing + 1) % APPROVALS_RECHECK;
      return;
    }
    let approvals: IApproval[] | null;
    try {
      approvals = await this._api.listApprovals();
    } catch {
      return; // shown again on the next poll; the sessions are what matters
    }
    if (approvals === null) {
      this._approvalsMissing = 1; // this server has no approvals: ask again later
      this._approvals.hidden = true;
      return;
    }
    this._approvals.hidden = approvals.length === 0;
    renderApprovals(
      this._approvalList,
      approvals,
      (approval, allow) =>
        this._run(allow ? 'Cannot allow' : 'Cannot deny', () =>
          this._api.decide(approval.id, allow)
        ),
      id => this._rows.get(id)?.session.name
    );
  }

  private _showError(message: string): void {
    this._error.textContent = message;
    this._error.hidden = !message;
  }

  private async _confirm(title: string, body: string, label: string): Promise<boolean> {
    const result = await showDialog({
      title,
      body,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label })]
    });
    return result.button.accept;
  }

  /**
   * Do `work`, say `done` if given, look at the listing again; a failure is shown.
   * Resolves to whether the work succeeded.
   */
  private async _run(
    title: string,
    work: () => Promise<unknown>,
    done?: string
  ): Promise<boolean> {
    try {
      await work();
    } catch (error) {
      void showErrorMessage(title, error as Error);
      return false;
    }
    if (done) {
      Notification.success(done, { autoClose: 4000 });
    }
    void this._poll.refresh();
    return true;
  }

  private readonly _api: ExecAPI;
  private readonly _open: (path: string) => Promise<unknown>;
  private readonly _poll: Poll;
  private readonly _rows = new Map<string, SessionRow>();
  private readonly _list = document.createElement('ul');
  private readonly _empty = document.createElement('div');
  private readonly _created = document.createElement('div');
  private readonly _error = document.createElement('div');
  private readonly _approvals = document.createElement('section');
  private readonly _approvalList = document.createElement('ul');
  private readonly _running = document.createElement('optgroup');
  private _approvalsMissing = 0;
}
