"""Work on the extension's sessions: running code, interrupting, replaying notebooks.

What a session does once it exists, as opposed to how it is made
(:mod:`~jupyter_exec.server.create`) or shown (:mod:`~jupyter_exec.server.views`).
Every call goes through ``live`` first, so acting on a session keeps it from
being culled and a kernel shut down from JupyterLab is reported, not waited on.
A replay is here too: it runs code, on a server kernel of its own.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.boundary.naming import replayed_notebook_name
from jupyter_exec.engine.recorder import read_notebook
from jupyter_exec.exceptions import JupyterExecError, NotebookError
from jupyter_exec.models import Execution
from jupyter_exec.server.bodies import InvalidRequest
from jupyter_exec.server.entry import ServerSession
from jupyter_exec.session.session import Backend, OutputCallback

if TYPE_CHECKING:
    from jupyter_exec.network.proxy import NetworkProxy
    from jupyter_exec.server.origins import ReplayOrigins
    from jupyter_exec.server.paths import ServerRoot

__all__ = ["Work"]

log = logging.getLogger("jupyter_exec.server")


class Work:
    """Running code, replays and save hooks.

    A mixin of :class:`~jupyter_exec.server.sessions.ServerSessions`.
    """

    serverapp: Any
    root: ServerRoot
    kernel_names: dict[str, str]
    timeout: float | None
    startup_timeout: float
    replay_origins: ReplayOrigins
    _background: set[asyncio.Task[Any]]

    # Provided by ServerSessions and its other mixins (which come first in its bases).
    def live(self, session_id: str) -> ServerSession:
        raise NotImplementedError

    def _current(self) -> dict[str, ServerSession]:
        raise NotImplementedError

    async def _check_kernelspec(self, kernel_name: str) -> None:
        raise NotImplementedError

    async def _start_server_kernel(
        self,
        kernel_name: str,
        folder: Path,
        env: dict[str, str] | None = None,
        *,
        network_proxy: NetworkProxy | None = None,
    ) -> str:
        raise NotImplementedError

    async def _shutdown_kernel(self, kernel_id: str) -> None:
        raise NotImplementedError

    def _file(self, path: Path) -> dict[str, str]:
        raise NotImplementedError

    async def execute(
        self,
        session_id: str,
        code: str,
        timeout: float | None = None,
        on_output: OutputCallback | None = None,
    ) -> tuple[ServerSession, Execution]:
        entry = self.live(session_id)
        return entry, await entry.session.execute(code, timeout=timeout, on_output=on_output)

    def execute_in_background(
        self,
        session_id: str,
        code: str,
        timeout: float | None,
        on_output: OutputCallback,
    ) -> asyncio.Task[tuple[ServerSession, Execution]]:
        """Start an execution that runs to the end (and is recorded) even if nobody waits for it."""
        self.live(session_id)
        task = asyncio.ensure_future(self.execute(session_id, code, timeout, on_output))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def interrupt(self, session_id: str) -> None:
        await self.live(session_id).session.interrupt()

    async def replay(
        self,
        notebook: str,
        *,
        until: int | None = None,
        timeout: float | None = None,
        kernel_name: str | None = None,
        save_state: bool = False,
    ) -> dict[str, Any]:
        """Re-run a notebook under the root on a fresh server kernel; the report as JSON.

        The kernel comes from the server's kernel manager (so it is visible, and
        runs on the gateway if there is one) and is shut down afterwards. The
        replay is recorded beside the notebook as ``<stem>.replayed.ipynb`` and runs in
        ``<stem>.replayed_work/``, a fresh copy of the notebook folder's inputs.
        Without ``kernel_name``, the kernelspec is the one the server saw run
        the notebook (or its Docker work dir), before the file's own
        (:mod:`~jupyter_exec.server.origins`).
        """
        from jupyter_exec.notebook.inputs import claim_outputs, fresh_run_folder, run_folder_for
        from jupyter_exec.notebook.replay import replay_async  # imported on use: it is a big module
        from jupyter_exec.notebook.where import unseen_docker_record

        path = self.root.resolve(notebook)
        if path.suffix != ".ipynb" or not path.is_file():
            raise InvalidRequest(f"no notebook at {notebook!r} (an .ipynb file under the root)")
        if until is not None and until < 0:
            raise InvalidRequest(f"'until' must be 0 or more, not {until}")
        try:  # read here too, so a notebook that cannot be replayed starts no kernel
            recorded = read_notebook(path)
        except NotebookError as exc:
            raise InvalidRequest(f"{notebook!r} cannot be replayed: {exc}") from None
        # Not the notebook's word alone: a Docker kernel can rewrite the file (server.origins).
        chosen = kernel_name or self.replay_origins.kernel_for(path, _kernelspec_of(recorded))
        if kernel_name is None and self.replay_origins.kernel_for(path, None) is None:
            refused = unseen_docker_record(  # the file's word alone: never the host for Docker
                notebook, recorded.metadata, chosen or self.kernel_names["local"],
                self.kernel_names.get("docker"),
            )  # fmt: skip
            if refused is not None:
                raise InvalidRequest(refused)
        kernel_name = chosen or self.kernel_names["local"]
        await self._check_kernelspec(kernel_name)
        kernel_manager = self.serverapp.kernel_manager
        # Never in the notebook's folder: a fresh one beside it, which the replay fills with
        # a copy of the folder's inputs before the first cell (notebook.inputs).
        output = path.with_name(replayed_notebook_name(path.stem))
        # Claimed before its run folder is made: a second replay of this notebook (another
        # request, or a replay on the command line) is refused, not run in the same folder,
        # and so is one whose record would be a live session's notebook (boundary.claims).
        with claim_outputs([output], path) as owner:
            run = fresh_run_folder(run_folder_for(output), owner)
            kernel_id = await self._start_server_kernel(kernel_name, run)
            try:
                report = await replay_async(
                    path,
                    until=until,
                    timeout=self.timeout if timeout is None else timeout,
                    kernel_name=kernel_name,
                    work_dir=run,
                    output=output,
                    backend=_backend_of(kernel_name, self.kernel_names),  # its folder's trust
                    kernel_manager=kernel_manager.get_kernel(kernel_id),
                    startup_timeout=self.startup_timeout,
                    save_state=save_state,
                    claim=owner,
                )
            finally:
                await self._shutdown_kernel(kernel_id)
        data = report.to_dict()
        data["notebook"] = self._file(report.notebook)
        data["output"] = None if report.output is None else self._file(report.output)
        data["work_dir"] = None if report.work_dir is None else self.root.api_path(report.work_dir)
        return data

    def notebook_saved(self, api_path: str) -> None:
        """The server saved ``api_path`` (someone edited it): put back agent cells it lacks."""
        try:
            path = self.root.resolve(api_path)
        except JupyterExecError:
            return
        for entry in self._current().values():
            recorder = entry.session.recorder
            if recorder is not None and entry.notebook == path and recorder.resync():
                log.info("jupyter-exec: restored agent cells in %s after a save", api_path)


def _backend_of(kernel_name: str, kernel_names: dict[str, str]) -> Backend:
    """The backend a server kernelspec runs on (``docker`` for a Docker one), which sets the
    trust level of the replay's folder (:mod:`jupyter_exec.boundary.folders`)."""
    docker = kernel_name == kernel_names.get("docker") or kernel_name.endswith("-docker")
    return "docker" if docker else "local"


def _kernelspec_of(notebook: Any) -> str | None:
    """The kernelspec named in a notebook's metadata, if any."""
    spec = notebook.metadata.get("kernelspec")
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else None
