"""Running one cell on a kernel: send it, collect its outputs, enforce its deadline, notice death.

The three ways a cell can end besides normally, and what happens::

    deadline passed  ─► interrupt (KeyboardInterrupt)  ─► stops within the grace period: state kept
                                                       └► does not: restart, state lost
    kernel silent    ─► every QUIET_POLL s of silence, ask the backend if it is alive
      and dead       ─► restart, report how it died (signal, exit code, OOM)
    restarted by     ─► the waiting cell notices the generation changed and ends
      someone else
    session closed   ─► the waiting cell ends at once as "cancelled", with its outputs so far

Nothing here touches the work dir or the notebook: the result is a
:class:`CellRun`, which the session turns into files, a cell and an Execution.
"""

from __future__ import annotations

import inspect
import logging
import queue
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from jupyter_exec.engine.kernel import QUIET_POLL, KernelHandle, describe_exit, interrupt_kernel
from jupyter_exec.engine.outputs import CellOutputs, strip_ansi
from jupyter_exec.exceptions import KernelDiedError
from jupyter_exec.models import CellError, Status

__all__ = ["CellRun", "CellRunner", "OutputCallback"]

log = logging.getLogger("jupyter_exec")

OutputCallback = Callable[[dict[str, Any]], Awaitable[None] | None]
"""Called with each output as it arrives (an nbformat output dict, a stream chunk,
or a ``clear_output`` / ``update_display_data`` event); may be a coroutine function."""

DENO_FENCE = (
    'await Deno.jupyter.broadcast("display_data", '
    '{data: {"text/plain": ""}, metadata: {}, transient: {}})'
)
"""The fence cell for kernels that publish outputs after idle (:meth:`CellRunner._fence`)."""

Outcome = Literal["idle", "timeout", "died", "restarted", "closed"]

INTERRUPT_AGAIN = 2.0
"""Seconds after an interrupt that a cell still running is interrupted again (within the
grace): a kernel can lose an interrupt that lands in its own code instead of the cell's."""


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


@dataclass
class CellRun:
    """How a cell ended, before it is recorded."""

    status: Status
    error: CellError | None = None
    state_lost: bool = False
    timing: dict[str, str] = field(default_factory=dict)
    """JupyterLab's per-cell timing keys (``iopub.status.busy``, ``shell.execute_reply``, ...)."""
    reply_error: CellError | None = None
    """The error the execute_reply names (the only report of e.g. an unknown ``%magic``)."""
    user_expressions: dict[str, Any] = field(default_factory=dict)
    """The execute_reply's ``user_expressions`` (what the session asked besides the code)."""


class CellRunner:
    """Runs cells on one kernel.

    ``restart(note)`` is the session's way of restarting the kernel (it keeps
    the note for the notebook and bumps ``generation()``), so a cell that is
    waiting when someone else restarts the kernel can tell. ``closing()``
    says the session is being closed: the cell stops waiting.
    """

    def __init__(
        self,
        kernel: KernelHandle,
        *,
        interrupt_grace: float,
        restart: Callable[[str], Awaitable[None]],
        generation: Callable[[], int],
        closing: Callable[[], bool] = lambda: False,
    ) -> None:
        self.kernel = kernel
        self.interrupt_grace = interrupt_grace
        self._restart = restart
        self._generation = generation
        self._closing = closing

    async def run(
        self,
        code: str,
        builder: CellOutputs,
        timeout: float | None,
        on_output: OutputCallback | None,
        metadata: dict[str, Any] | None = None,
        user_expressions: dict[str, str] | None = None,
    ) -> CellRun:
        """Run ``code``; ``metadata`` goes into the execute_request (the stream guard reads it),
        and so do ``user_expressions`` (their values land in ``CellRun.user_expressions``).

        However the cell ends, stream text the builder's redactor still holds back (it
        might have begun a secret) is passed on last."""
        run = await self._run(code, builder, timeout, on_output, metadata, user_expressions)
        released = builder.release()
        if on_output is not None:
            for event in released:
                await _call(on_output, event)
        return run

    async def _run(
        self,
        code: str,
        builder: CellOutputs,
        timeout: float | None,
        on_output: OutputCallback | None,
        metadata: dict[str, Any] | None,
        user_expressions: dict[str, str] | None,
    ) -> CellRun:
        run = CellRun(status="ok")
        generation = self._generation()
        deadline = None if timeout is None else time.monotonic() + timeout
        msg_id = self._send(code, metadata, user_expressions)
        outcome = await self._collect(msg_id, builder, deadline, on_output, run.timing, generation)
        if outcome == "closed":
            run.status = "cancelled"
            run.error = _CLOSED
            return run
        if outcome == "timeout":
            assert timeout is not None
            outcome = await self._stop_runaway(msg_id, builder, timeout, on_output, run, generation)
            run.status = "timeout"
            if run.state_lost:
                return run
        if outcome == "idle":
            reply = await self._shell_reply(msg_id, run.timing)
            if self.kernel.late_outputs:
                await self._fence(msg_id, builder, on_output)
            if builder.execution_count is None:
                builder.execution_count = reply.get("execution_count")
            run.user_expressions = dict(reply.get("user_expressions") or {})
            if run.status != "timeout":
                run.status = "ok" if reply.get("status") == "ok" else "error"
            if run.status == "error" and reply.get("ename"):
                run.reply_error = CellError(
                    str(reply["ename"]),
                    str(reply.get("evalue", "")),
                    strip_ansi("\n".join(reply.get("traceback") or [])),
                )
            return run
        run.status = "died"
        run.error = await self._after_death(outcome, run.timing)
        run.state_lost = True
        return run

    def _send(
        self, code: str, metadata: dict[str, Any] | None, expressions: dict[str, str] | None
    ) -> str:
        kc = self.kernel.kc
        if not metadata:  # (a remote kernel's client sends only what execute() takes)
            return str(
                kc.execute(
                    code,
                    store_history=True,
                    user_expressions=dict(expressions or {}),
                    allow_stdin=False,
                    stop_on_error=False,
                )
            )
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": dict(expressions or {}),
            "allow_stdin": False,
            "stop_on_error": False,
        }
        msg = kc.session.msg("execute_request", content, metadata=metadata)
        kc.shell_channel.send(msg)
        return str(msg["header"]["msg_id"])

    async def _collect(
        self,
        msg_id: str,
        builder: CellOutputs,
        deadline: float | None,
        on_output: OutputCallback | None,
        timing: dict[str, str],
        generation: int,
    ) -> Outcome:
        """Feed IOPub messages of ``msg_id`` to ``builder`` until the kernel is idle.

        The liveness check runs only after QUIET_POLL seconds without messages,
        so the fast path pays nothing for it.
        """
        while True:
            if self._closing():
                return "closed"
            wait = QUIET_POLL
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return "timeout"
            try:
                msg = await self.kernel.iopub.get(wait)
            except queue.Empty:
                if generation != self._generation():
                    return "restarted"
                if deadline is not None and time.monotonic() >= deadline:
                    return "timeout"
                if not await self.kernel.is_alive():
                    return "died"
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if kind == "status":
                state = msg["content"].get("execution_state")
                if state in ("busy", "idle"):
                    timing[f"iopub.status.{state}"] = _iso(msg["header"].get("date"))
                if state == "idle":
                    return "idle"
                continue
            if kind == "execute_input":
                timing["iopub.execute_input"] = _iso(msg["header"].get("date"))
            events = builder.feed(msg)
            if on_output is not None:
                for event in events:
                    await _call(on_output, event)

    async def _fence(
        self, msg_id: str, builder: CellOutputs, on_output: OutputCallback | None
    ) -> None:
        """Collect what a kernel published for ``msg_id`` after its idle status.

        Deno sends a cell's status messages itself but its results and displays through a
        queue that drains on its own time, so a request's idle status proves nothing about
        them (a ``kernel_info_request`` fence lost results under load). The fence is a
        silent cell that puts a marker through that same queue: once the marker is on
        IOPub, everything the cell queued before it is too. No waiting on the clock.
        """
        fence = self.kernel.send_silent(DENO_FENCE)
        deadline = time.monotonic() + 10.0
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                msg = await self.kernel.iopub.get(min(QUIET_POLL, remaining))
            except queue.Empty:
                if self._closing() or not await self.kernel.is_alive():
                    return
                continue
            parent = msg["parent_header"].get("msg_id")
            kind = msg["header"]["msg_type"]
            if parent == fence:
                if kind in ("display_data", "error"):  # the marker (or no way to send one)
                    return
            elif parent == msg_id and kind != "status":
                events = builder.feed(msg)
                if on_output is not None:
                    for event in events:
                        await _call(on_output, event)

    async def _shell_reply(self, msg_id: str, timing: dict[str, str]) -> dict[str, Any]:
        """The execute_reply (normally already queued when IOPub goes idle)."""

        async def quiet() -> bool:
            return self._closing() or not await self.kernel.is_alive()

        msg = await self.kernel.replies.reply(msg_id, time.monotonic() + 10.0, quiet)
        if msg is None:
            return {"status": "error"}
        timing["shell.execute_reply"] = _iso(msg["header"].get("date"))
        return dict(msg["content"])

    async def _stop_runaway(
        self,
        msg_id: str,
        builder: CellOutputs,
        timeout: float,
        on_output: OutputCallback | None,
        run: CellRun,
        generation: int,
    ) -> Outcome:
        """Interrupt; if the cell does not stop within the grace period, restart.

        The interrupt is sent again every :data:`INTERRUPT_AGAIN` seconds of the grace while
        the cell goes on: a kernel may lose one that lands in its own code rather than the
        cell's (IRkernel, between its ``busy`` and the evaluation, or still reading the
        request: three runs in three on a loaded machine). A kernel that is idle by then
        ignores it (IPython) or drops it (IRkernel), and one that took the first has ended
        the cell long before.
        """
        grace = time.monotonic() + self.interrupt_grace
        while True:
            try:
                await interrupt_kernel(self.kernel)
            except Exception as exc:  # e.g. a backend with no interrupt: go on to restart
                log.warning("interrupt failed: %s", exc)
            until = min(grace, time.monotonic() + INTERRUPT_AGAIN)
            outcome = await self._collect(msg_id, builder, until, on_output, run.timing, generation)
            if outcome != "timeout" or time.monotonic() >= grace:
                break
        where = _interrupted_at(builder)
        if outcome == "restarted":  # someone else restarted it meanwhile
            run.error = CellError(
                "ExecutionTimeout",
                f"the code ran past its {timeout:g} s timeout and the kernel was restarted; "
                "its state is lost",
                where,
            )
            run.state_lost = True
            return outcome
        if outcome == "idle":
            run.error = CellError(
                "ExecutionTimeout",
                f"the code ran past its {timeout:g} s timeout and was interrupted; "
                "the kernel's state is kept",
                where,
            )
            return outcome
        reason = (
            "the kernel died when interrupted"
            if outcome == "died"
            else f"it did not stop within {self.interrupt_grace:g} s of the interrupt"
        )
        await self._restart(f"restarted after a timeout ({reason})")
        run.error = CellError(
            "ExecutionTimeout",
            f"the code ran past its {timeout:g} s timeout and {reason}; "
            "the kernel was restarted and its state is lost",
            where,
        )
        run.state_lost = True
        return outcome

    async def _after_death(self, outcome: Outcome, timing: dict[str, str]) -> CellError:
        if outcome == "restarted":
            return CellError(
                "KernelRestarted", "the kernel was restarted while this code ran; its state is lost"
            )
        how = await describe_exit(self.kernel.km)
        try:
            await self._restart(f"restarted after the kernel died ({how})")
        except KernelDiedError as exc:  # gone for good (a remote kernel whose host is down)
            return CellError(
                "KernelDied",
                f"the kernel died during this execution: {how}. It cannot be restarted: {exc}",
            )
        return CellError(
            "KernelDied",
            f"the kernel died during this execution: {how}. It was restarted; its state is lost.",
        )


_CLOSED = CellError(
    "SessionClosed", "the session was closed while this code ran; its outputs so far are kept"
)


async def _call(on_output: OutputCallback, event: dict[str, Any]) -> None:
    try:
        result = on_output(event)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("on_output callback failed (the execution goes on)")


def is_interrupt(output: dict[str, Any]) -> bool:
    return output.get("output_type") == "error" and output.get("ename") == "KeyboardInterrupt"


def _interrupted_at(builder: CellOutputs) -> str:
    """The KeyboardInterrupt traceback, as plain text: where the code was when stopped."""
    for output in builder.outputs:
        if is_interrupt(output):
            return strip_ansi("\n".join(output.get("traceback", [])))
    return ""
