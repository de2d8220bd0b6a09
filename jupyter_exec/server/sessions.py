"""The extension's sessions: AsyncSessions on kernels owned by the Jupyter server.

Everything the REST handlers do goes through :class:`ServerSessions`, which
knows nothing of HTTP: it raises jupyter-exec's exceptions, and the handlers
translate them into status codes in one place.

Creating a session, step by step::

    work dir (API path) ──► ServerRoot.resolve: inside the server root, or WorkDirError
    kernel_manager.start_kernel(kernel_name, path)   the server's own kernel: /api/kernels,
                                                     JupyterLab's running panel, culling, gateway
    AsyncSession(kernel_manager=km)                  connects, records <work_dir>/<name>.ipynb
    session_manager.create_session(path, kernel_id)  a Jupyter session binds the notebook to the
                                                     kernel: opening it in JupyterLab joins it

Every session is held by the extension's :class:`~jupyter_exec.manager.AsyncSessionManager`
(``manager.add``), keyed by the session's id: its limits (``max_sessions``,
``max_sessions_per_backend``) refuse a session before any kernel starts, and
its culler closes sessions idle for ``cull_idle_timeout``. Warm pools do not
apply: the kernels must be the server's own.

The kernel belongs to the server: deleting (or culling) a session shuts it
down through the server's managers; stopping the extension only disconnects.
Forks, undo, checkpoints and restart are in :mod:`~jupyter_exec.server.branches`
(which keeps the server's kernels in step with the engine's); a Docker session's
network policy starts its proxy here, before the kernel, and ends with the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_core.utils import ensure_async

from jupyter_exec.exceptions import (
    JupyterExecError,
    KernelNotAliveError,
    KernelStartError,
    NotebookError,
    SessionConflict,
    SessionLimitError,
    SessionNotFound,
    WorkDirError,
)
from jupyter_exec.manager import AsyncSessionManager
from jupyter_exec.models import Execution
from jupyter_exec.naming import default_session_name, validate_name
from jupyter_exec.network import NetworkPolicy
from jupyter_exec.options import MAX_UNDO_STEPS
from jupyter_exec.recorder import read_notebook
from jupyter_exec.server import borrow, live
from jupyter_exec.server.approvals import Approvals
from jupyter_exec.server.bodies import InvalidRequest
from jupyter_exec.server.branches import Branches
from jupyter_exec.server.entry import ServerAsyncSession, ServerSession
from jupyter_exec.server.listing import live_fields
from jupyter_exec.server.network import checked_policy, policy_model
from jupyter_exec.server.paths import ServerRoot
from jupyter_exec.session import AsyncSession, Backend, OutputCallback
from jupyter_exec.state import Checkpoint

if TYPE_CHECKING:
    from jupyter_exec.network.proxy import NetworkProxy

__all__ = [
    "InvalidRequest",
    "ServerSession",
    "ServerSessions",
    "SessionConflict",
    "SessionLimitReached",
]

log = logging.getLogger("jupyter_exec.server")


class SessionLimitReached(SessionLimitError):
    """The session manager's limit is reached (``max_sessions``, ``max_sessions_per_backend``).

    A subclass of the manager's error under its own name, which REST clients
    see in the error body (``"error": "SessionLimitReached"``) as before.
    """


class ServerSessions(Branches):
    """The sessions of one Jupyter server, keyed by id, held by an :class:`AsyncSessionManager`.

    ``serverapp`` supplies the managers (kernel, session, contents) and the
    root; ``manager`` holds the sessions (limits, culling, shutdown); the
    remaining arguments are the extension's configuration. Besides the
    manager, only what the REST API shows of each session is kept here, and
    dropped as soon as the manager no longer holds the session.
    """

    def __init__(
        self,
        serverapp: Any,
        *,
        manager: AsyncSessionManager,
        default_work_dir: str,
        kernel_names: dict[str, str],
        timeout: float | None,
        startup_timeout: float = 60.0,
        approval_timeout: float = 120.0,
    ) -> None:
        self.serverapp = serverapp
        self.root = ServerRoot(
            serverapp.root_dir,
            serverapp.base_url,
            allow_hidden=bool(getattr(serverapp.contents_manager, "allow_hidden", False)),
        )
        self.default_work_dir = default_work_dir
        self.kernel_names = dict(kernel_names)
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self.manager = manager
        self.approvals = Approvals(approval_timeout)
        self._sessions: dict[str, ServerSession] = {}
        self._reserved: set[Path] = set()  # notebooks of sessions being created
        self._borrowing: set[str] = set()  # kernels being attached to, by sessions being created
        self._background: set[asyncio.Task[Any]] = set()
        self._stopping = False

    @property
    def max_sessions(self) -> int:
        """The manager's ``max_sessions`` (0: no limit); settable, e.g. by tests."""
        return self.manager.max_sessions

    @max_sessions.setter
    def max_sessions(self, value: int) -> None:
        self.manager.max_sessions = value

    async def start(self) -> None:
        """Start the manager (its culler). Idempotent; the first request does it if need be.

        jupyter_server initialises extensions before its event loop runs, and
        the manager needs a running loop, so the app starts it from its async
        start hook, and :meth:`create` makes sure of it.
        """
        await self.manager.start()

    # -- lookup ------------------------------------------------------------------------

    def _current(self) -> dict[str, ServerSession]:
        """The sessions the manager still holds (its culler may have closed some)."""
        for gone in [sid for sid in self._sessions if sid not in self.manager]:
            del self._sessions[gone]
        return self._sessions

    def __len__(self) -> int:
        return len(self._current())

    def list(self) -> list[ServerSession]:
        return list(self._current().values())

    def get(self, session_id: str) -> ServerSession:
        """The session ``session_id``; raises :class:`SessionNotFound` if there is none.

        Looking does not count as use: only acting on a session (:meth:`live`)
        keeps it from being culled, as with Jupyter's own kernel culler.
        """
        try:
            return self._current()[session_id]
        except KeyError:
            raise SessionNotFound(f"no session with id {session_id!r}") from None

    def live(self, session_id: str) -> ServerSession:
        """The session, if its kernel still exists (a person may shut it down in JupyterLab)."""
        entry = self.get(session_id)
        self.manager.get(session_id)  # a use: the culler's clock starts again
        if entry.kernel_id not in self.serverapp.kernel_manager:
            raise KernelNotAliveError(
                f"the kernel of session {session_id!r} was shut down outside this API "
                "(e.g. from JupyterLab); delete the session and create a new one"
            )
        return entry

    # -- lifecycle ---------------------------------------------------------------------

    async def create(
        self,
        *,
        work_dir: str | None = None,
        name: str | None = None,
        backend: Backend | None = None,
        kernel_name: str | None = None,
        timeout: float | None = None,
        undo_steps: int = 0,
        network: Any = None,
        kernel_id: str | None = None,
    ) -> ServerSession:
        """Start a kernel on the server, attach a recording session, bind its notebook.

        ``network`` (the body's policy object) is checked before anything starts; for
        a Docker session it starts the proxy that is the kernel's only way out.
        ``kernel_id``: attach to that running server kernel instead (a person's, see
        :mod:`~jupyter_exec.server.borrow`); the kernel decides the backend and kernelspec.
        """
        await self.start()
        borrowed = None
        if kernel_id is not None:  # no await from this check to the kernel's reservation below
            borrowed = borrow.check(self, kernel_id, backend, kernel_name, undo_steps, network)
            backend, kernel_name = borrowed.backend, borrowed.kernel_name
        backend = backend or "local"
        if backend not in self.kernel_names:
            raise InvalidRequest(
                f"unknown backend {backend!r}: use one of {', '.join(sorted(self.kernel_names))}"
            )
        if name is not None:
            try:
                validate_name(name)
            except ValueError as exc:
                raise InvalidRequest(str(exc)) from None
        if not 0 <= undo_steps <= MAX_UNDO_STEPS:
            raise InvalidRequest(
                f"'undo_steps' must be from 0 to {MAX_UNDO_STEPS} (cells that undo can take "
                f"back), not {undo_steps}"
            )
        session_id = uuid.uuid4().hex
        policy = (
            None
            if network is None
            else checked_policy(network, backend, self.approvals.asker(session_id))
        )
        kernel_name = kernel_name or self.kernel_names[backend]
        if borrowed is None:
            await self._check_kernelspec(kernel_name)
        folder = self.root.resolve(self.default_work_dir if work_dir is None else work_dir)
        self._make_folder(folder)
        name = self._reserve(folder, name)
        notebook = folder / f"{name}.ipynb"
        started: list[ServerSession] = []
        launch = _Launch(backend, kernel_name, timeout, undo_steps, policy, kernel_id)

        async def start() -> AsyncSession:
            entry = await self._start(session_id, folder, name, launch)
            started.append(entry)
            return entry.session

        if kernel_id is not None:
            self._borrowing.add(kernel_id)
        try:
            # The manager checks its limits before start() runs: no kernel for a refused session.
            await self.manager.add(session_id, start, backend=backend)
        except SessionLimitError as exc:
            raise self._limit_reached(exc) from None
        finally:
            self._reserved.discard(notebook)
            self._borrowing.discard(kernel_id or "")
        entry = started[0]
        self._sessions[entry.id] = entry
        return entry

    def _limit_reached(self, exc: SessionLimitError) -> SessionLimitError:
        return SessionLimitReached(
            f"{exc} (c.AsyncSessionManager.max_sessions / max_sessions_per_backend, or "
            "JupyterExecApp.max_sessions); delete a session first"
        )

    def _make_folder(self, folder: Path) -> None:
        """Create the work dir (an existing one is fine); a path that cannot be one is refused."""
        shown = self.root.api_path(folder)
        if folder.exists() and not folder.is_dir():
            raise InvalidRequest(f"work_dir {shown!r} is a file, not a folder; name a folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkDirError(
                f"cannot create work_dir {shown!r}: {exc.strerror}; choose another folder"
            ) from exc

    async def _start(
        self, session_id: str, folder: Path, name: str, launch: _Launch
    ) -> ServerSession:
        kernel_manager = self.serverapp.kernel_manager
        notebook = folder / f"{name}.ipynb"
        notebook_api = self.root.api_path(notebook)
        env = {**os.environ, "JPY_SESSION_NAME": str(notebook)}
        proxy = await _start_proxy(launch.policy, name)
        try:
            kernel_id = launch.borrowed or await self._start_server_kernel(
                launch.kernel_name, folder, env, network_proxy=proxy
            )
        except BaseException:
            if proxy is not None:
                await proxy.close()
            raise
        session = ServerAsyncSession(
            work_dir=folder,
            name=name,
            kernel_name=launch.kernel_name,
            backend=launch.backend,
            timeout=self.timeout if launch.timeout is None else launch.timeout,
            startup_timeout=self.startup_timeout,
            undo_steps=launch.undo_steps,
            kernel_manager=kernel_manager.get_kernel(kernel_id),
        )
        session.network_proxy = proxy
        try:
            await session.start()
            live.attach(session, self.serverapp, notebook_api)
            model = await self.serverapp.session_manager.create_session(
                path=notebook_api, name=notebook.name, type="notebook", kernel_id=kernel_id
            )
        except BaseException:
            await session.close()
            if launch.borrowed is None:  # a person's kernel stays theirs
                await self._shutdown_kernel(kernel_id)
            if proxy is not None:
                await proxy.close()
            raise
        entry = ServerSession(
            id=session_id,
            session=session,
            backend=launch.backend,
            kernel_name=launch.kernel_name,
            kernel_id=kernel_id,
            work_dir=folder,
            created=datetime.now(timezone.utc).isoformat(),
            jupyter_session_id=model.get("id"),
            policy=launch.policy,
            proxy=proxy,
            borrowed=launch.borrowed,
        )
        session.on_close = lambda: self._release(entry)
        log.info("jupyter-exec session %s: kernel %s, notebook %s", entry.id, kernel_id, notebook)
        return entry

    async def _start_server_kernel(
        self,
        kernel_name: str,
        folder: Path,
        env: dict[str, str] | None = None,
        *,
        network_proxy: NetworkProxy | None = None,
    ) -> str:
        """A kernel from the server's own kernel manager (so JupyterLab lists it); its id.

        ``network_proxy``: the Docker provisioner mounts it as the kernel's only way out.
        """
        kwargs: dict[str, Any] = {"kernel_name": kernel_name, "path": self.root.api_path(folder)}
        if env is not None:
            kwargs["env"] = env
        if network_proxy is not None:
            kwargs["network_proxy"] = str(network_proxy.folder)
        try:
            return str(await ensure_async(self.serverapp.kernel_manager.start_kernel(**kwargs)))
        except JupyterExecError:
            raise
        except Exception as exc:  # jupyter_client, provisioners and gateways raise assorted types
            raise KernelStartError(f"could not start kernel {kernel_name!r}: {exc}") from exc

    async def _check_kernelspec(self, kernel_name: str) -> None:
        specs = await ensure_async(self.serverapp.kernel_spec_manager.get_all_specs())
        if kernel_name not in specs:
            hint = (
                "; install jupyter-exec's kernelspecs with `jupyter-exec kernels install`"
                if kernel_name == self.kernel_names.get("docker")
                else ""
            )
            raise InvalidRequest(
                f"no kernelspec named {kernel_name!r} on this server "
                f"(available: {', '.join(sorted(specs)) or 'none'}){hint}"
            )

    def _reserve(self, folder: Path, name: str | None) -> str:
        """A session name whose notebook does not exist yet, reserved until the session starts."""
        taken = {e.notebook for e in self._current().values()} | self._reserved

        def free(candidate: str) -> bool:
            path = folder / f"{candidate}.ipynb"
            return path not in taken and not path.exists()

        if name is not None:
            if not free(name):
                raise SessionConflict(
                    f"{self.root.api_path(folder / f'{name}.ipynb')!r} exists already; "
                    "choose another name or work_dir"
                )
        else:
            name = default_session_name(folder, taken=lambda n: not free(n))
        self._reserved.add(folder / f"{name}.ipynb")
        return name

    async def delete(self, session_id: str) -> None:
        """Disconnect, unbind the notebook and shut the kernel down (the notebook stays)."""
        self.get(session_id)
        await self.manager.close(session_id)  # the session's on_close: _release

    async def _release(self, entry: ServerSession) -> None:
        """The server's side of a closed session: its Jupyter session and kernels go too.

        Runs however the session was closed (DELETE, the manager's culler). Not
        while the extension stops: the server shuts its kernels down itself.
        """
        self._sessions.pop(entry.id, None)
        self.approvals.deny_all(entry.id)
        try:
            if self._stopping:
                return
            sessions = await self.serverapp.session_manager.list_sessions()
            bound = [s["id"] for s in sessions if s.get("id") == entry.jupyter_session_id]
            for jupyter_session_id in bound:  # shuts the kernel down too, unless borrowed
                if entry.kernel_id == entry.borrowed:
                    await borrow.unbind(self.serverapp.session_manager, jupyter_session_id)
                else:
                    await self.serverapp.session_manager.delete_session(jupyter_session_id)
            await self._stop_kernels(entry)
        finally:
            if entry.proxy is not None:
                await entry.proxy.close()

    async def _shutdown_kernel(self, kernel_id: str) -> None:
        kernel_manager = self.serverapp.kernel_manager
        if kernel_id in kernel_manager:
            try:
                await ensure_async(kernel_manager.shutdown_kernel(kernel_id))
            except Exception:  # gone meanwhile, or a gateway that already dropped it
                log.warning("could not shut down kernel %s", kernel_id, exc_info=True)

    async def close(self) -> None:
        """Stop the manager, disconnecting every session (the server shuts the kernels down)."""
        self._stopping = True
        for task in list(self._background):
            task.cancel()
        await self.manager.shutdown()
        self._sessions.clear()

    # -- work --------------------------------------------------------------------------

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
    ) -> dict[str, Any]:
        """Re-run a notebook under the root on a fresh server kernel; the report as JSON.

        The kernel comes from the server's kernel manager (so it is visible, and
        runs on the gateway if there is one) and is shut down afterwards. The
        replay is recorded beside the notebook as ``<stem>.replayed.ipynb``.
        """
        from jupyter_exec.replay import replay_async  # imported on use: it is a big module

        path = self.root.resolve(notebook)
        if path.suffix != ".ipynb" or not path.is_file():
            raise InvalidRequest(f"no notebook at {notebook!r} (an .ipynb file under the root)")
        if until is not None and until < 0:
            raise InvalidRequest(f"'until' must be 0 or more, not {until}")
        try:  # read here too, so a notebook that cannot be replayed starts no kernel
            recorded = read_notebook(path)
        except NotebookError as exc:
            raise InvalidRequest(f"{notebook!r} cannot be replayed: {exc}") from None
        kernel_name = kernel_name or _kernelspec_of(recorded) or self.kernel_names["local"]
        await self._check_kernelspec(kernel_name)
        kernel_manager = self.serverapp.kernel_manager
        kernel_id = await self._start_server_kernel(kernel_name, path.parent)
        try:
            report = await replay_async(
                path,
                until=until,
                timeout=self.timeout if timeout is None else timeout,
                kernel_name=kernel_name,
                kernel_manager=kernel_manager.get_kernel(kernel_id),
                startup_timeout=self.startup_timeout,
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

    # -- views -------------------------------------------------------------------------

    def model(self, entry: ServerSession) -> dict[str, Any]:
        """The JSON model of a session (the ``Session`` schema of the OpenAPI spec)."""
        notebook_api = self.root.api_path(entry.notebook)
        return {
            "id": entry.id,
            "name": entry.name,
            "backend": entry.backend,
            "kernel": {
                "id": entry.kernel_id,
                "name": entry.kernel_name,
                "alive": entry.kernel_id in self.serverapp.kernel_manager,
            },
            "owns_kernel": entry.kernel_id != entry.borrowed,
            "work_dir": self.root.api_path(entry.work_dir),
            "notebook": {"path": notebook_api, "url": self.root.url_of(notebook_api)},
            "jupyter_session_id": entry.jupyter_session_id,
            "created": entry.created,
            "cells": len(recorder) if (recorder := entry.session.recorder) is not None else 0,
            "busy": entry.session.busy,
            "parent": entry.parent,
            "forks": [f for f in entry.forks if f in self._sessions],
            "undo_steps": entry.session.options.undo_steps,
            "network": policy_model(entry.policy),
            **live_fields(entry, self.serverapp.kernel_manager),
        }

    def checkpoint_model(self, checkpoint: Checkpoint) -> dict[str, Any]:
        """A checkpoint as JSON (the ``Checkpoint`` schema); a durable one's file as an API path."""
        path = getattr(checkpoint, "path", None)
        shown = None
        if isinstance(path, (str, os.PathLike)):  # a checkpoint kept on disk
            with contextlib.suppress(JupyterExecError, ValueError):
                shown = self.root.api_path(Path(path))
        return {
            "name": checkpoint.name,
            "cell_index": checkpoint.cell_index,
            "created": checkpoint.created.isoformat(),
            "session": checkpoint.session,
            "path": shown,
        }

    def execution_model(self, execution: Execution) -> dict[str, Any]:
        """An Execution as JSON, with every file as its API path and ``/files/`` URL."""
        data = execution.to_dict()
        models: dict[Path, dict[str, str]] = {}  # saved outputs are also in execution.files

        def file(path: Path) -> dict[str, str]:
            if path not in models:
                models[path] = self._file(path)
            return dict(models[path])

        data["files"] = [file(p) for p in execution.files]
        data["spilled"] = [file(p) for p in execution.spilled]
        for result, out in zip(execution.results, data["results"], strict=True):
            out["files"] = {mime: file(path) for mime, path in result.files.items()}
        return data

    def _file(self, path: Path) -> dict[str, str]:
        api = self.root.api_path(path)
        return {"path": api, "url": self.root.url_of(api)}


@dataclass(frozen=True)
class _Launch:
    """What a new session's kernel is started with."""

    backend: Backend
    kernel_name: str
    timeout: float | None
    undo_steps: int
    policy: NetworkPolicy | None
    borrowed: str | None = None
    """The id of a running server kernel to attach to instead of starting one."""


async def _start_proxy(policy: NetworkPolicy | None, name: str) -> NetworkProxy | None:
    """The host-side proxy a Docker kernel with ``policy`` reaches the network through."""
    if policy is None:
        return None
    from jupyter_exec.network.proxy import NetworkProxy

    return await NetworkProxy(policy, session=name).start()


def _kernelspec_of(notebook: Any) -> str | None:
    """The kernelspec named in a notebook's metadata, if any."""
    spec = notebook.metadata.get("kernelspec")
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else None
