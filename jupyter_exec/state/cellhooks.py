"""A session's state as one of its hooks: undo, checkpoints, per-cell generations, recovery.

The session registers it when it is made (:class:`~jupyter_exec.engine.hooks.CellHooks`
draws where each hook is called); every method hands over to the session's
:class:`~jupyter_exec.state.session_state.SessionState`, so the engine calls the
state only through the declared hooks::

    kernel_installs  the state module and its generations, in the session's one batch of
                     installs before a kernel process's first recorded cell
    before_cell      the undo snapshot, the per-cell state installed; the names a cell
                     changes and its generation's commit asked for in the request; a
                     coalesced signature written while the cell runs
    after_reply      a death's error says what came back instead of "state is lost"
    after_record     that signature waited for; the recovery on the Execution and the
                     notebook; the names the cell changed noted, its generation signed
                     (before the result when it ran long), what the kernel said of its
                     writes on the Execution (state_notes), an automatic checkpoint when due
    kernel_lost      a kernel from the latest snapshot in its place (recovery)
    before_restart   what the restarted process will not have is forgotten; a Docker
                     session's first kernel restarts instead of a fork in it
    kernel_replaced  after a restart for a lost kernel: the newest saved state loaded
    before_close     the last cell's state signed (not waited for from a dead kernel)
    after_close      the snapshots, and a Docker session's first kernel, ended
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from jupyter_exec.engine.hooks import CellCall, CellHooks, KernelChange, KernelEvent

if TYPE_CHECKING:
    from jupyter_exec.engine.installs import Installs
    from jupyter_exec.engine.runner import CellRun
    from jupyter_exec.models import Execution
    from jupyter_exec.state.host import StateHost
    from jupyter_exec.state.session_state import SessionState

__all__ = ["StateHooks"]


class StateHooks(CellHooks):
    """The hooks of one session's :class:`~jupyter_exec.state.session_state.SessionState`."""

    def __init__(self, state: SessionState, session: StateHost) -> None:
        self.state = state
        self.session = session

    async def kernel_installs(self, installs: Installs) -> None:
        self.state.plan_installs(self.session, installs)

    async def before_cell(self, cell: CellCall) -> None:
        if cell.recorded:  # a resume's cells need no undo point of their own
            await self.state.before_cell(self.session, cell.kernel)
        index = cell.index if cell.recorded else None
        cell.expressions.update(self.state.cell_expressions(cell.kernel, index))
        self.state.durable.generations.write_ahead()  # awaited in after_record, whatever came

    async def after_reply(self, cell: CellCall, run: CellRun) -> None:
        run.error = self.state.explain_recovery(run.error)

    async def after_record(self, cell: CellCall, execution: Execution | None) -> Execution | None:
        await self.state.durable.generations.caught_up()
        run = cell.run
        if run is None:  # the cell never got as far as its record
            return execution
        try:
            if execution is not None:
                execution = self.state.annotate(execution)
        finally:
            self.state.after_record(self.session, cell.index if cell.recorded else None)
        if execution is not None and cell.problem is None:
            await self.state.after_cell(self.session, cell.kernel, run, cell.index)
            notes = self.state.durable.generations.take_notes()
            if notes:  # a large change written without a forked child, and why
                execution = replace(execution, state_notes=(*execution.state_notes, *notes))
        return execution

    async def kernel_lost(self, event: KernelEvent) -> bool:
        return await self.state.recover(self.session)

    async def before_restart(self, event: KernelEvent) -> None:
        await self.state.restartable(self.session, event.kernel)

    async def kernel_replaced(self, change: KernelChange) -> None:
        if change.reason == "lost":
            await self.state.recover_from_disk(self.session)

    async def before_close(self, event: KernelEvent) -> None:
        if not event.dead:  # a dead kernel signs nothing more: do not wait CLOSE_FLUSH for it
            await self.state.before_close(self.session, event.kernel)

    async def after_close(self, shuts_down_kernel: bool) -> None:
        await self.state.close(shuts_down_kernel)
