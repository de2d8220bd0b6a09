"""One event loop on a daemon thread: how blocking front ends drive the async engine.

The engine is async (:class:`~jupyter_exec.AsyncSession`); the blocking ``Session``, the
blocking session manager, the CLI, ``replay()`` and the agent adapters call it from plain
threads. ``asyncio.run`` per call would not do: it fails where the caller already runs a loop
(inside Jupyter, inside an async web app), and a kernel's channels and tasks are bound to the
loop that started them, so every call for one session must land on the same loop. Hence one
loop, on its own daemon thread, shared by all of them (:data:`LOOP_THREAD`), and three ways in:

* :meth:`LoopThread.run_blocking`: run a coroutine there and wait for its result here;
* :meth:`LoopThread.submit`: the same, as a ``concurrent.futures.Future`` (for callers that
  cancel it, or wait on it in pieces, when the user presses Ctrl-C);
* :meth:`LoopThread.run_here`: await a coroutine there from whichever loop the caller is on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeAlias, TypeVar

__all__ = ["LOOP_THREAD", "LoopThread", "run_blocking", "wait_for_future"]

T = TypeVar("T")

OnInterrupt: TypeAlias = Callable[[], Coroutine[Any, Any, Any]] | Coroutine[Any, Any, Any]
"""What runs on the loop when the waiting caller is interrupted: a coroutine function or a
coroutine."""

SIGNAL_CHECK = 0.25
"""Seconds a waiting caller sleeps at most between looks for a signal. The kernel may hand
a process's SIGTERM or Ctrl-C to any thread; one that lands on the loop thread sets Python's
flag but does not wake the main thread out of a lock wait, so a wait without a bound never
ran the handler (a stop during a kernel's start hung until the start ended)."""

INTERRUPT_WAIT = 10.0
"""Seconds the caller waits for ``on_interrupt`` to finish before re-raising Ctrl-C."""


class LoopThread:
    """An event loop running forever on a daemon thread, started on first use.

    A daemon thread, so a script that forgets to close its sessions still exits (the
    at-exit closers in :mod:`jupyter_exec.sync` stop their kernels first). If the loop
    was closed, the next use starts a new one.
    """

    def __init__(self, name: str = "jupyter-exec-loop") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started now if there is none)."""
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                thread.start()
                self._loop = loop
            return self._loop

    def run_blocking(
        self,
        coro: Coroutine[Any, Any, T],
        timeout: float | None = None,
        *,
        on_interrupt: OnInterrupt | None = None,
    ) -> T:
        """Run ``coro`` on the loop and return its result (or raise its error) in this thread.

        Past ``timeout`` seconds the coroutine is cancelled and ``TimeoutError`` raised, as
        ``concurrent.futures.Future.result`` does. ``on_interrupt`` runs on the loop when the
        caller is interrupted (Ctrl-C) while waiting: a blocking ``execute`` stops the
        kernel's cell with it, not only its own wait. Must not be called from the loop's own
        thread (it would wait for itself).
        """
        loop = self.loop
        call = _Call(coro)
        loop.call_soon_threadsafe(call.start)
        try:
            return call.result(timeout, loop)
        except KeyboardInterrupt:
            if on_interrupt is not None:
                stop = on_interrupt if isinstance(on_interrupt, Coroutine) else on_interrupt()
                on_interrupt = None
                asyncio.run_coroutine_threadsafe(stop, loop).result(timeout=INTERRUPT_WAIT)
            raise
        finally:
            if isinstance(on_interrupt, Coroutine):
                on_interrupt.close()  # not needed: never awaited

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; its future (``cancel()`` cancels the coroutine)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run_here(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on this loop from any loop: directly when the caller is on it, else
        on the loop thread, the caller's loop free meanwhile."""
        loop = self.loop
        if asyncio.get_running_loop() is loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


class _Call(Generic[T]):
    """A coroutine run on the loop thread, its outcome handed back the moment it is known.

    Leaner than ``run_coroutine_threadsafe`` on the hot path: the caller is
    woken from inside the coroutine's last step, not one loop iteration
    later through chained futures.
    """

    __slots__ = ("_coro", "_done", "_error", "_task", "_value")

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro
        self._done = threading.Lock()  # held until the outcome is known: the cheapest wake-up
        self._done.acquire()
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        try:
            self._value = await self._coro
        except BaseException as exc:  # handed to the caller's thread, raised there
            self._error = exc
        finally:
            self._done.release()

    def result(self, timeout: float | None, loop: asyncio.AbstractEventLoop) -> T:
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while not self._done.acquire(timeout=_next_look(deadline)):
            if deadline is not None and time.monotonic() >= deadline:
                loop.call_soon_threadsafe(self.cancel)  # after start: the calls keep order
                raise TimeoutError(f"the call did not finish within {timeout} s")
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._value


def _next_look(deadline: float | None) -> float:
    """How long a wait may block before Python looks for a signal again."""
    if deadline is None:
        return SIGNAL_CHECK
    return max(0.0, min(SIGNAL_CHECK, deadline - time.monotonic()))


def wait_for_future(future: concurrent.futures.Future[T], timeout: float | None = None) -> T:
    """``future.result(timeout)`` that a signal interrupts at once, whichever thread the
    kernel delivered it to (see :data:`SIGNAL_CHECK`)."""
    deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    while True:
        done, _ = concurrent.futures.wait([future], timeout=_next_look(deadline))
        if done or (deadline is not None and time.monotonic() >= deadline):
            return future.result(timeout=0)


LOOP_THREAD = LoopThread()
"""The loop every blocking front end shares (sessions made on it are driven on it)."""


def run_blocking(
    coro: Coroutine[Any, Any, T],
    timeout: float | None = None,
    *,
    on_interrupt: OnInterrupt | None = None,
) -> T:
    """:meth:`LoopThread.run_blocking` on the shared :data:`LOOP_THREAD`."""
    return LOOP_THREAD.run_blocking(coro, timeout, on_interrupt=on_interrupt)
