"""The one owner of a session's kernel: the handle, the execution lock and the generation.

A session's kernel is replaced in more ways than it is started: a restart
(asked for, or after a death), an undo or a restore (a kernel from a snapshot),
a recovery, a Docker session's first kernel taken back. Each must change the
handle and the generation together, or a cell waiting on the old kernel would
not notice (the runner compares generations), and each must wait its turn on
the lock that keeps cells from interleaving. So one small object holds the
three, and every replacement goes through its methods, whoever asks: the
engine, or the state machinery through the session's public methods::

    place(kernel)   a start, a fork adopted, close (None): no cell can be waiting
    swap(kernel)    another kernel serves the session: a new generation
    restarting()    the same handle restarts: a new generation
    mark_lost(k)    the session knows ``k`` died (or will not stop): hooks give up
                    waiting on it at once, until it is replaced or restarted
    locked()        ``async with``: the session's execution lock (FIFO)

Nothing here talks to a kernel; :class:`~jupyter_exec.session.session.AsyncSession`
holds one slot and the per-cell hooks (:mod:`jupyter_exec.engine.hooks`) read it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jupyter_exec.engine.kernel import KernelHandle

__all__ = ["KernelSlot"]


class KernelSlot:
    """A session's kernel handle, its execution lock and its generation counter."""

    def __init__(self) -> None:
        self._kernel: KernelHandle | None = None
        self._lock = asyncio.Lock()
        self._generation = 0
        self._lost: KernelHandle | None = None

    @property
    def kernel(self) -> KernelHandle | None:
        """The kernel serving the session (``None`` before start and after close)."""
        return self._kernel

    @property
    def generation(self) -> int:
        """Counts replacements and restarts, so a cell waiting on the old kernel can tell."""
        return self._generation

    @property
    def lock(self) -> asyncio.Lock:
        """The execution lock itself (prefer :meth:`locked`; this is for ``locked()`` checks)."""
        return self._lock

    def is_locked(self) -> bool:
        """Whether a cell (or a state operation) holds the lock now."""
        return self._lock.locked()

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[None]:
        """Hold the session's execution lock: after the cells queued before, before the next."""
        async with self._lock:
            yield

    def place(self, kernel: KernelHandle | None) -> KernelHandle | None:
        """Put ``kernel`` in the slot without a new generation; the kernel it held.

        For the moments no cell can be waiting on a kernel: a start (or its
        undoing), a fork's session adopting its kernel, and close.
        """
        old, self._kernel = self._kernel, kernel
        self._lost = None
        return old

    def swap(self, new: KernelHandle) -> KernelHandle | None:
        """Make ``new`` serve the session (an undo's, a restore's or a recovery's kernel, a
        Docker session's first kernel taken back); the kernel it replaced, for the caller
        to retire. A cell still waiting on the old one ends: the generation changes."""
        old, self._kernel = self._kernel, new
        self._generation += 1
        self._lost = None
        return old

    def restarting(self) -> None:
        """The kernel is about to restart in place: a new generation, so a waiting cell ends."""
        self._generation += 1

    def restarted(self, kernel: KernelHandle) -> None:
        """``kernel`` restarted: whatever was known of its death is over."""
        if self._lost is kernel:
            self._lost = None

    def mark_lost(self, kernel: KernelHandle) -> None:
        """The session saw ``kernel`` die (or run away past its interrupt): nothing should wait
        on it any more (:meth:`known_dead`) until it is replaced or restarted."""
        self._lost = kernel

    def known_dead(self, kernel: KernelHandle | None) -> bool:
        """Whether ``kernel`` is one the session knows it cannot wait on: seen lost in a
        cell, or its process gone (a cheap check, no round trip)."""
        if kernel is None:
            return True
        return self._lost is kernel or not kernel.process_alive()
