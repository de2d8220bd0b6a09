"""Graceful shutdown on SIGTERM, without taking the signal away from a host application.

The handler closes every session (stopping kernels and containers), then
restores what was there before and raises SIGTERM again, so the process ends
the way it would have without us (killed by the signal, or the host's own
handler runs). It is only installed in the main thread, where signals are
delivered.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Awaitable, Callable

__all__ = ["LoopSigterm"]

log = logging.getLogger("jupyter_exec.manager")


class LoopSigterm:
    """SIGTERM -> ``shutdown()`` on an asyncio loop running in the main thread."""

    def __init__(self, shutdown: Callable[[], Awaitable[None]]) -> None:
        self._shutdown = shutdown
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            log.warning("handle_sigterm: the event loop is not in the main thread; not installed")
            return False
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        except (NotImplementedError, RuntimeError, ValueError) as exc:
            log.warning("handle_sigterm: cannot install a SIGTERM handler: %s", exc)
            return False
        self._loop = loop
        return True

    def remove(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_signal_handler(signal.SIGTERM)

    def _on_sigterm(self) -> None:
        log.warning("SIGTERM: closing every session")
        task = asyncio.ensure_future(self._shutdown())

        def then_terminate(_: asyncio.Future[None]) -> None:
            self.remove()
            signal.raise_signal(signal.SIGTERM)

        task.add_done_callback(then_terminate)
