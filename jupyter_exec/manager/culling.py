"""Closing idle sessions, or putting them to sleep: which are idle, and the loop that looks.

A session counts as idle from its own last activity (observed here, not
bookkept on every call), and a busy session is never culled however long its
cell runs. The loop reads the manager's traits on every turn, so a changed
``cull_idle_timeout``, ``sleep_after`` or ``cull_interval`` takes effect without a restart.
A sleeping session (``sleep_after``) holds no kernel; it is still closed once idle past
``cull_idle_timeout``, which a wake (its next call) puts off like any use.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from jupyter_exec.exceptions import CheckpointError, KernelNotAliveError, SessionClosedError
from jupyter_exec.manager.registry import SessionRegistry

if TYPE_CHECKING:
    from jupyter_exec.manager.aio import AsyncSessionManager

__all__ = ["cull_loop", "idle_names", "sleep_idle"]

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


async def sleep_idle(registry: SessionRegistry, after: float) -> list[str]:
    """Put the open sessions idle for ``after`` seconds to sleep (not those asleep already,
    nor those that cannot sleep: said once, at info); the names put to sleep."""
    slept: list[str] = []
    for name in idle_names(registry, after):
        entry = registry.live_entry(name)
        if entry is None or entry.session.sleeping or entry.cannot_sleep:
            continue
        try:
            unsaved = await entry.session.sleep()
        except CheckpointError as exc:
            entry.cannot_sleep = True
            log.info("session %s stays awake: %s", name, exc)
            continue
        except (SessionClosedError, KernelNotAliveError):
            continue  # closed, or its kernel gone, meanwhile: nothing to save
        entry.last_used = time.monotonic()  # asleep from now: cull_idle_timeout counts on
        slept.append(name)
        if unsaved:
            log.info("session %s asleep; not saved: %s", name, ", ".join(unsaved))
    return slept


async def cull_loop(manager: AsyncSessionManager) -> None:
    """Call ``manager.cull_idle()`` now and then, until cancelled (by its shutdown)."""
    while True:
        interval = manager.cull_interval
        for limit in (manager.cull_idle_timeout, manager.sleep_after):
            if limit > 0:
                interval = min(interval, max(limit / 2, 0.05))
        await asyncio.sleep(interval)
        try:
            await manager.sleep_idle()
            await manager.cull_idle()
        except Exception:
            log.exception("culling idle sessions failed")
