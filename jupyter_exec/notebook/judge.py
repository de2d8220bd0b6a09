"""Judging one replayed cell: its record and its new run in, its verdict out.

The one place that decides a cell's status (``same`` / ``equivalent`` / ``different`` /
``error_now`` / ``error_before`` / ``not_run`` / ``skipped``; ``nondeterministic`` is decided by
the driver, which compares two replays) and the notes that explain it, apart from the driver
(:mod:`jupyter_exec.notebook.replay`) that runs the cells: the rule is pure (no kernel), so it is
read, and tested, on its own; the driver calls it once per cell and again on what a cell
shows at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jupyter_exec.models import Execution
from jupyter_exec.notebook.compare import ImageTolerance, Rule, compare_outputs
from jupyter_exec.notebook.report import CellResult, CellStatus
from jupyter_exec.notebook.reprs import ActiveBridge


def _recorded_error(outputs: Iterable[Mapping[str, Any]]) -> str | None:
    for output in outputs:
        if output.get("output_type") == "error":
            return f"{output.get('ename', '')}: {output.get('evalue', '')}"
    return None


def _judge(
    index: int,
    cell: Mapping[str, Any],
    execution: Execution,
    rules: Sequence[Rule],
    tolerance: ImageTolerance,
    shown: Sequence[Mapping[str, Any]] | None = None,
    rtol: float = 0.0,
    bridges: Sequence[ActiveBridge] = (),
) -> CellResult:
    """The verdict on one replayed cell; ``shown`` is what it shows now if not its own outputs.

    ``bridges``: the known repr changes between the record's package versions and the
    replay's (:func:`jupyter_exec.notebook.reprs.active_bridges`).
    """
    recorded = list(cell.get("outputs", ()))
    outputs = execution.outputs if shown is None else shown
    comparison = compare_outputs(recorded, outputs, rules, tolerance, rtol, bridges)
    before = _recorded_error(recorded)
    now = None if execution.ok or execution.error is None else str(execution.error)
    notes = list(comparison.notes)
    papermill = (cell.get("metadata") or {}).get("papermill") or {}
    status: CellStatus
    if cell.get("execution_count") is None and not recorded:
        status = "not_run"
        notes.append("this cell was not run in the record (it has no outputs)")
    elif papermill.get("status") == "pending" and not recorded:
        status = "not_run"
        notes.append("papermill did not run this cell in the record (status: pending)")
    elif now is not None and before is None:
        status = "error_now"
    elif before is not None and now is None:
        status = "error_before"
    else:
        status = comparison.verdict
    if papermill.get("status") == "pending" and recorded:
        notes.append("papermill did not run this cell in the record (status: pending)")
    if "injected-parameters" in (cell.get("metadata") or {}).get("tags", ()):
        notes.append("papermill's injected parameters")
    if execution.state_lost:
        notes.append("the kernel was restarted during this cell: later cells start from scratch")
    return CellResult(
        index=index,
        cell_type="code",
        status=status,
        source=str(cell.get("source", "")),
        cell_id=cell.get("id"),
        execution_count_before=cell.get("execution_count"),
        execution_count_now=execution.execution_count,
        diff="" if status in ("same", "not_run") else comparison.diff,
        notes=tuple(notes),
        reasons=comparison.reasons if status == "equivalent" else (),
        masks=comparison.masks,
        masked=comparison.masked,
        recorded=tuple(recorded),
        replayed=tuple(outputs),
        error_before=before,
        error_now=now,
        duration=round(execution.duration, 6),
    )


def _skipped(index: int, cell: Mapping[str, Any], why: str) -> CellResult:
    return CellResult(
        index=index,
        cell_type=str(cell.get("cell_type", "")),
        status="skipped",
        source=str(cell.get("source", "")),
        cell_id=cell.get("id"),
        execution_count_before=cell.get("execution_count"),
        notes=(why,),
    )
