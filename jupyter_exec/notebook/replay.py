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
record says they ran (``jupyter_exec.run``, see :mod:`jupyter_exec.notebook.runorder`: a
notebook a person and an agent shared), else top to bottom (not in the
execution-count order, which is reported when it differs), and a failing cell
does not stop the replay: every cell gets a verdict.

A notebook's record is what a person sees at the end: a display a later cell
updated (``update_display``, a ``DisplayHandle``) shows its last value in
every cell showing that id, and ``clear_output(wait=True)`` has been applied.
The replay is judged the same way: each cell is compared as soon as it ran
(for the progress line and ``on_cell``), and again after the last cell if a
later cell changed what it shows; the report holds the final verdict.

The verdicts and their report are :mod:`jupyter_exec.notebook.report`; how one cell is
judged is :mod:`jupyter_exec.notebook.judge`; this module is the driver that runs the cells.
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
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from jupyter_exec.boundary.naming import replayed_notebook_name, safe_name
from jupyter_exec.engine.cancel import execute_to_the_end
from jupyter_exec.engine.languages import kernel_for, language_of_kernel
from jupyter_exec.engine.session import AsyncSession, Backend
from jupyter_exec.exceptions import NotebookError
from jupyter_exec.models import Execution
from jupyter_exec.notebook.compare import DEFAULT_RULES, ImageTolerance, Rule, parse_rule
from jupyter_exec.notebook.judge import _judge, _skipped
from jupyter_exec.notebook.meta import is_undone
from jupyter_exec.notebook.recorder import new_cell_id, read_notebook
from jupyter_exec.notebook.report import CellResult, CellStatus, ReplayReport, _Progress
from jupyter_exec.notebook.runorder import run_order, seq_of
from jupyter_exec.options import DEFAULT_TIMEOUT

__all__ = [
    "CellResult",
    "CellStatus",
    "ReplayReport",
    "replay",
    "replay_async",
]

CellCallback = Callable[["CellResult"], Awaitable[None] | None]


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
    if session_kwargs.get("language"):
        return kernel_for(str(session_kwargs["language"]))
    if not wanted or session_kwargs.get("python"):
        return "python3"
    if session_kwargs.get("backend") == "docker":  # the image has python3, ir, bash and deno
        return str(wanted) if language_of_kernel(str(wanted)) else "python3"
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
    if path == source or (path.exists() and source.exists() and os.path.samefile(path, source)):
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
        (:data:`jupyter_exec.notebook.compare.DEFAULT_RULES`), which ``default_rules=False`` drops.
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
