"""The extension's sessions: AsyncSessions on kernels owned by the Jupyter server.

Everything the REST handlers do goes through :class:`ServerSessions`, which
knows nothing of HTTP: it raises jupyter-exec's exceptions, and the handlers
translate them into status codes in one place.

A session's life::

    create  ─► checked, its kernel started, notebook bound (server.create) ─► manager.add
    held    ─► keyed by id; execute, fork, undo... act on it through live()
    delete  ─► manager.close, or the culler ─► _release: unbind the notebook, stop the kernel
    saved   ─► each session has an entry in the registry (server.saved) until it is closed;
               after a restart it is listed as ``dormant`` and brought back on first use
               (wake: a new kernel, its state rebuilt from its notebook by Session.resume;
               the manager's DormantSessions, shared with the MCP and E2B servers)

Every session is held by the extension's :class:`~jupyter_exec.manager.AsyncSessionManager`
(``manager.add``), keyed by the session's id: its limits (``max_sessions``,
``max_sessions_per_backend``) refuse a session before any kernel starts, and
its culler closes sessions idle for ``cull_idle_timeout``. Warm pools do not
apply: the kernels must be the server's own.

The kernel belongs to the server: deleting (or culling) a session shuts it
down through the server's managers; stopping the extension only disconnects.

Creating is in :mod:`~jupyter_exec.server.create`, running code and replays
in :mod:`~jupyter_exec.server.work`, the JSON models in
:mod:`~jupyter_exec.server.views`; forks, undo, checkpoints and restart are in
:mod:`~jupyter_exec.server.branches` (which keeps the server's kernels in step
with the engine's). They are mixins of :class:`ServerSessions`, which keeps the
sessions and their lifecycle.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from pathlib import Path
from typing import Any

from jupyter_core.utils import ensure_async

from jupyter_exec.exceptions import KernelNotAliveError, SessionConflict, SessionNotFound
from jupyter_exec.manager import AsyncSessionManager
from jupyter_exec.manager.dormant import DormantSessions
from jupyter_exec.server import borrow
from jupyter_exec.server.approvals import Approvals
from jupyter_exec.server.bodies import InvalidRequest
from jupyter_exec.server.branches import Branches
from jupyter_exec.server.create import Creation, SessionLimitReached
from jupyter_exec.server.entry import ServerSession
from jupyter_exec.server.origins import ReplayOrigins
from jupyter_exec.server.paths import ServerRoot
from jupyter_exec.server.saved import SavedSession, SessionRegistry
from jupyter_exec.server.sleeping import Asleep, Sleeping
from jupyter_exec.server.views import Views
from jupyter_exec.server.work import Work

__all__ = [
    "InvalidRequest",
    "ServerSession",
    "ServerSessions",
    "SessionConflict",
    "SessionLimitReached",
]

log = logging.getLogger("jupyter_exec.server")


# The mixins that provide methods come before those that only declare them (Work and
# Branches declare, as NotImplementedError stubs, what Creation and Views define).
class ServerSessions(Creation, Sleeping, Views, Work, Branches):
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
        self.replay_origins = ReplayOrigins()  # what each session ran: the kernel a replay uses
        self._borrowing: set[str] = set()  # kernels being attached to, by sessions being created
        self._background: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self.saved = SessionRegistry(self.root, self.kernel_names)
        self.dormant: DormantSessions[SavedSession] = DormantSessions(
            {s.id: s for s in self.saved.load()},
            wake=self._resume_saved,
            forget=self.saved.remove,
            live=lambda session_id: session_id in self._sessions,
        )
        """Sessions of the server before it restarted, not used since (see :meth:`wake`)."""
        self._dormant_cells: dict[str, int] = {}  # counted once, for the listing
        self._asleep: dict[str, Asleep] = {}  # put to sleep by this run (server.sleeping)
        self._falling_asleep: dict[str, asyncio.Future[dict[str, str]]] = {}
        self._keep_saved: set[str] = set()  # closing to sleep: the saved entry stays
        if len(self.dormant):
            log.info("jupyter-exec: %d session(s) from before the restart", len(self.dormant))

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

    def models(self) -> builtins.list[dict[str, Any]]:
        """The listing: every live session, then those from before a restart not used since."""
        live = [self.model(e) for e in self.list()]
        return live + [self.saved_model(s) for s in self.dormant.list()]

    def model_of(self, session_id: str) -> dict[str, Any]:
        """One session's model, live or dormant; :class:`SessionNotFound` if there is none."""
        saved = self.dormant.get(session_id)
        if saved is not None:
            return self.saved_model(saved)
        return self.model(self.get(session_id))

    async def wake(self, session_id: str) -> None:
        """Bring back a session from before the restart, on its first use; else nothing.

        Concurrent first uses share one resume. A failed one (its notebook gone,
        the limit reached) leaves it dormant, the error said to the caller.
        """
        await self.woken(session_id)  # a sleep under way ends first
        if await self.dormant.wake(session_id):
            self.forget_sleep(session_id)

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

    async def delete(self, session_id: str) -> None:
        """Disconnect, unbind the notebook and shut the kernel down (the notebook stays)."""
        await self.woken(session_id)
        if await self.dormant.drop(session_id):  # not brought back: its entry goes, no kernel
            self.forget_sleep(session_id)
            return  # (one being brought back is waited for, and deleted below)
        self.get(session_id)
        await self.manager.close_session(session_id)  # the session's on_close: _release

    async def _release(self, entry: ServerSession) -> None:
        """The server's side of a closed session: its Jupyter session and kernels go too.

        Runs however the session was closed (DELETE, the manager's culler). Not
        while the extension stops: the server shuts its kernels down itself.
        """
        self._sessions.pop(entry.id, None)
        self.approvals.deny_all(entry.id)
        try:
            if self._stopping:
                return  # the server stops: the session comes back when it starts again
            if entry.id not in self._keep_saved:  # gone for good, not asleep
                self.saved.remove(entry.id)
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
