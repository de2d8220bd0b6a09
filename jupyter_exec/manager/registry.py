"""The named sessions of one manager: open, being created, being closed; and the limits.

Kept apart from :class:`~jupyter_exec.manager.aio.AsyncSessionManager` because
this is the part with the subtle invariants: a name is held while its session is
made (a second caller waits for the same one instead of starting a second
kernel), the limits count sessions being made as well as open ones, a session
closed directly by its user drops out of every count, and a close runs to the
end even if its caller is cancelled. The manager decides *what* to make (pools,
options); this registry decides *whether* and keeps the books.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from jupyter_exec.boundary.naming import validate_name
from jupyter_exec.exceptions import SessionLimitError
from jupyter_exec.manager.entries import Entry
from jupyter_exec.session.session import AsyncSession

__all__ = ["SessionRegistry"]

log = logging.getLogger("jupyter_exec.manager")


class SessionRegistry:
    """Open sessions by name, names held while their session is made, closes under way."""

    def __init__(self) -> None:
        self.sessions: dict[str, Entry] = {}
        self.creating: dict[str, tuple[str, asyncio.Future[AsyncSession]]] = {}
        self.closing: set[asyncio.Future[None]] = set()

    def live_entry(self, name: str) -> Entry | None:
        entry = self.sessions.get(name)
        if entry is not None and entry.closed:  # closed directly by its user
            del self.sessions[name]
            return None
        return entry

    async def existing(self, name: str) -> AsyncSession | None:
        """The open (or being created) session ``name``; ``None`` if a new one may be made."""
        entry = self.live_entry(name)
        if entry is not None:
            entry.last_used = time.monotonic()
            return entry.session
        if name in self.creating:
            return await asyncio.shield(self.creating[name][1])
        validate_name(name)
        return None

    def check_limits(self, backend: str, max_sessions: int, per_backend: Mapping[str, int]) -> None:
        live = [e.backend for n, e in list(self.sessions.items()) if self.live_entry(n)]
        active = live + [b for b, _ in self.creating.values()]
        if max_sessions and len(active) >= max_sessions:
            raise SessionLimitError(
                f"this manager already has {len(active)} sessions (max_sessions="
                f"{max_sessions}); close one or raise the limit"
            )
        cap = per_backend.get(backend)
        if cap is not None and active.count(backend) >= cap:
            raise SessionLimitError(
                f"this manager already has {active.count(backend)} {backend!r} sessions "
                f"(max_sessions_per_backend[{backend!r}]={cap}); close one or raise the limit"
            )

    async def register(
        self, name: str, backend: str, make: Callable[[], Awaitable[Entry]]
    ) -> AsyncSession:
        """Hold ``name`` while ``make`` runs, then keep its session (limits checked before)."""
        future: asyncio.Future[AsyncSession] = asyncio.get_running_loop().create_future()
        self.creating[name] = (backend, future)
        try:
            entry = await make()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
                future.exception()  # retrieved: no "never retrieved" warning if nobody waits
            raise
        finally:
            del self.creating[name]
        self.sessions[name] = entry
        future.set_result(entry.session)
        return entry.session

    async def close_entry(self, name: str, why: str, *, now: bool = False) -> None:
        """Close a session to the end, even if the caller is cancelled meanwhile.

        A kernel shutdown cut half-way (the culler cancelled by the manager's
        shutdown, a request abandoned) could leave its host with a kernel
        neither running nor gone; so the close runs as a task of its own, which
        the manager's shutdown waits for (:attr:`closing`).
        """
        entry = self.sessions.pop(name, None)
        if entry is None:
            return
        log.info("closing session %s (%s)", name, why)
        task = asyncio.ensure_future(self._close_session(name, entry, now))
        self.closing.add(task)
        task.add_done_callback(self.closing.discard)
        await asyncio.shield(task)

    @staticmethod
    async def _close_session(name: str, entry: Entry, now: bool = False) -> None:
        try:
            await entry.session.close(now=now)
        except Exception:
            log.exception("session %s did not close cleanly", name)
