/**
 * The REST API of the jupyter-exec server extension, as the panel uses it.
 *
 * Every call goes through JupyterLab's ServerConnection, so it carries the
 * page's token and XSRF cookie exactly as JupyterLab's own requests do; the
 * routes need nothing else.  Routes that an older or newer server may lack
 * (forks, network approvals) are detected, not assumed: a 404 from the
 * approvals route means "this server has none", not an error.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** One session of GET /api/exec/sessions (the `Session` schema of openapi.yaml). */
export interface ISession {
  id: string;
  name: string;
  backend: string;
  kernel: { id: string; name: string; alive: boolean };
  work_dir: string;
  notebook: { path: string; url: string };
  created: string;
  cells: number;
  /** idle, busy, restarting or dead (absent on servers older than the panel). */
  status?: string;
  last_activity?: string;
  running?: { code: string; started: string } | null;
  /** Forks: the parent's id (or model), and the forks' ids (or models). */
  parent?: string | { id: string } | null;
  parent_id?: string | null;
  forks?: Array<string | { id: string }>;
  /** False for a session attached to a running kernel: shutting it down spares the kernel. */
  owns_kernel?: boolean;
}

/** A kernel running on the server, named after the notebooks and consoles using it. */
export interface IRunningKernel {
  id: string;
  label: string;
}

/** A network request waiting for a person's decision (GET /api/exec/approvals). */
export interface IApproval {
  id: string;
  [field: string]: unknown;
}

/** A failed call: the server's JSON error message when it sent one. */
export class ExecAPIError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
  }
}

export class ExecAPI {
  constructor(
    readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings()
  ) {}

  listSessions(): Promise<ISession[]> {
    return this.call<ISession[]>('GET', 'sessions');
  }

  createSession(body: { name?: string; backend?: string; kernel_id?: string }): Promise<ISession> {
    return this.call<ISession>('POST', 'sessions', body);
  }

  /** The server's running kernels (GET /api/kernels), labelled from GET /api/sessions. */
  async listKernels(): Promise<IRunningKernel[]> {
    const [kernels, sessions] = await Promise.all([
      this.call<Array<{ id: string; name: string }>>('GET', '', undefined, 'kernels'),
      this.call<Array<{ path: string; kernel: { id: string } | null }>>(
        'GET',
        '',
        undefined,
        'sessions'
      )
    ]);
    return kernels.map(kernel => {
      const paths = sessions.filter(s => s.kernel?.id === kernel.id).map(s => s.path);
      const where = paths.length ? paths.join(', ') : `kernel ${kernel.id.slice(0, 8)}`;
      return { id: kernel.id, label: `${where} (${kernel.name})` };
    });
  }

  async interrupt(id: string): Promise<void> {
    await this.call('POST', `sessions/${encodeURIComponent(id)}/interrupt`);
  }

  async restart(id: string): Promise<void> {
    await this.call('POST', `sessions/${encodeURIComponent(id)}/restart`);
  }

  async shutdown(id: string): Promise<void> {
    await this.call('DELETE', `sessions/${encodeURIComponent(id)}`);
  }

  async fork(id: string): Promise<void> {
    await this.call('POST', `sessions/${encodeURIComponent(id)}/fork`, {});
  }

  /** Pending approvals, or `null` when the server has no approvals route (404). */
  async listApprovals(): Promise<IApproval[] | null> {
    try {
      const found = await this.call<IApproval[] | { approvals: IApproval[] }>(
        'GET',
        'approvals'
      );
      return Array.isArray(found) ? found : (found?.approvals ?? []);
    } catch (error) {
      if (error instanceof ExecAPIError && error.status === 404) {
        return null;
      }
      throw error;
    }
  }

  async decide(id: string, allow: boolean): Promise<void> {
    await this.call('POST', `approvals/${encodeURIComponent(id)}`, { allow });
  }

  private async call<T = unknown>(
    method: string,
    path: string,
    body?: unknown,
    api = 'exec'
  ): Promise<T> {
    const url = URLExt.join(this.settings.baseUrl, 'api', api, path);
    const init: RequestInit = { method };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers = { 'Content-Type': 'application/json' };
    } else if (method === 'POST') {
      init.body = '';
    }
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(url, init, this.settings);
    } catch (error) {
      throw new ExecAPIError(`cannot reach the server: ${String(error)}`, 0);
    }
    const text = await response.text();
    let data: any = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!response.ok) {
      const message = data && typeof data.message === 'string' ? data.message : response.statusText;
      throw new ExecAPIError(`${response.status}: ${message}`, response.status);
    }
    return data as T;
  }
}
