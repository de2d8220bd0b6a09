"""Stopping a command the way process managers do: SIGTERM and SIGHUP handled as Ctrl-C is.

systemd, ``docker stop`` and Kubernetes send SIGTERM; a closed terminal sends
SIGHUP. Both must end a command as cleanly as Ctrl-C: sessions closed, Docker
kernels stopped, notebooks saved, no spare file left. For blocking commands
(``run``, ``replay``, ``demo``) :func:`stop_signals` raises :class:`Stopped`
(a ``KeyboardInterrupt``) in the main thread, so every ``with Session`` and
``finally`` that cleans up after Ctrl-C runs unchanged. For servers on an
event loop, :func:`serve_until_stopped` runs the server as a task and, on any
of the three signals, cancels it, runs the cleanup, and raises
:class:`Stopped`. The command line turns it into exit status ``128 + signal``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from types import FrameType
from typing import Any, TypeVar

__all__ = ["STOP_SIGNALS", "Stopped", "serve_until_stopped", "stop_signals"]

T = TypeVar("T")

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""The signals handled like Ctrl-C (SIGHUP does not exist on Windows)."""


class Stopped(KeyboardInterrupt):
    """The process was asked to stop by ``signum``; cleanup runs as for Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Stopped` in the main thread while the block runs.

    The first signal starts the cleanup; repeats of it are ignored so they
    cannot break the cleanup off half way (SIGKILL still ends everything).
    Outside the main thread nothing is installed (signals are delivered there).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


SETTLE_POLL = 0.05
"""Seconds between looks at whether the cancelled cells have ended."""
CELL_GRACE = 10.0
"""Seconds a cell running at the signal gets to end its own way (interrupted, its
traceback recorded) before the cleanup closes its session anyway."""


async def serve_until_stopped(
    serve: Coroutine[Any, Any, T],
    cleanup: Callable[[], Awaitable[None]],
    busy: Callable[[], bool] | None = None,
) -> T | None:
    """Run ``serve``; on SIGINT, SIGTERM or SIGHUP stop it, run ``cleanup`` and raise Stopped.

    ``cleanup`` runs on every exit path, once. On a signal it runs as soon as the
    cancelled server has unwound or ``busy`` (cells in flight) says nothing runs any more,
    whichever comes first, and at most :data:`CELL_GRACE` seconds after the signal: a
    transport blocked in a thread (the stdio reader waits on stdin, which the client keeps
    open) never unwinds, and waiting for it cost every stop 10 s, the whole of
    ``docker stop``'s grace before its SIGKILL.
    """
    import asyncio  # here: the command line's parser, which imports this module, needs none

    loop = asyncio.get_running_loop()
    stop: asyncio.Future[int] = loop.create_future()

    def on_signal(signum: int) -> None:
        if not stop.done():
            stop.set_result(signum)

    installed: list[signal.Signals] = []
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, *STOP_SIGNALS):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, on_signal, int(sig))
                installed.append(sig)
    task: asyncio.Future[T] = asyncio.ensure_future(serve)
    waiting: set[asyncio.Future[Any]] = {task, stop}
    cleaned = False
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if not stop.done():
            return task.result()
        task.cancel()
        deadline = loop.time() + CELL_GRACE
        while not task.done() and loop.time() < deadline:
            await asyncio.wait({task}, timeout=SETTLE_POLL)  # handlers see the cancellation
            if busy is not None and not busy():
                break  # each cancelled cell has ended its own way (interrupted, recorded)
        cleaned = True
        await cleanup()
        raise Stopped(stop.result())
    finally:
        try:
            if not cleaned:
                await cleanup()
        finally:
            for sig in installed:
                # Ignored, not defaulted, until the process ends: a repeat must not kill
                # it half way through the exit that follows.
                loop.remove_signal_handler(sig)
                signal.signal(sig, signal.SIG_IGN)
            if not task.done():
                task.cancel()
