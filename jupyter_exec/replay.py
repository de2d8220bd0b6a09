"""Replay: re-run a notebook in a fresh session and say, cell by cell, whether it reproduced.

::

    notebook ─► read_notebook (v3 upgraded; clear NotebookErrors)
             ─► fresh AsyncSession, recording to <stem>.replayed.ipynb (never the original)
             ─► each code cell: execute ─► compare with the record [compare.py]
                                        ─► CellResult: same / different / error_now /
                                           error_before / skipped
             ─► at the end, every cell a later cell changed (a display update) compared
                again, on what it shows then
             ─► ReplayReport (.reproduced, .to_dict() for the server, .to_markdown())

The work dir defaults to the notebook's folder, so relative paths the cells use
resolve as they did when the notebook was recorded. Cells run in the order the
record says they ran (``jupyter_exec.run``, see :mod:`jupyter_exec.runorder`: a
notebook a person and an agent shared), else top to bottom (not in the
execution-count order, which is reported when it differs), and a failing cell
does not stop the replay: every cell gets a verdict.

A notebook's record is what a person sees at the end: a display a later cell
updated (``update_display``, a ``DisplayHandle``) shows its last value in
every cell showing that id, and ``clear_output(wait=True)`` has been applied.
The replay is judged the same way: each cell is compared as soon as it ran
(for the progress line and ``on_cell``), and again after the last cell if a
later cell changed what it shows; the report holds the final verdict.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import itertools
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TextIO

from jupyter_exec.agent import execute_to_the_end
from jupyter_exec.compare import DEFAULT_RULES, ImageTolerance, Rule, compare_outputs, parse_rule
from jupyter_exec.exceptions import NotebookError
from jupyter_exec.models import Execution
from jupyter_exec.naming import replayed_notebook_name, safe_name
from jupyter_exec.notebookmeta import is_undone
from jupyter_exec.options import DEFAULT_TIMEOUT
from jupyter_exec.recorder import new_cell_id, read_notebook
from jupyter_exec.runorder import run_order, seq_of
from jupyter_exec.session import AsyncSession, Backend

__all__ = [
    "CellResult",
    "CellStatus",
    "ReplayReport",
    "replay",
    "replay_async",
]

CellStatus = Literal["same", "different", "error_now", "error_before", "skipped"]
"""A cell's verdict: outputs match / differ / fails only now / failed only in the record /
not run (non-code, empty, or past ``until``)."""

_BAD: frozenset[str] = frozenset({"different", "error_now", "error_before"})
_SHOWN = {
    "same": "same",
    "different": "DIFFERENT",
    "error_now": "ERROR NOW",
    "error_before": "ERROR BEFORE",
    "skipped": "skipped",
}

CellCallback = Callable[["CellResult"], Awaitable[None] | None]


@dataclass(frozen=True)
class CellResult:
    """The verdict on one cell of the replayed notebook."""

    index: int
    """0-based position in the notebook (markdown cells count)."""
    cell_type: str
    status: CellStatus
    source: str
    cell_id: str | None = None
    execution_count_before: int | None = None
    execution_count_now: int | None = None
    diff: str = ""
    """Unified diff of the normalised text outputs, ``recorded`` -> ``replayed``."""
    notes: tuple[str, ...] = ()
    """What else to know: image differences, why a cell was skipped, a lost kernel."""
    error_before: str | None = None
    error_now: str | None = None
    duration: float | None = None

    @property
    def number(self) -> int:
        """1-based position in the notebook, as the report names cells."""
        return self.index + 1

    @property
    def ok(self) -> bool:
        return self.status not in _BAD

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "cell_id": self.cell_id,
            "cell_type": self.cell_type,
            "status": self.status,
            "source": self.source,
            "execution_count_before": self.execution_count_before,
            "execution_count_now": self.execution_count_now,
            "diff": self.diff,
            "notes": list(self.notes),
            "error_before": self.error_before,
            "error_now": self.error_now,
            "duration": self.duration,
        }


@dataclass(frozen=True)
class ReplayReport:
    """What a replay found; ``reproduced`` is the one-word answer."""

    notebook: Path
    cells: tuple[CellResult, ...]
    output: Path | None = None
    """The notebook the replay was recorded to."""
    work_dir: Path | None = None
    until: int | None = None
    rules: tuple[str, ...] = ()
    """Names of the normalisation rules that were applied."""
    warnings: tuple[str, ...] = ()
    started: str = ""
    duration: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Facts about the source notebook, e.g. papermill's parameters."""

    @property
    def reproduced(self) -> bool:
        """True when no replayed cell differs from the record or fails on one side only."""
        return all(c.ok for c in self.cells)

    @property
    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(_SHOWN, 0)
        for cell in self.cells:
            out[cell.status] += 1
        return out

    @property
    def problems(self) -> list[CellResult]:
        """The cells that make the replay not reproduced, in notebook order."""
        return [c for c in self.cells if not c.ok]

    def summary(self) -> str:
        counts = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in self.counts.items() if n)
        verdict = "reproduced" if self.reproduced else "NOT reproduced"
        return f"{verdict}: {counts or 'no cells'} ({self.duration:.1f} s)"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the server extension's replay response)."""
        return {
            "notebook": str(self.notebook),
            "output": None if self.output is None else str(self.output),
            "work_dir": None if self.work_dir is None else str(self.work_dir),
            "reproduced": self.reproduced,
            "counts": self.counts,
            "until": self.until,
            "rules": list(self.rules),
            "warnings": list(self.warnings),
            "started": self.started,
            "duration": self.duration,
            "extra": dict(self.extra),
            "cells": [c.to_dict() for c in self.cells],
        }

    def to_markdown(self) -> str:
        """A readable report: a table of every cell, then the diff of each problem."""
        lines = [
            f"# Replay of `{self.notebook.name}`",
            "",
            f"**{self.summary()}**",
            "",
            f"- notebook: `{self.notebook}`",
        ]
        if self.output is not None:
            lines.append(f"- replayed notebook: `{self.output}`")
        if self.until is not None:
            lines.append(f"- replayed the first {self.until} code cell(s) only")
        lines.append(f"- normalisation rules: {', '.join(self.rules) or 'none'}")
        lines.extend(f"- warning: {w}" for w in self.warnings)
        lines += ["", "| cell | In (record → now) | status | first line |", "|---|---|---|---|"]
        for c in self.cells:
            counts = f"{_count(c.execution_count_before)} → {_count(c.execution_count_now)}"
            first = _first_line(c.source).replace("|", "\\|")
            lines.append(f"| {c.number} | {counts} | {_SHOWN[c.status]} | `{first}` |")
        for c in self.problems:
            lines += ["", f"## Cell {c.number}: {_SHOWN[c.status].lower()}", ""]
            lines += ["```python", c.source.rstrip(), "```"]
            if c.error_before:
                lines.append(f"- error in the record: `{c.error_before}`")
            if c.error_now:
                lines.append(f"- error now: `{c.error_now}`")
            lines.extend(f"- {note}" for note in c.notes)
            if c.diff:
                lines += ["", "```diff", c.diff, "```"]
        return "\n".join(lines) + "\n"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _first_line(source: str, width: int = 60) -> str:
    line = next((ln for ln in source.splitlines() if ln.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


# -- judging one cell ------------------------------------------------------------------


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
) -> CellResult:
    """The verdict on one replayed cell; ``shown`` is what it shows now if not its own outputs."""
    recorded = list(cell.get("outputs", ()))
    outputs = execution.outputs if shown is None else shown
    comparison = compare_outputs(recorded, outputs, rules, tolerance)
    before = _recorded_error(recorded)
    now = None if execution.ok or execution.error is None else str(execution.error)
    status: CellStatus
    if now is not None and before is None:
        status = "error_now"
    elif before is not None and now is None:
        status = "error_before"
    else:
        status = "same" if comparison.same else "different"
    notes = list(comparison.notes)
    papermill = (cell.get("metadata") or {}).get("papermill") or {}
    if cell.get("execution_count") is None and not recorded:
        notes.append("this cell was not run in the record (it has no outputs)")
    elif papermill.get("status") == "pending":
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
        diff=comparison.diff,
        notes=tuple(notes),
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


# -- progress --------------------------------------------------------------------------


class _Progress:
    """``[3/12] cell 5 ... same`` per cell on a stream; on a terminal, shown while running."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self.stream = stream
        self.total = total
        self.done = 0
        self.live = bool(getattr(stream, "isatty", lambda: False)())

    def _head(self, number: int) -> str:
        width = len(str(self.total))
        return f"[{self.done + 1:>{width}}/{self.total}] cell {number} ..."

    def start(self, number: int) -> None:
        if self.live:
            self.stream.write(self._head(number))
            self.stream.flush()

    def finish(self, result: CellResult) -> None:
        line = f"{self._head(result.number)} {_SHOWN[result.status]}"
        if result.error_now:
            line += f" ({result.error_now.splitlines()[0][:100]})"
        self.stream.write(("\r" if self.live else "") + line + "\n")
        self.stream.flush()
        self.done += 1

    def revise(self, result: CellResult) -> None:
        """A verdict changed after a later cell changed what the cell shows."""
        self.stream.write(
            f"cell {result.number}: {_SHOWN[result.status]} on what it shows at the end "
            "(a later cell updated its display)\n"
        )
        self.stream.flush()


# -- the replay ------------------------------------------------------------------------


class _ReplaySession(AsyncSession):
    """The replay's session, which can also say what a recorded cell shows now."""

    def shown_now(self, cell_index: int | None) -> list[dict[str, Any]] | None:
        """A copy of cell ``cell_index``'s outputs in the notebook as it stands (None: none)."""
        recorder = self._recorder
        if recorder is None or cell_index is None or not 0 <= cell_index < len(recorder):
            return None
        return copy.deepcopy(list(recorder.cells[cell_index].get("outputs", ())))


_REVISED = "judged on what it shows at the end: a later cell updated its display"


def _kernel_name(nb: Any, session_kwargs: Mapping[str, Any], warnings: list[str]) -> str:
    """The notebook's own kernel if installed, else python3 for Python notebooks."""
    spec = nb.metadata.get("kernelspec") or {}
    wanted = spec.get("name")
    if not wanted or session_kwargs.get("python") or session_kwargs.get("backend") == "docker":
        return "python3"
    from jupyter_client.kernelspec import KernelSpecManager

    if wanted in KernelSpecManager().find_kernel_specs():
        return str(wanted)
    language = spec.get("language") or (nb.metadata.get("language_info") or {}).get("name")
    if language not in (None, "", "python"):
        raise NotebookError(
            f"the notebook's kernel {wanted!r} ({language}) is not installed here; "
            "install it or pass kernel_name (--kernel)"
        )
    warnings.append(f"kernel {wanted!r} is not installed here; replayed with 'python3'")
    return "python3"


def _order_warning(cells: Sequence[Mapping[str, Any]]) -> str | None:
    counts = [c.get("execution_count") for c in cells if c.get("cell_type") == "code"]
    seen = [n for n in counts if isinstance(n, int)]
    if any(b <= a for a, b in itertools.pairwise(seen)):
        shown = ", ".join(str(n) for n in seen[:12]) + (", ..." if len(seen) > 12 else "")
        return (
            f"the record's cells ran out of order (In [{shown}]); "
            "the replay runs them top to bottom"
        )
    return None


def _followed_note(cells: Sequence[Mapping[str, Any]], order: Sequence[int]) -> str:
    ran = [i + 1 for i in order if seq_of(cells[i]) is not None]
    shown = ", ".join(str(n) for n in ran[:12]) + (", ..." if len(ran) > 12 else "")
    return f"the cells run in the order the record says they ran (cells {shown})"


def _output_path(source: Path, work_dir: Path, output: str | os.PathLike[str] | None) -> Path:
    path = (
        work_dir / replayed_notebook_name(source.stem)
        if output is None
        else Path(output).expanduser().absolute()
    )
    if path.resolve() == source.resolve():
        raise NotebookError(f"the replay would overwrite the original notebook {source}")
    return path


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


def _note_in_notebook(session: AsyncSession, source: Path, report: ReplayReport) -> None:
    ours = dict(session.notebook_metadata.get("jupyter_exec") or {})
    ours["replay"] = {
        "of": str(source),
        "reproduced": report.reproduced,
        "counts": report.counts,
        "until": report.until,
    }
    session.set_notebook_metadata("jupyter_exec", ours)


def _rules(default_rules: bool, rules: Iterable[Rule | str]) -> tuple[Rule, ...]:
    extra = tuple(r if isinstance(r, Rule) else parse_rule(r) for r in rules)
    return (DEFAULT_RULES if default_rules else ()) + extra


async def replay_async(
    notebook: str | os.PathLike[str],
    *,
    work_dir: str | os.PathLike[str] | None = None,
    output: str | os.PathLike[str] | None = None,
    until: int | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    backend: Backend = "local",
    kernel_name: str | None = None,
    rules: Iterable[Rule | str] = (),
    default_rules: bool = True,
    image_tolerance: float | ImageTolerance = 0.0,
    pixel_threshold: int = 0,
    progress: TextIO | None = None,
    on_cell: CellCallback | None = None,
    **session_kwargs: Any,
) -> ReplayReport:
    """Re-run ``notebook``'s code cells in a fresh session and compare each with its record.

    Parameters
    ----------
    work_dir:
        The kernel's working directory (default: the notebook's folder, so the
        cells' relative paths resolve as when it was recorded).
    output:
        Where the replay is recorded (default ``<work_dir>/<stem>.replayed.ipynb``);
        the original notebook is never written.
    until:
        Replay only the first ``until`` non-empty code cells; the rest are skipped.
    rules, default_rules:
        Extra normalisation rules (``Rule`` objects, or ``"REGEX"`` /
        ``"REGEX=>REPLACEMENT"`` strings) applied after the defaults
        (:data:`jupyter_exec.compare.DEFAULT_RULES`), which ``default_rules=False`` drops.
    image_tolerance, pixel_threshold:
        Images count as the same when at most this fraction of pixels differ by
        more than ``pixel_threshold`` in some channel (an :class:`ImageTolerance`
        may be given instead).
    progress:
        A stream for a one-line-per-cell progress display (e.g. ``sys.stderr``).
    on_cell:
        Called (or awaited) with each :class:`CellResult` as soon as it is known,
        and once more for a cell whose verdict a later cell's display update changed.
    session_kwargs:
        Passed to :class:`AsyncSession` (``python=``, ``docker=``, ``env=``,
        ``kernel_manager=`` ...), with ``backend`` and ``timeout``.

    Raises :class:`~jupyter_exec.NotebookError` for a notebook that cannot be
    read (not JSON, not a notebook, nbformat < 3, invalid) before any kernel starts.
    """
    started_at = datetime.now(timezone.utc).isoformat()
    clock = time.monotonic()
    if until is not None and until < 0:
        raise ValueError(f"until must be >= 0, not {until}")
    tolerance = (
        image_tolerance
        if isinstance(image_tolerance, ImageTolerance)
        else ImageTolerance(image_tolerance, pixel_threshold)
    )
    chosen_rules = _rules(default_rules, rules)
    source = Path(notebook).expanduser().absolute()
    nb = read_notebook(source)
    root = source.parent if work_dir is None else Path(work_dir).expanduser().absolute()
    target = _output_path(source, root, output)
    warnings: list[str] = []
    order = run_order(nb.cells)  # placed order, unless the notebook says how its cells ran
    if order != sorted(order):
        warnings.append(_followed_note(nb.cells, order))
    elif (unordered := _order_warning(nb.cells)) is not None:
        warnings.append(unordered)
    if kernel_name is None:
        kernel_name = _kernel_name(nb, {**session_kwargs, "backend": backend}, warnings)

    runnable = [
        step
        for step, i in enumerate(order)
        if (c := nb.cells[i]).cell_type == "code" and str(c.source).strip() and not is_undone(c)
    ]
    to_run = {order[step] for step in (runnable if until is None else runnable[:until])}
    last_step = max((s for s in runnable if order[s] in to_run), default=-1)
    bar = None if progress is None else _Progress(progress, len(to_run))
    results: list[CellResult] = []

    async def emit(result: CellResult) -> None:
        results.append(result)
        await emit_again(result)

    async def emit_again(result: CellResult) -> None:
        if on_cell is not None:
            outcome = on_cell(result)
            if inspect.isawaitable(outcome):
                await outcome

    session = _ReplaySession(
        root,
        kernel_name,
        notebook=target,
        name=safe_name(target.stem),
        timeout=timeout,
        backend=backend,
        overwrite=True,
        **session_kwargs,
    )
    ran: list[tuple[int, Mapping[str, Any], Execution]] = []
    async with session:
        for step, index in enumerate(order):
            cell = nb.cells[index]
            keep = until is None or step < last_step
            if index in to_run:
                if bar is not None:
                    bar.start(index + 1)
                execution = await execute_to_the_end(session, str(cell.source))
                ran.append((index, cell, execution))
                result = _judge(index, cell, execution, chosen_rules, tolerance)
                if bar is not None:
                    bar.finish(result)
                await emit(result)
                continue
            if cell.cell_type != "code":
                why = f"{cell.cell_type} cell"
            elif not str(cell.source).strip():
                why = "empty code cell"
            elif is_undone(cell):
                why = "undone cell (session.undo or restore)"
            else:
                why = f"after --until {until}"
            tags = (cell.get("metadata") or {}).get("tags", ())
            if keep and "papermill-error-cell-tag" not in tags:
                _record_plain_cell(session, cell)
            await emit(_skipped(index, cell, why))
        for index, cell, execution in ran:  # what later cells changed: judged on the end state
            shown = session.shown_now(execution.cell_index)
            if shown is None or shown == list(execution.outputs):
                continue
            position = next(i for i, r in enumerate(results) if r.index == index)
            final = _judge(index, cell, execution, chosen_rules, tolerance, shown)
            if final.status == results[position].status and final.diff == results[position].diff:
                continue
            final = replace(final, notes=(*final.notes, _REVISED))
            results[position] = final
            if bar is not None:
                bar.revise(final)
            await emit_again(final)
        report = ReplayReport(
            notebook=source,
            cells=tuple(results),
            output=target,
            work_dir=session.work_dir,
            until=until,
            rules=tuple(r.name for r in chosen_rules),
            warnings=tuple(warnings),
            started=started_at,
            duration=round(time.monotonic() - clock, 3),
            extra=_facts(nb),
        )
        _note_in_notebook(session, source, report)
    return report


def _facts(nb: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    papermill = nb.metadata.get("papermill")
    if isinstance(papermill, Mapping):
        facts["papermill"] = {
            k: papermill[k] for k in ("parameters", "version", "input_path") if k in papermill
        }
    kernelspec = nb.metadata.get("kernelspec")
    if isinstance(kernelspec, Mapping) and kernelspec.get("name"):
        facts["kernelspec"] = kernelspec["name"]
    return facts


def replay(notebook: str | os.PathLike[str], **kwargs: Any) -> ReplayReport:
    """Blocking :func:`replay_async` (same arguments); works inside a running event loop too.

    Ctrl-C cancels the replay and shuts its kernel down before re-raising.
    """
    from jupyter_exec.sync import _LoopThread

    finished = threading.Event()

    async def guarded() -> ReplayReport:
        try:
            return await replay_async(notebook, **kwargs)
        finally:
            finished.set()

    future = asyncio.run_coroutine_threadsafe(guarded(), _LoopThread.loop())
    try:
        return future.result()
    except KeyboardInterrupt:
        future.cancel()
        finished.wait(15)
        raise
