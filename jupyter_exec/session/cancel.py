"""A cell run to its end although its caller was cancelled: interrupted, recorded, idle.

Servers and commands that stop (the MCP server, replay) cancel the task
waiting on a cell. Abandoning the cell there would leave it running and
unrecorded; this interrupts it and waits a little, so the notebook holds it
and the kernel is idle when the session closes.
"""

from __future__ import annotations

import asyncio
import contextlib

from jupyter_exec.models import Execution
from jupyter_exec.session.session import AsyncSession

__all__ = ["STOP_WAIT", "execute_to_the_end"]


STOP_WAIT = 15.0
"""Seconds a cancelled cell gets, once interrupted, to end and be recorded."""


async def execute_to_the_end(
    session: AsyncSession, source: str, timeout: float | None = None
) -> Execution:
    """``session.execute(source)``, which a cancellation interrupts instead of abandoning.

    When the caller is cancelled (the server or command is stopping), the
    kernel is interrupted and the cell given :data:`STOP_WAIT` seconds to end,
    so it is recorded with its outputs and the kernel is idle when the session
    closes. The interrupt runs as its own task: a framework that cancels its
    caller again (anyio does, at every await) cannot break it off.
    """
    running = asyncio.ensure_future(session.execute(source, timeout=timeout))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        stopping = asyncio.ensure_future(_interrupt_and_wait(session, running))
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(stopping)
        raise


async def _interrupt_and_wait(session: AsyncSession, running: asyncio.Future[Execution]) -> None:
    with contextlib.suppress(Exception):
        await session.interrupt()
        await asyncio.wait_for(asyncio.shield(running), STOP_WAIT)
