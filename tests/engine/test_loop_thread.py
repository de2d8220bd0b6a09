"""The loop thread blocking front ends share: results, errors, timeouts, Ctrl-C, other loops."""

from __future__ import annotations

import asyncio
import threading

import pytest

from jupyter_exec.engine.loop_thread import LOOP_THREAD, LoopThread, run_blocking


async def _where() -> tuple[str, asyncio.AbstractEventLoop]:
    return threading.current_thread().name, asyncio.get_running_loop()


def test_a_blocking_call_runs_on_the_one_shared_loop_thread() -> None:
    first = run_blocking(_where())
    second = run_blocking(_where())
    assert first == second == ("jupyter-exec-loop", LOOP_THREAD.loop)


def test_the_coroutine_s_error_is_raised_in_the_caller_s_thread() -> None:
    async def fails() -> None:
        raise ValueError("from the loop")

    with pytest.raises(ValueError, match="from the loop"):
        run_blocking(fails())
    assert run_blocking(asyncio.sleep(0, "still serving")) == "still serving"


def test_past_its_timeout_the_coroutine_is_cancelled() -> None:
    loop_thread = LoopThread(name="test-timeout-loop")
    cancelled = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(TimeoutError):
        loop_thread.run_blocking(slow(), timeout=0.05)
    assert cancelled.wait(5)


def test_ctrl_c_while_waiting_runs_on_interrupt_on_the_loop() -> None:
    """A ``KeyboardInterrupt`` reaching the waiting caller (here raised by the coroutine
    itself, handed back like any outcome) runs ``on_interrupt`` before it propagates."""
    stopped: list[str] = []

    async def interrupted() -> None:
        raise KeyboardInterrupt

    async def stop() -> None:
        stopped.append(threading.current_thread().name)

    with pytest.raises(KeyboardInterrupt):
        run_blocking(interrupted(), on_interrupt=stop)
    assert stopped == ["jupyter-exec-loop"]
    assert run_blocking(asyncio.sleep(0, 1), on_interrupt=stop()) == 1  # unused: closed
    assert stopped == ["jupyter-exec-loop"]


def test_a_blocking_call_works_inside_another_running_loop() -> None:
    async def caller() -> str:
        name, _ = run_blocking(_where())
        return name

    assert asyncio.run(caller()) == "jupyter-exec-loop"


def test_run_here_awaits_on_the_loop_thread_from_any_loop() -> None:
    assert asyncio.run(LOOP_THREAD.run_here(_where())) == ("jupyter-exec-loop", LOOP_THREAD.loop)

    async def on_the_loop() -> tuple[str, asyncio.AbstractEventLoop]:
        return await LOOP_THREAD.run_here(_where())  # already there: awaited directly

    assert run_blocking(on_the_loop()) == ("jupyter-exec-loop", LOOP_THREAD.loop)


def test_submit_hands_back_a_future_that_cancels_the_coroutine() -> None:
    assert LOOP_THREAD.submit(asyncio.sleep(0, "done")).result(5) == "done"
    future = LOOP_THREAD.submit(asyncio.sleep(30))
    future.cancel()
    assert future.cancelled()


class _Signalled(Exception):
    pass


def test_a_signal_the_kernel_hands_to_the_loop_thread_still_stops_the_waiting_caller() -> None:
    """A process-directed signal may land on any thread; one on the loop thread must still
    reach the main thread's handler while it waits (a stop during a kernel's start hung)."""
    import signal

    from jupyter_exec.engine.loop_thread import LOOP_THREAD, wait_for_future

    ended = threading.Event()
    running: list[asyncio.Task[None]] = []

    async def long_wait() -> None:
        task = asyncio.current_task()
        assert task is not None
        running.append(task)
        try:
            await asyncio.sleep(120)
        finally:
            ended.set()

    def handler(signum: int, frame: object) -> None:
        raise _Signalled

    loop = LOOP_THREAD.loop  # started, if no test started it yet
    loop_thread = next(t for t in threading.enumerate() if t.name == "jupyter-exec-loop")
    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        for wait in (
            lambda: LOOP_THREAD.run_blocking(long_wait()),
            lambda: wait_for_future(LOOP_THREAD.submit(long_wait())),
        ):
            ended.clear()
            timer = threading.Timer(0.5, signal.pthread_kill, (loop_thread.ident, signal.SIGUSR1))
            timer.start()
            with pytest.raises(_Signalled):
                wait()
            assert not ended.is_set()  # raised while the call still ran, not at its end
            timer.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        for task in running:
            loop.call_soon_threadsafe(task.cancel)
