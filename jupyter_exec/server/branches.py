"""Forks, undo and checkpoints of the extension's sessions, kept in step with the server.

The engine does the work (:mod:`jupyter_exec.state.session_state`); what is added here is the
server's
side of it. A fork or an undo gives a session a kernel the engine started, and the server
must know it, or JupyterLab would keep showing (and connecting people to) the old one::

    POST .../fork        session.fork(n) ─► each fork's kernel adopted by the server's
                         kernel manager (:mod:`~jupyter_exec.server.adopt`), its notebook
                         bound to it (POST /api/sessions), held by the session manager
    POST .../undo        session.undo(n)       ─┐ the session's new kernel adopted, its
    POST .../restore     session.restore(name) ─┤ notebook rebound to it; the kernel it
    POST .../restart     session.restart()     ─┘ replaced shut down (or kept: below)

A Docker session's first kernel holds its container, where every fork and snapshot of it
runs: it is kept (listed, unbound) until the session ends, and the session's Docker forks
end with it. Every operation waits for a running cell, as the engine does; a dead kernel
is :class:`~jupyter_exec.KernelNotAliveError`, a kernel that cannot fork ``ForkError``.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from jupyter_core.utils import ensure_async

from jupyter_exec.exceptions import ForkError, SessionLimitError
from jupyter_exec.server.adopt import adopt, forget, kernel_id_of
from jupyter_exec.server.entry import ServerAsyncSession, ServerSession
from jupyter_exec.server.errors import CheckpointNotFound
from jupyter_exec.state.branching import MAX_FORKS
from jupyter_exec.state.session_state import Checkpoint

if TYPE_CHECKING:
    from jupyter_exec.manager import AsyncSessionManager
    from jupyter_exec.server.origins import ReplayOrigins
    from jupyter_exec.server.paths import ServerRoot

__all__ = ["Branches", "CheckpointNotFound"]


class Branches:
    """The fork, undo and checkpoint operations of :class:`~jupyter_exec.server.ServerSessions`."""

    serverapp: Any
    manager: AsyncSessionManager
    root: ServerRoot
    _sessions: dict[str, ServerSession]
    replay_origins: ReplayOrigins

    # Provided by ServerSessions.
    def live(self, session_id: str) -> ServerSession:
        raise NotImplementedError

    async def _release(self, entry: ServerSession) -> None:
        raise NotImplementedError

    async def _shutdown_kernel(self, kernel_id: str) -> None:
        raise NotImplementedError

    def _limit_reached(self, exc: SessionLimitError) -> SessionLimitError:
        raise NotImplementedError

    def _remember(self, entry: ServerSession) -> None:
        raise NotImplementedError

    # -- forks -------------------------------------------------------------------------

    async def fork(
        self, session_id: str, n: int = 1, name: str | None = None
    ) -> list[ServerSession]:
        """``n`` new sessions from the live state of ``session_id``, each bound to its notebook."""
        parent = self.live(session_id)
        limit = self.manager.max_sessions
        if limit and 1 <= n <= MAX_FORKS and len(self.manager) + n > limit:  # (else: the engine)
            raise self._limit_reached(
                SessionLimitError(
                    f"{n} fork(s) would make {len(self.manager) + n} sessions "
                    f"(max_sessions={limit})"
                )
            )
        children = await parent.session.fork(n, name)
        made: list[ServerSession] = []
        try:
            for child in children:
                made.append(await self._hold_fork(parent, child))
        except BaseException:
            for child in children[len(made) :]:
                await child.close()
            raise
        return made

    async def _hold_fork(self, parent: ServerSession, child: ServerAsyncSession) -> ServerSession:
        mkm = self.serverapp.kernel_manager
        notebook = child.notebook_path
        assert notebook is not None  # forks of a recording session record too
        assert child.handle is not None
        kernel_id = adopt(mkm, child.handle, parent.kernel_name, str(notebook))
        child.rebind(mkm.get_kernel(kernel_id))
        entry = ServerSession(
            id=uuid.uuid4().hex,
            session=child,
            backend=parent.backend,
            kernel_name=parent.kernel_name,
            kernel_id=kernel_id,
            work_dir=parent.work_dir,
            created=datetime.now(timezone.utc).isoformat(),
            parent=parent.id,
            policy=parent.policy,
        )
        child.on_close = lambda: self._release(entry)
        try:
            model = await self.serverapp.session_manager.create_session(
                path=self.root.api_path(notebook),
                name=notebook.name,
                type="notebook",
                kernel_id=kernel_id,
            )
            entry.jupyter_session_id = model.get("id")

            async def given() -> ServerAsyncSession:
                return child

            await self.manager.add(entry.id, given, backend=parent.backend)
        except SessionLimitError as exc:
            await child.close()
            raise self._limit_reached(exc) from None
        except BaseException:
            await child.close()
            raise
        self._sessions[entry.id] = entry
        self.replay_origins.remember(entry)
        self._remember(entry)
        parent.forks.append(entry.id)
        return entry

    # -- undo and checkpoints ------------------------------------------------------------

    async def undo(self, session_id: str, n: int = 1) -> ServerSession:
        entry = self.live(session_id)
        await entry.session.undo(n)
        await self._follow_kernel(entry)
        return entry

    async def checkpoint(self, session_id: str, name: str | None = None) -> Checkpoint:
        return await self.live(session_id).session.checkpoint(name)

    def checkpoints(self, session_id: str) -> list[Checkpoint]:
        return self.live(session_id).session.checkpoints()

    async def restore(self, session_id: str, name: str) -> ServerSession:
        entry = self.live(session_id)
        known = [c.name for c in entry.session.checkpoints()]
        if name not in known:
            raise CheckpointNotFound(
                f"session {session_id!r} has no checkpoint {name!r} "
                f"(its checkpoints: {', '.join(known) or 'none yet'})"
            )
        await entry.session.restore(name)
        await self._follow_kernel(entry)
        return entry

    async def restart(self, session_id: str) -> ServerSession:
        entry = self.live(session_id)
        if entry.parent is not None and entry.backend == "docker":
            raise ForkError(
                "a fork of a Docker session cannot be restarted: it runs in its parent's "
                "container and would need one of its own; delete it and fork the parent again"
            )
        await entry.session.restart()
        await self._follow_kernel(entry)
        return entry

    # -- keeping the server in step --------------------------------------------------------

    async def _follow_kernel(self, entry: ServerSession) -> None:
        """Make the kernel now serving ``entry`` the server's, bound to its notebook."""
        handle = entry.session.handle
        if handle is None:
            return
        mkm = self.serverapp.kernel_manager
        kernel_id = kernel_id_of(mkm, handle.km)
        if kernel_id is None:
            kernel_id = adopt(mkm, handle, entry.kernel_name, str(entry.notebook))
        if kernel_id == entry.kernel_id:
            return
        old, entry.kernel_id = entry.kernel_id, kernel_id
        if kernel_id in entry.held:
            entry.held.remove(kernel_id)
        entry.session.rebind(mkm.get_kernel(kernel_id))
        if entry.jupyter_session_id is not None:
            await self.serverapp.session_manager.update_session(
                entry.jupyter_session_id, kernel_id=kernel_id
            )
        await self._retire(entry, old)

    async def _retire(self, entry: ServerSession, kernel_id: str) -> None:
        """The kernel ``entry`` no longer uses: forgotten if stopped, kept if it holds the
        session's container, else shut down."""
        mkm = self.serverapp.kernel_manager
        if kernel_id not in mkm or kernel_id == entry.borrowed:  # a person's kernel stays theirs
            return
        if not await ensure_async(mkm.get_kernel(kernel_id).is_alive()):
            forget(mkm, kernel_id)
        elif entry.backend == "docker" and kernel_id == entry.first_kernel_id:
            entry.held.append(kernel_id)
        else:
            await self._shutdown_kernel(kernel_id)

    async def _stop_kernels(self, entry: ServerSession) -> None:
        """Every kernel of an ended session: stopped ones forgotten, the others shut down."""
        mkm = self.serverapp.kernel_manager
        for kernel_id in (entry.kernel_id, *entry.held):
            if kernel_id not in mkm or kernel_id == entry.borrowed:
                continue
            if await ensure_async(mkm.get_kernel(kernel_id).is_alive()):
                await self._shutdown_kernel(kernel_id)
            else:
                forget(mkm, kernel_id)
        if entry.backend == "docker":  # its forks ran in its container, which is gone now
            for fork_id in entry.forks:
                if fork_id in self.manager:
                    await self.manager.close_session(fork_id)
