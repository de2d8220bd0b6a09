/**
 * Pending network approvals: a kernel asked to reach a host its session's policy
 * does not allow yet, and a person decides.  Shown only when the server has the
 * approvals route (GET /api/exec/approvals); each item has Allow and Deny.
 */
import { IApproval } from './api';

function field(approval: IApproval, ...names: string[]): string {
  for (const name of names) {
    const value = approval[name];
    if (typeof value === 'string' && value) {
      return value;
    }
    if (typeof value === 'number') {
      return String(value);
    }
    if (value && typeof value === 'object' && typeof (value as any).name === 'string') {
      return (value as any).name;
    }
  }
  return '';
}

/** "GET https://pypi.org/simple", "pypi.org:443", or the raw JSON when the shape is unknown. */
export function describe(approval: IApproval): string {
  const method = field(approval, 'method');
  const url = field(approval, 'url');
  const host = field(approval, 'host', 'hostname', 'destination', 'target');
  const port = field(approval, 'port');
  const where = url || (host ? (port ? `${host}:${port}` : host) : '');
  if (!where) {
    const { id: _id, ...rest } = approval;
    return JSON.stringify(rest);
  }
  return method ? `${method} ${where}` : where;
}

/** Which session asked: its name when `nameOf` knows the id the server gives. */
export function requester(approval: IApproval, nameOf: (id: string) => string | undefined): string {
  const who = field(approval, 'session_name', 'session', 'session_id');
  return nameOf(who) ?? who;
}

/** "cell 3" (counted from 1, as a person counts) when the server gives the index, else "". */
function cellOf(approval: IApproval): string {
  return typeof approval.cell === 'number' ? `cell ${approval.cell + 1}` : '';
}

/**
 * Renders the approvals into `list`, each with its two buttons; `decide` resolves to
 * whether the server took the decision. Items already shown are kept as they are.
 */
export function renderApprovals(
  list: HTMLElement,
  approvals: IApproval[],
  decide: (approval: IApproval, allow: boolean) => Promise<boolean>,
  nameOf: (id: string) => string | undefined = () => undefined
): void {
  const wanted = new Set(approvals.map(a => a.id));
  for (const child of Array.from(list.children) as HTMLElement[]) {
    if (!wanted.has(child.dataset.approvalId ?? '')) {
      child.remove();
    }
  }
  const shown = new Set(
    (Array.from(list.children) as HTMLElement[]).map(c => c.dataset.approvalId)
  );
  for (const approval of approvals) {
    if (shown.has(approval.id)) {
      continue;
    }
    const item = document.createElement('li');
    item.className = 'jp-ExecSessions-approval';
    item.dataset.approvalId = approval.id;
    const text = document.createElement('div');
    text.className = 'jp-ExecSessions-approvalText';
    const who = [requester(approval, nameOf), cellOf(approval)].filter(Boolean).join(', ');
    text.textContent = who ? `${who} asks for ${describe(approval)}` : describe(approval);
    const bar = document.createElement('div');
    bar.className = 'jp-ExecSessions-actions';
    for (const [label, allow] of [
      ['Allow', true],
      ['Deny', false]
    ] as Array<[string, boolean]>) {
      const button = document.createElement('button');
      button.className = `jp-Button jp-mod-styled ${allow ? 'jp-mod-accept' : 'jp-mod-warn'}`;
      button.dataset.action = allow ? 'allow' : 'deny';
      button.textContent = label;
      button.addEventListener('click', () => {
        const buttons = Array.from(item.querySelectorAll('button'));
        buttons.forEach(b => (b.disabled = true)); // one decision per request
        void decide(approval, allow).then(done => {
          if (!done) {
            buttons.forEach(b => (b.disabled = false)); // refused: the person may try again
          }
        });
      });
      bar.appendChild(button);
    }
    item.append(text, bar);
    list.appendChild(item);
  }
}
