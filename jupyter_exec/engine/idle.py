"""An idle session's ask for its last cell's saved state, so it is signed without a next cell.

After each cell the kernel's writer saves the cell's state in the background
(:mod:`jupyter_exec.state.generations`); it is signed when the next cell's reply
says it is written. A session that stays idle would leave the last one unsigned,
and a kill would lose it, so while no cell runs the session asks now and then
(one silent request each time), taking its execution lock for the ask: a cell
that comes first signs it with its reply instead. The ask does not make the
session :attr:`~jupyter_exec.AsyncSession.busy`, and ``close()`` lets one in
flight end first (:meth:`IdleSigner.finish`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jupyter_exec.engine.core import KernelSlot
    from jupyter_exec.engine.kernel import KernelHandle

__all__ = ["IDLE_SIGN_FIRST", "IDLE_SIGN_FOR", "IDLE_SIGN_MOST", "IdleSigner"]

IDLE_SIGN_FIRST = 0.05
IDLE_SIGN_MOST = 1.0
IDLE_SIGN_FOR = 600.0
"""An idle session asks for its last cell's state after 50 ms, then at doubling intervals up
to a second, for at most ten minutes (a write of many GB); each ask is one silent request."""


class IdleSigner:
    """Asks for the last cell's state while the session is idle.

    ``unsigned(kernel)`` says whether there is something to sign, ``sign(kernel)``
    asks for it (the session's state answers both); ``closed()`` says the
    session is closing.
    """

    def __init__(
        self,
        slot: KernelSlot,
        unsigned: Callable[[KernelHandle], bool],
        sign: Callable[[KernelHandle], Awaitable[None]],
        closed: Callable[[], bool],
    ) -> None:
        self._slot = slot
        self._unsigned = unsigned
        self._sign = sign
        self._closed = closed
        self._task: asyncio.Future[None] | None = None
        self.signing = False
        """An ask holds the session's lock now (not a cell: the session is not busy)."""

    def after_cell(self, kernel: KernelHandle) -> None:
        """A cell ended on ``kernel``: ask for its state while nothing else runs."""
        if self._task is not None and not self._task.done():
            return
        if self._unsigned(kernel):
            self._task = asyncio.ensure_future(self._poll(kernel))

    async def _poll(self, kernel: KernelHandle) -> None:
        delay, waited = IDLE_SIGN_FIRST, 0.0
        while waited < IDLE_SIGN_FOR and self._unsigned(kernel):
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, IDLE_SIGN_MOST)
            slot = self._slot
            if self._closed() or slot.is_locked() or slot.kernel is not kernel:
                return  # a cell runs (its reply signs), or the kernel is another
            async with slot.locked():
                if slot.kernel is kernel and not self._closed():
                    self.signing = True
                    try:
                        await self._sign(kernel)
                    finally:
                        self.signing = False

    async def finish(self, wait: float, cell_running: bool) -> None:
        """The session closes: an ask in flight ends first (up to ``wait`` seconds, unless a
        cell holds the lock instead), and no other starts."""
        task = self._task
        if task is None or task.done():
            return
        if self._slot.is_locked() and not cell_running:
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), wait)
        task.cancel()
