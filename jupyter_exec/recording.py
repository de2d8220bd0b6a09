"""A session's record: output files, notebook, work-dir changes, display updates across cells.

The session hands each finished cell to :meth:`Recording.record`, which does,
in order::

    rich outputs ─► files  <work_dir>/<name>_files/cell-NNN-k.ext      [store.py]
    update_display_data for ids shown in earlier cells ─► those cells' outputs
                    (and their files), as Jupyter applies them: every cell showing the id
    the cell ─► the session notebook, saved atomically                 [recorder.py]
    files the code wrote ─► found by comparing work-dir snapshots      [store.py]
    ─► the caller's Execution, built from a *copy* of the outputs, so a
       later display update changes the notebook, never an earlier result

A failed write does not lose the cell: a file that cannot be written (disk
full) leaves the cell recorded with its outputs and raises
:class:`~jupyter_exec.StorageError` carrying the Execution; a notebook that
cannot be saved keeps the cell in memory and raises
:class:`~jupyter_exec.NotebookError` the same way. The next cell tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_exec import guard
from jupyter_exec.exceptions import NotebookError, StorageError
from jupyter_exec.guard import CellGuard
from jupyter_exec.kernel import KernelHandle
from jupyter_exec.models import CellError, Execution, Result
from jupyter_exec.outputs import CellOutputs, stream_text, strip_ansi
from jupyter_exec.recorder import NotebookRecorder, new_cell_id
from jupyter_exec.runner import CellRun, is_interrupt
from jupyter_exec.store import FileSpill, OutputStore, WorkDirTracker

__all__ = ["Recording", "SafeSpill"]

log = logging.getLogger("jupyter_exec")


def _storage_error(exc: OSError, what: str) -> StorageError:
    if isinstance(exc, StorageError):
        return exc
    reason = exc.strerror or str(exc)
    return StorageError(f"could not write {what}: {reason}", exc.errno)


class SafeSpill:
    """A :class:`FileSpill` that never stops a running cell: a failed write is kept for later.

    Streams keep flowing into the notebook (head and tail) while the disk is
    full; the first error is reported once the cell is recorded.
    """

    def __init__(self, spill: FileSpill) -> None:
        self._spill = spill
        self.error: StorageError | None = None

    def write(self, name: str, text: str) -> None:
        if self.error is not None:
            return
        try:
            self._spill.write(name, text)
        except OSError as exc:
            self.error = _storage_error(exc, f"the full text of {name}")

    def location(self, name: str) -> str | None:
        return None if self.error is not None else self._spill.location(name)

    def close(self) -> list[Path]:
        """Close the files; the paths written (none if a write failed)."""
        try:
            self._spill.close()
        except OSError as exc:
            self.error = self.error or _storage_error(exc, "the full text of a stream")
        return [] if self.error is not None else list(self._spill.paths.values())


class Recording:
    """Everything a session writes for its cells, and the bookkeeping across cells."""

    def __init__(self, work_dir: Path, folder: str, notebook: Path | None) -> None:
        self.store = OutputStore(work_dir, folder)
        self.recorder: NotebookRecorder | None = None
        """The notebook (set by the session once it knows the kernel; None: not recording)."""
        self.tracker = WorkDirTracker(
            work_dir,
            ignore=[notebook] if notebook is not None else [],
            skip_dirs=[self.store.work_dir / folder],
        )
        self.cells_run = 0
        self.restart_note: str | None = None
        """Why the kernel was restarted; noted on the next recorded cell."""
        # display_id -> (cell index, output number in the cell, the output dict in the record)
        self._displays: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}

    def next_index(self) -> int:
        """The notebook index the next executed cell will have."""
        index = len(self.recorder) if self.recorder is not None else self.cells_run
        self.cells_run += 1
        return index

    def spill(self, cell_index: int) -> SafeSpill:
        return SafeSpill(FileSpill(self.store, cell_index))

    async def guard(
        self, kernel: KernelHandle, cell_index: int, builder: CellOutputs
    ) -> CellGuard | None:
        """What the kernel's output guard is asked for this cell (None: the kernel has none)."""
        return await guard.prepare(
            kernel, self.store.work_dir, self.store.folder, cell_index, builder.head_limit
        )

    def absorb(self, cell_guard: CellGuard | None, builder: CellOutputs, spill: SafeSpill) -> None:
        """Join what the kernel kept back to the cell's outputs and spill file."""
        if cell_guard is None:
            return
        try:
            cell_guard.absorb(builder, spill)
        except OSError as exc:
            spill.error = spill.error or _storage_error(exc, "the full text of a stream")

    def record(
        self,
        code: str,
        cell_index: int,
        builder: CellOutputs,
        run: CellRun,
        duration: float,
        spill: SafeSpill | None,
        cell_guard: CellGuard | None = None,
    ) -> Execution:
        """Save the cell's files and notebook cell; the caller's Execution.

        ``spill=None`` (a resume re-running recorded cells) writes nothing.
        Raises :class:`StorageError` or :class:`NotebookError` carrying the
        Execution when a write failed; the cell is kept either way.
        """
        write = spill is not None
        spilled = spill.close() if spill is not None else []
        failure: StorageError | NotebookError | None = spill.error if spill is not None else None
        outputs, error = _final_outputs(builder, run)

        results: list[Result] = []
        saved: list[Path] = list(spilled)
        numbered: list[tuple[int, dict[str, Any]]] = []
        number = 0
        for output in outputs:
            if output["output_type"] not in ("display_data", "execute_result"):
                continue
            number += 1
            numbered.append((number, output))
            files: dict[str, Path] = {}
            if write:
                try:
                    files = self.store.save_bundle(cell_index, number, output.get("data", {}))
                except OSError as exc:
                    failure = failure or _storage_error(exc, f"an output of cell {cell_index + 1}")
                if cell_guard is not None:  # too large to send: the kernel saved these itself
                    files.update(cell_guard.saved_files(output))
                saved.extend(files.values())
            results.append(
                Result(
                    data=dict(output.get("data", {})),
                    metadata=dict(output.get("metadata", {})),
                    is_main_result=output["output_type"] == "execute_result",
                    files=files,
                )
            )

        recorded_index: int | None = None
        if write:
            try:
                touched = self._update_earlier_cells(builder.foreign_updates)
            except OSError as exc:
                touched = set()
                failure = failure or _storage_error(exc, "an updated output's file")
            self._remember_displays(builder, cell_index, numbered)
            cell = self._cell(code, builder, run, duration, outputs)
            if self.recorder is not None:
                for index in touched:
                    self.recorder.refresh(index, save=False)
                try:
                    recorded_index = self.recorder.append(cell)
                except NotebookError as exc:
                    recorded_index = len(self.recorder) - 1
                    failure = failure or exc

        changed = self.tracker.changes()
        seen = set(saved)
        execution = Execution(
            code=code,
            status=run.status,
            results=tuple(results),
            stdout=stream_text(outputs, "stdout"),
            stderr=stream_text(outputs, "stderr"),
            error=error,
            execution_count=builder.execution_count,
            files=(*saved, *(p for p in changed if p not in seen)),
            duration=duration,
            cell_index=recorded_index,
            state_lost=run.state_lost,
            truncated=builder.truncated,
            spilled=tuple(spilled),
            outputs=tuple(_copy_output(o) for o in outputs),
        )
        if failure is not None:
            failure._attach(execution)
            raise failure
        return execution

    def _cell(
        self,
        code: str,
        builder: CellOutputs,
        run: CellRun,
        duration: float,
        outputs: list[dict[str, Any]],
    ) -> dict[str, Any]:
        ours: dict[str, Any] = {"status": run.status, "duration": round(duration, 6)}
        if self.restart_note is not None and run.status != "died" and not run.state_lost:
            ours["kernel"] = self.restart_note
            self.restart_note = None
        if run.state_lost:
            ours["state_lost"] = True
        return {
            "cell_type": "code",
            "id": new_cell_id(),
            "execution_count": builder.execution_count,
            "metadata": {"execution": run.timing, "jupyter_exec": ours},
            "outputs": outputs,
            "source": code,
        }

    def _update_earlier_cells(self, updates: list[dict[str, Any]]) -> set[int]:
        """Apply ``update_display_data`` to earlier cells showing that id (notebook and files)."""
        touched: set[int] = set()
        for update in updates:
            for cell_index, number, output in self._displays.get(update["display_id"], ()):
                output["data"] = update["data"]
                output["metadata"] = update["metadata"]
                touched.add(cell_index)
                self.store.save_bundle(cell_index, number, update["data"])
        return touched

    def _remember_displays(
        self, builder: CellOutputs, cell_index: int, numbered: list[tuple[int, dict[str, Any]]]
    ) -> None:
        """Note this cell's outputs by display id, so later cells' updates reach them."""
        displays = builder.displays
        if not displays:
            return
        numbers = {id(output): number for number, output in numbered}
        for display_id, shown in displays.items():
            self._displays.setdefault(display_id, []).extend(
                (cell_index, numbers[id(o)], o) for o in shown if id(o) in numbers
            )

    def record_cell(self, cell: Mapping[str, Any]) -> int | None:
        """Append a cell that was not executed; its index, or ``None`` when not recording."""
        if self.recorder is None:
            return None
        made = dict(cell)
        made.setdefault("id", new_cell_id())
        made.setdefault("metadata", {})
        return self.recorder.append(made)

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()  # the spare file; the notebook stays


def _final_outputs(
    builder: CellOutputs, run: CellRun
) -> tuple[list[dict[str, Any]], CellError | None]:
    """The cell's outputs and error, with our error output for a timeout or a dead kernel."""
    outputs = builder.finish()
    error = run.error
    if error is not None:
        outputs = [o for o in outputs if not is_interrupt(o)]
        outputs.append(
            {
                "output_type": "error",
                "ename": error.ename,
                "evalue": error.evalue,
                "traceback": [
                    f"{error.ename}: {error.evalue}",
                    *([error.traceback] if error.traceback else []),
                ],
            }
        )
    elif run.status == "error":
        # Every error status carries an error: the kernel's error output, else its reply's
        # (an unknown %magic is reported on stderr and in the reply only).
        error = _error_from(outputs) or run.reply_error or _NO_DETAILS
    return outputs, error


_NO_DETAILS = CellError("Error", "the kernel reported an error but sent no details")


def _error_from(outputs: list[dict[str, Any]]) -> CellError | None:
    for output in reversed(outputs):
        if output.get("output_type") == "error":
            return CellError(
                ename=str(output.get("ename", "")),
                evalue=str(output.get("evalue", "")),
                traceback=strip_ansi("\n".join(output.get("traceback", []))),
            )
    return None


def _copy_output(output: dict[str, Any]) -> dict[str, Any]:
    """A copy of an output whose containers a later display update cannot reach."""
    copied = dict(output)
    for key in ("data", "metadata"):
        if key in copied:
            copied[key] = dict(copied[key])
    if isinstance(copied.get("traceback"), list):
        copied["traceback"] = list(copied["traceback"])
    return copied
