"""One pass of a replay over a notebook's cells, and what two passes tell together.

:mod:`jupyter_exec.notebook.replay` decides *what* to replay (which cells, in which order,
in which environment) and builds the report; this module runs the cells of one pass in one
session (:class:`_Plan`), judges each with the same rules every time (:class:`_Judging`,
calling :mod:`jupyter_exec.notebook.judge`), and, for ``runs=2``, marks the cells whose two
passes disagree (:func:`_nondeterministic`).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from jupyter_exec.engine.hooks import CellHooks
from jupyter_exec.engine.installs import Installs
from jupyter_exec.engine.meta import is_undone
from jupyter_exec.engine.recorder import new_cell_id
from jupyter_exec.models import Execution
from jupyter_exec.notebook import envdiff
from jupyter_exec.notebook.compare import ImageTolerance, Rule, compare_outputs
from jupyter_exec.notebook.judge import _judge, _skipped
from jupyter_exec.notebook.report import CellResult, _Progress
from jupyter_exec.notebook.reprs import ActiveBridge
from jupyter_exec.session.cancel import execute_to_the_end
from jupyter_exec.session.session import AsyncSession

__all__: list[str] = []

_REVISED = "judged on what it shows at the end: a later cell updated its display"


class _NoEnvironmentCapture(CellHooks):
    """A replay's kernels run without the per-cell environment capture.

    A recording session installs it in the kernel (:mod:`jupyter_exec.session.envrecord`):
    an audit hook on every event, and after each cell that imported something new, a scan
    of every installed distribution (``importlib.metadata.packages_distributions``) to name
    the packages. After a notebook's ``import matplotlib`` that scan took 0.4 to 0.7 s, and
    the hook 0.1 to 0.2 s more over the import, on notebooks nbclient runs in 3 to 6 s: the
    replay's whole gap to nbclient on plot notebooks (1.18x to 1.27x). A replay does not
    need it: the environment it compares with the record's is asked once, for the names
    the record lists (:func:`jupyter_exec.notebook.envdiff.here`), and reported.
    """

    async def kernel_installs(self, installs: Installs) -> None:
        installs.kernel.environment_capture = False  # decided: envrecord.plan leaves it out


class _ReplaySession(AsyncSession):
    """The replay's session, which can also say what a recorded cell shows now; its kernels
    run without the environment capture (:class:`_NoEnvironmentCapture`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hooks.add(_NoEnvironmentCapture())

    async def environment_here(
        self, record: Mapping[str, Any], backend: str, kernel_name: str
    ) -> dict[str, Any]:
        """What this session's kernel runs on, for the facts ``record`` names."""
        return await envdiff.here(self._live_kernel(), record, backend, kernel_name)

    def shown_now(self, cell_index: int | None) -> list[dict[str, Any]] | None:
        """A copy of cell ``cell_index``'s outputs in the notebook as it stands (None: none)."""
        recorder = self._recorder
        if recorder is None or cell_index is None or not 0 <= cell_index < len(recorder):
            return None
        return copy.deepcopy(list(recorder.cells[cell_index].get("outputs", ())))


def _record_plain_cell(session: AsyncSession, cell: Mapping[str, Any]) -> None:
    """Copy a markdown/raw/empty cell into the replayed notebook, so it reads like the original."""
    copied: dict[str, Any] = {
        "cell_type": cell.get("cell_type", "markdown"),
        "id": new_cell_id(),
        "metadata": dict(cell.get("metadata") or {}),
        "source": str(cell.get("source", "")),
    }
    if copied["cell_type"] == "code":
        copied.update(execution_count=None, outputs=[])
    elif cell.get("attachments"):
        copied["attachments"] = dict(cell["attachments"])
    session.record_cell(copied)


@dataclass(frozen=True)
class _Judging:
    rules: tuple[Rule, ...]
    tolerance: ImageTolerance
    rtol: float
    bridges: tuple[ActiveBridge, ...] = ()
    """The repr changes between the record's package versions and the replay's kernel's."""

    def judge(
        self,
        index: int,
        cell: Mapping[str, Any],
        execution: Execution,
        shown: Sequence[Mapping[str, Any]] | None = None,
    ) -> CellResult:
        return _judge(
            index, cell, execution, self.rules, self.tolerance, shown, self.rtol, self.bridges
        )


@dataclass(frozen=True)
class _Plan:
    """Which cells a replay runs, in which order, and how they are judged."""

    nb: Any
    order: Sequence[int]
    to_run: set[int]
    last_step: int
    until: int | None
    judging: _Judging

    async def run(
        self,
        session: _ReplaySession,
        bar: _Progress | None,
        notify: Callable[[CellResult], Awaitable[None]] | None,
    ) -> list[CellResult]:
        """Every cell's verdict in one session (see the module docstring).

        A cell is judged in a worker thread while the next one runs: judging a re-rendered
        plot takes a tenth of a second to a second of the host's time, which the kernel
        would otherwise wait through (nbclient judges nothing). The verdicts are still
        reported in the notebook's order, each as soon as it and those before it are known.
        """
        results: list[CellResult] = []
        ran: list[tuple[int, Mapping[str, Any], Execution]] = []
        judging: asyncio.Task[CellResult] | None = None

        async def settle() -> None:
            """The verdict being judged, reported (before anything after it)."""
            nonlocal judging
            if judging is None:
                return
            result, judging = await judging, None
            if bar is not None:
                bar.finish(result)
            results.append(result)
            if notify is not None:
                await notify(result)

        try:
            for step, index in enumerate(self.order):
                cell = self.nb.cells[index]
                keep = self.until is None or step < self.last_step
                if index in self.to_run:
                    if bar is not None:
                        bar.start(index + 1)
                    execution = await execute_to_the_end(session, str(cell.source))
                    await settle()  # the cell before, judged while this one ran
                    ran.append((index, cell, execution))
                    judging = asyncio.ensure_future(
                        asyncio.to_thread(self.judging.judge, index, cell, execution)
                    )
                    continue
                await settle()
                if cell.cell_type != "code":
                    why = f"{cell.cell_type} cell"
                elif not str(cell.source).strip():
                    why = "empty code cell"
                elif is_undone(cell):
                    why = "undone cell (session.undo or restore)"
                else:
                    why = f"after --until {self.until}"
                tags = (cell.get("metadata") or {}).get("tags", ())
                if keep and "papermill-error-cell-tag" not in tags:
                    _record_plain_cell(session, cell)
                results.append(_skipped(index, cell, why))
                if notify is not None:
                    await notify(results[-1])
            await settle()
        finally:
            if judging is not None:  # a cell raised: the judge's thread ends on its own
                judging.cancel()
        for index, cell, execution in ran:  # what later cells changed: judged on the end state
            shown = session.shown_now(execution.cell_index)
            if shown is None or shown == list(execution.outputs):
                continue
            position = next(i for i, r in enumerate(results) if r.index == index)
            final = self.judging.judge(index, cell, execution, shown)
            if final.status == results[position].status and final.diff == results[position].diff:
                continue
            final = replace(final, notes=(*final.notes, _REVISED))
            results[position] = final
            if bar is not None:
                bar.revise(final)
            if notify is not None:
                await notify(final)
        return results


_COMPARED = frozenset({"same", "equivalent", "different"})


def _nondeterministic(
    first: Sequence[CellResult], second: Sequence[CellResult], judging: _Judging
) -> list[CellResult]:
    """First-run verdicts, with cells whose two replays differ marked ``nondeterministic``."""
    by_index = {r.index: r for r in second}
    out: list[CellResult] = []
    for result in first:
        other = by_index.get(result.index)
        if other is None or result.status not in _COMPARED or other.status not in _COMPARED:
            out.append(result)
            continue
        between = compare_outputs(
            result.replayed, other.replayed, judging.rules, judging.tolerance, judging.rtol
        )
        if between.verdict == "different" or (result.status == "same") != (other.status == "same"):
            note = "its outputs differ between two replays, so a difference from the record "
            note += "is not blamed on the record"
            diff = between.diff or result.diff
            out.append(
                replace(result, status="nondeterministic", notes=(*result.notes, note), diff=diff)
            )
        else:
            out.append(result)
    return out
