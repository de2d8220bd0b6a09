"""Per-cell hooks: the declared places where other layers take part in a session's cells.

nbclient names its ``on_cell_*`` hooks and httpx its ``event_hooks`` so that
nothing has to subclass the client or reach into it; a session does the same.
A hook is a :class:`CellHooks` (every method a no-op here: override what you
need) added to ``session.hooks``; the session calls every hook at fixed points,
in the order they were added::

    execute(code)
      kernel_installs(installs)      the first recorded cell on a kernel process: add
                                     the in-kernel helpers a hook needs; one silent
                                     request then installs every hook's and the
                                     session's own (engine.installs)
      before_cell(cell)              may add to cell.expressions (user_expressions
                                     of the request) and wrap cell.on_output
      ── the runner: the request, its outputs, its reply ──
      after_reply(cell, run)         may change run.error (what came back, and how)
      ── the recording: files, the notebook cell ──
      after_record(cell, execution)  returns the Execution the caller gets; called
                                     even when the cell ends without one (None)
    a cell's kernel died or ran away
      kernel_lost(event)             True: a hook put another kernel in its place
                                     (the session then does not restart it)
    restart() (asked for, or for a lost kernel)
      before_restart(event)          a hook may put another kernel in first
      kernel_replaced(change)        after a restart, an undo, a restore, a recovery
    close()
      before_close(event)            the kernel still runs (unless event.dead)
      after_close(shuts_down_kernel) the kernel is stopped

Who registers what: the session registers its state (undo, checkpoints,
per-cell generations, recovery: :class:`jupyter_exec.state.cellhooks.StateHooks`)
when it is made; the server extension's sessions add the live cells of a shared
notebook (:class:`jupyter_exec.server.live.LiveCells`).

Hooks have no deadline imposed from outside (a checkpoint may rightly take
long); each sets its own. What the session knows of the kernel is passed in:
``cell.kernel_dead`` / ``event.dead`` say it was seen to die, so a hook about to
wait on it gives up at once instead of at its deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from jupyter_exec.engine.core import KernelSlot
    from jupyter_exec.engine.installs import Installs
    from jupyter_exec.engine.kernel import KernelHandle
    from jupyter_exec.engine.runner import CellRun, OutputCallback
    from jupyter_exec.exceptions import StorageError
    from jupyter_exec.models import Execution

__all__ = ["CellCall", "CellHooks", "Hooks", "KernelChange", "KernelEvent", "Replacement"]

Replacement = Literal["restart", "lost", "undo", "restore", "recover"]
"""Why a session's kernel changed: a restart asked for, a restart after a lost kernel (it
died or would not stop), or a kernel from a snapshot (undo, restore, recovery)."""


@dataclass
class CellCall:
    """One cell on its way through the session, as hooks see it (one object per cell)."""

    code: str
    kernel: KernelHandle
    index: int
    """The cell's index in the notebook (in the cells run, when recording is off)."""
    recorded: bool
    """False for a cell written nowhere (a resume re-running the notebook's cells)."""
    slot: KernelSlot
    on_output: OutputCallback | None = None
    """What the runner calls with each output; a hook may wrap it (live cells do)."""
    expressions: dict[str, str] = field(default_factory=dict)
    """``user_expressions`` to send with the request; the answers are in ``run``."""
    run: CellRun | None = None
    """How the cell ended, once the runner returned (None: it never did)."""
    problem: StorageError | None = None
    """An error the cell raises once recorded (a remote file that could not be written)."""
    started: float = field(default_factory=time.monotonic)

    @property
    def kernel_dead(self) -> bool:
        """The session saw this cell's kernel die (or knows its process gone)."""
        return self.slot.known_dead(self.kernel)


@dataclass(frozen=True)
class KernelEvent:
    """A kernel something is about to happen to: lost, restarted, closed."""

    kernel: KernelHandle
    why: str
    dead: bool
    """The session knows the kernel cannot answer: do not wait on it."""


@dataclass(frozen=True)
class KernelChange:
    """Another kernel (or the same one, restarted) serves the session now."""

    reason: Replacement
    old: KernelHandle | None
    new: KernelHandle


class CellHooks:
    """The hooks of a session's cells and kernel, each a no-op: override what you need.

    Every method is awaited by the session at the point its name says (the
    module docstring draws them); an exception from a hook is the caller's
    exception, except where a method says otherwise.
    """

    async def kernel_installs(self, installs: Installs) -> None:
        """Before the first recorded cell on a kernel process (``installs.kernel``): add the
        in-kernel helpers this hook needs (:meth:`Installs.add`); they are sent with every
        other hook's in one silent request. A hook that installs its own later, alone, may
        ignore this: it only saves that round trip."""

    async def before_cell(self, cell: CellCall) -> None:
        """Before the request is built (the kernel is as the last cell left it)."""

    async def after_reply(self, cell: CellCall, run: CellRun) -> None:
        """The runner returned (the reply, a timeout or a death); nothing is recorded yet."""

    async def after_record(self, cell: CellCall, execution: Execution | None) -> Execution | None:
        """The cell is recorded: return the Execution its caller gets (this one, or a copy
        saying more). ``None`` when it ended without one (its caller gave up, a write
        failed, an earlier hook raised): every hook is still called, to tidy up."""
        return execution

    async def kernel_lost(self, event: KernelEvent) -> bool:
        """A cell's kernel died or would not stop: True if this hook put another kernel in
        its place (``session.replace_kernel``), else the session restarts it."""
        return False

    async def before_restart(self, event: KernelEvent) -> None:
        """``event.kernel`` is about to restart; a hook may put another kernel in first."""

    async def kernel_replaced(self, change: KernelChange) -> None:
        """Another kernel (or the same, restarted) serves the session."""

    async def before_close(self, event: KernelEvent) -> None:
        """The session closes; its kernel still runs (unless ``event.dead``)."""

    async def after_close(self, shuts_down_kernel: bool) -> None:
        """The session's kernel is stopped (or left running: one given to the session)."""


class Hooks:
    """A session's hooks, called in the order they were added."""

    def __init__(self) -> None:
        self._hooks: list[CellHooks] = []

    def add(self, hook: CellHooks) -> None:
        """Call ``hook`` from the next cell on (after the hooks added before it)."""
        self._hooks.append(hook)

    def remove(self, hook: CellHooks) -> None:
        self._hooks.remove(hook)

    def __iter__(self) -> Iterator[CellHooks]:
        return iter(list(self._hooks))

    async def kernel_installs(self, installs: Installs) -> None:
        for hook in self:
            await hook.kernel_installs(installs)

    async def before_cell(self, cell: CellCall) -> None:
        for hook in self:
            await hook.before_cell(cell)

    async def after_reply(self, cell: CellCall, run: CellRun) -> None:
        for hook in self:
            await hook.after_reply(cell, run)

    async def after_record(self, cell: CellCall, execution: Execution | None) -> Execution | None:
        """Every hook, even after one raised (the later ones then see no Execution); the
        first exception is raised once all have run."""
        first: BaseException | None = None
        for hook in self:
            try:
                execution = await hook.after_record(cell, execution if first is None else None)
            except BaseException as exc:
                first = first or exc
        if first is not None:
            raise first
        return execution

    async def kernel_lost(self, event: KernelEvent) -> bool:
        """Whether a hook replaced the lost kernel (the first that does ends the asking)."""
        for hook in self:
            if await hook.kernel_lost(event):
                return True
        return False

    async def before_restart(self, event: KernelEvent) -> None:
        for hook in self:
            await hook.before_restart(event)

    async def kernel_replaced(self, change: KernelChange) -> None:
        for hook in self:
            await hook.kernel_replaced(change)

    async def before_close(self, event: KernelEvent) -> None:
        for hook in self:
            await hook.before_close(event)

    async def after_close(self, shuts_down_kernel: bool) -> None:
        """Every hook, even after one raised; the first exception is raised at the end."""
        first: BaseException | None = None
        for hook in self:
            try:
                await hook.after_close(shuts_down_kernel)
            except BaseException as exc:
                first = first or exc
        if first is not None:
            raise first
