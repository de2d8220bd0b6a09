"""Sessions a front end had before it restarted: listed, woken on first use, dropped.

Every front end that serves sessions (the REST extension, the MCP server, the
E2B server) keeps a signed entry per open session (:mod:`~jupyter_exec.manager.saved`),
so a run started again on the same root knows the sessions of the last one. None
of them starts a kernel for those on start: a session stays *dormant* until a
client names it, and is then woken, its state rebuilt from its notebook
(:meth:`~jupyter_exec.AsyncSession.resume`). :class:`DormantSessions` is that
part, written once::

    saved entries ──► DormantSessions(manager, {key: entry}, wake=..., forget=...)
    listing        ──► list() / get(key)          those not woken yet (no kernel)
    first use      ──► wake(key)                  one resume, shared by concurrent callers;
                                                  a failed one leaves it dormant
    delete/close   ──► drop(key)                  forgotten, its entry too, no kernel started

What each front end keeps of a session (its entry's fields), how it shows one
(JSON, text) and which kernel it wakes on stay the front end's: it passes the
``wake`` that starts the session under ``key`` in the manager (the E2B and MCP
servers through :func:`resume_into`, the same work dir, notebook and options;
the Jupyter server on a server kernel of its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from jupyter_exec.session.session import AsyncSession

if TYPE_CHECKING:
    from jupyter_exec.manager.aio import AsyncSessionManager

__all__ = ["DormantSessions", "resume_into"]

log = logging.getLogger("jupyter_exec")

S = TypeVar("S")


class DormantSessions(Generic[S]):
    """The sessions saved by the previous run that are not back yet, keyed as the manager
    keys them (a REST id, an MCP name, an E2B sandbox's context).

    ``wake(entry)`` brings one back (it adds the session to the manager under its
    key); ``forget(key)`` removes its saved entry; ``live(key)`` says whether a
    session with that key is open now (for most front ends: the manager holds it).
    """

    def __init__(
        self,
        entries: Mapping[str, S],
        *,
        wake: Callable[[S], Awaitable[object]],
        forget: Callable[[str], None],
        live: Callable[[str], bool],
    ) -> None:
        self._entries = dict(entries)
        self._wake = wake
        self._forget = forget
        self._live = live
        self._waking: dict[str, asyncio.Task[object]] = {}

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` names a session from before the restart, not open now."""
        return isinstance(key, str) and key in self._entries and not self._live(key)

    def __len__(self) -> int:
        return len(self.list())

    def get(self, key: str) -> S | None:
        """The saved entry of the dormant session ``key``; ``None`` if it is not one."""
        return self._entries.get(key) if key in self else None

    def list(self) -> list[S]:
        """Every dormant session's entry, in the order they were saved (their keys')."""
        return [entry for key, entry in self._entries.items() if key in self]

    def waking(self, key: str) -> bool:
        return key in self._waking

    async def wake(self, key: str) -> bool:
        """Bring back the dormant session ``key``; False (and nothing done) if it is not one.

        Concurrent first uses share one wake, which a caller giving up does not cancel;
        a failed one leaves the session dormant and raises its error to every caller.
        """
        task = self._waking.get(key)
        if task is None:
            entry = self._entries.get(key)
            if entry is None or self._live(key):
                return False
            task = asyncio.ensure_future(self._wake(entry))
            self._waking[key] = task
            task.add_done_callback(lambda _: self._waking.pop(key, None))
        await asyncio.shield(task)
        self._entries.pop(key, None)
        return True

    async def drop(self, key: str) -> bool:
        """Forget the dormant session ``key`` and its saved entry, starting no kernel; True
        if it was one. One being woken is waited for: it is then open, for the caller to
        close (False)."""
        if key not in self:
            return False
        if key in self._waking:
            await self.wake(key)
            return False
        del self._entries[key]
        self._forget(key)
        return True

    def add(self, key: str, entry: S) -> None:
        """``key`` is dormant from now on (a front end put it to sleep): listed, woken on
        its next use like a session from before a restart. Its saved entry must exist."""
        self._entries[key] = entry

    def discard(self, key: str) -> None:
        """No longer a dormant session (a new one took its key); its entry is the caller's."""
        self._entries.pop(key, None)


async def resume_into(
    manager: AsyncSessionManager,
    key: str,
    notebook: Path,
    options: Mapping[str, Any],
    *,
    backend: str,
) -> AsyncSession:
    """A session continuing ``notebook`` in its folder, under its stem, started and held by
    ``manager`` as ``key`` (its limits apply, as to a new one).

    ``options`` over the manager's ``session_defaults``: the same kernel, backend and
    options the front end gives a new session now.
    """
    merged = {**manager.session_defaults, **options}

    async def start() -> AsyncSession:
        session = AsyncSession.resume(
            notebook, work_dir=notebook.parent, name=notebook.stem, **merged
        )
        try:
            return await session.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await session.close()
            raise

    session = await manager.add(key, start, backend=backend)
    log.info("session %s: back after the restart (%s)", key, notebook)
    return session
