"""Closing idle sessions: which are idle, and the background loop that looks.

A session counts as idle from its own last activity (observed here, not
bookkept on every call), and a busy session is never culled however long its
cell runs. The loop reads the manager's traits on every turn, so a changed
``cull_idle_timeout`` or ``cull_interval`` takes effect without a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from jupyter_exec.manager.registry import SessionRegistry

if TYPE_CHECKING:
    from jupyter_exec.manager.aio import AsyncSessionManager

__all__ = ["cull_loop", "idle_names"]

log = logging.getLogger("jupyter_exec.manager")


def idle_names(registry: SessionRegistry, timeout: float) -> list[str]:
    """The open sessions not busy and unused for ``timeout`` seconds."""
    now = time.monotonic()
    idle = []
    for name in list(registry.sessions):
        entry = registry.live_entry(name)
        if entry is None:
            continue
        entry.observe(now)
        if not entry.busy and now - entry.last_used >= timeout:
            idle.append(name)
    return idle


async def cull_loop(manager: AsyncSessionManager) -> None:
    """Call ``manager.cull_idle()`` now and then, until cancelled (by its shutdown)."""
    while True:
        interval = manager.cull_interval
        if manager.cull_idle_timeout > 0:
            interval = min(interval, max(manager.cull_idle_timeout / 2, 0.05))
        await asyncio.sleep(interval)
        try:
            await manager.cull_idle()
        except Exception:
            log.exception("culling idle sessions failed")
