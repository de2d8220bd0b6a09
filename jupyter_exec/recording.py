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

import contextlib
import copy
import dataclasses
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from jupyter_exec import guard
from jupyter_exec.exceptions import NotebookError, StorageError, WorkDirError
from jupyter_exec.forking import container_of
from jupyter_exec.guard import CellGuard
from jupyter_exec.kernel import KernelHandle
from jupyter_exec.models import CellError, Execution, Result, ScriptResult, StateRecovery
from jupyter_exec.naming import default_session_name, notebook_name
from jupyter_exec.network.policy import Connection
from jupyter_exec.network.redact import redact, secret_needles
from jupyter_exec.options import SessionOptions
from jupyter_exec.outputs import CellOutputs, stream_text, strip_ansi
from jupyter_exec.recorder import NotebookRecorder, new_cell_id
from jupyter_exec.runner import CellRun, is_interrupt
from jupyter_exec.runorder import run_stamp
from jupyter_exec.scripts import run_script, script_path
from jupyter_exec.store import FileSpill, OutputStore, WorkDirTracker

__all__ = [
    "Cell",
    "Recording",
    "SafeSpill",
    "fork_metadata",
    "is_undone",
    "mark_recovered",
    "mark_undone",
    "note_state_change",
    "notebook_metadata",
    "prepare_notebook_path",
    "prepare_work_dir",
    "remove_made",
]

log = logging.getLogger("jupyter_exec")


def _storage_error(exc: OSError | WorkDirError, what: str) -> StorageError:
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, WorkDirError):  # e.g. a link where the file was to go
        return StorageError(f"could not write {what}: {exc}")
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
        except (OSError, WorkDirError) as exc:
            self.error = _storage_error(exc, f"the full text of {name}")

    def location(self, name: str) -> str | None:
        return None if self.error is not None else self._spill.location(name)

    def close(self) -> list[Path]:
        """Close the files; the paths written (none if a write failed)."""
        try:
            self._spill.close()
        except (OSError, WorkDirError) as exc:
            self.error = self.error or _storage_error(exc, "the full text of a stream")
        return [] if self.error is not None else list(self._spill.paths.values())


@dataclass
class Cell:
    """A cell being run: where it will be recorded and what collects its outputs."""

    index: int
    builder: CellOutputs
    spill: SafeSpill | None
    guard: CellGuard | None = None
    """What the kernel's output guard is asked for this cell (None: no guard, or no writes)."""
    network: Any = None
    """The kernel's network proxy (a policy is set), and its record's position at the start."""
    network_mark: int = 0
    network_revived: bool = False
    """The proxy had stopped (requests failed closed) and was started again before this cell."""

    @property
    def metadata(self) -> dict[str, Any] | None:
        """For the execute_request: the guard's budget and files."""
        return self.guard.metadata if self.guard is not None else None

    def abandon(self) -> None:
        """The run failed before it could be recorded: close the spill file."""
        if self.spill is not None:
            self.spill.close()


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
        self.scripts_run = 0
        self.restart_note: str | None = None
        """Why the kernel was restarted; noted on the next recorded cell."""
        # display_id -> (cell index, output number in the cell, the output dict in the record)
        self._displays: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}

    async def begin(self, kernel: KernelHandle, *, write: bool, max_chars: int) -> Cell:
        """A new cell to run: its index, its output builder and, when writing, its spill file
        and the request that the kernel's stream guard keep a flood back."""
        index = len(self.recorder) if self.recorder is not None else self.cells_run
        self.cells_run += 1
        spill = SafeSpill(FileSpill(self.store, index)) if write else None
        cell = Cell(index, CellOutputs(max_stream_chars=max_chars, spill=spill), spill)
        network = getattr(kernel, "network", None)  # (a scripted test kernel has none)
        if network is not None:
            cell.network, cell.network_mark = network, network.mark()
            network.cell = index
            cell.network_revived = await network.revive()
        if spill is not None:
            cell.guard = await guard.prepare(
                kernel, self.store.work_dir, self.store.folder, index, cell.builder.head_limit
            )
        return cell

    def record(self, code: str, cell: Cell, run: CellRun, duration: float) -> Execution:
        """Save the cell's files and notebook cell; the caller's Execution.

        A cell begun with ``write=False`` (a resume re-running recorded cells)
        writes nothing. Raises :class:`StorageError` or :class:`NotebookError`
        carrying the Execution when a write failed; the cell is kept either way.
        """
        cell_index, builder, spill = cell.index, cell.builder, cell.spill
        write = spill is not None
        if spill is not None and cell.guard is not None:  # what the kernel's guard kept back
            try:
                cell.guard.absorb(builder, spill)
            except (OSError, WorkDirError) as exc:
                spill.error = spill.error or _storage_error(exc, "the full text of a stream")
        spilled = spill.close() if spill is not None else []
        failure: StorageError | NotebookError | None = spill.error if spill is not None else None
        outputs, error = _final_outputs(builder, run)
        connections: tuple[Connection, ...] = ()
        if cell.network is not None:
            connections = cell.network.since(cell.network_mark)
            outputs, error = _redacted(outputs, error, cell.network.policy.secret_values())

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
                except (OSError, WorkDirError) as exc:
                    failure = failure or _storage_error(exc, f"an output of cell {cell_index + 1}")
                if cell.guard is not None:  # too large to send: the kernel saved these itself
                    files.update(cell.guard.saved_files(output))
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
            except (OSError, WorkDirError) as exc:
                touched = set()
                failure = failure or _storage_error(exc, "an updated output's file")
            self._remember_displays(builder, cell_index, numbered)
            if self.recorder is not None:
                for index in touched:
                    self.recorder.refresh(index, save=False)
                try:
                    recorded_index = self.recorder.append(
                        self._cell(
                            code, builder, run, duration, outputs, connections, cell.network_revived
                        )
                    )
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
            connections=connections,
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
        connections: tuple[Connection, ...] = (),
        network_revived: bool = False,
    ) -> dict[str, Any]:
        ours: dict[str, Any] = {"status": run.status, "duration": round(duration, 6)}
        if connections:  # what the network policy decided while the cell ran
            ours["network"] = [c.to_dict() for c in connections[-MAX_RECORDED_CONNECTIONS:]]
        if network_revived:
            ours["network_proxy"] = (
                "the network proxy had stopped (requests failed closed); restarted before this cell"
            )
        if self.restart_note is not None and run.status != "died" and not run.state_lost:
            ours["kernel"] = self.restart_note
            self.restart_note = None
        if run.state_lost:
            ours["state_lost"] = True
        assert self.recorder is not None  # only recorded cells are built
        session = (self.recorder.metadata.get("jupyter_exec") or {}).get("session")
        seq = self.recorder.next_run_seq(builder.execution_count)
        ours["run"] = run_stamp(seq, "agent", session if isinstance(session, str) else None)
        cell_id, self.recorder.next_cell_id = self.recorder.next_cell_id or new_cell_id(), None
        return {
            "cell_type": "code",
            "id": cell_id,
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

    async def run_script(
        self,
        kernel: KernelHandle,
        code: str,
        language: str,
        filename: str | None,
        timeout: float | None,
    ) -> ScriptResult:
        """Run a script as a new process; its result names the files it wrote."""
        work_dir = self.store.work_dir
        self.scripts_run += 1
        path = script_path(work_dir, self.store.folder, self.scripts_run, language, filename)
        self.tracker.changes()  # what changed before this run is not the script's doing
        network = getattr(kernel, "network", None)  # the proxy a Docker process goes through
        mark = network.mark() if network is not None else 0
        spec = kernel.spec
        result = await run_script(
            path,
            code,
            language,
            work_dir=work_dir,
            kernel_argv=list(spec.argv) if spec else [],
            kernel_env=dict(spec.env or {}) if spec else {},
            provisioner=container_of(kernel) or kernel.km.provisioner,
            timeout=timeout,
        )
        produced = tuple(p for p in self.tracker.changes() if p != path.resolve())
        connections = network.since(mark) if network is not None else ()
        return dataclasses.replace(result, files=produced, connections=connections)

    def adopt(self, recorder: NotebookRecorder) -> None:
        """Record into ``recorder`` from now on (saved at once, so the notebook exists)."""
        recorder.save()
        self.recorder = recorder

    def metadata(self) -> dict[str, Any]:
        """A copy of the notebook's metadata (empty when not recording)."""
        return copy.deepcopy(self.recorder.metadata) if self.recorder is not None else {}

    def set_metadata(self, key: str, value: Any) -> None:
        """Set a top-level notebook metadata entry and save (no-op when not recording)."""
        if self.recorder is not None:
            self.recorder.set_metadata(key, value)
            self.recorder.save()

    def record_cell(self, cell: Mapping[str, Any]) -> int | None:
        """Append a cell that was not executed; its index, or ``None`` when not recording."""
        if self.recorder is None:
            return None
        made = dict(cell)
        made.setdefault("id", new_cell_id())
        made.setdefault("metadata", {})
        return self.recorder.append(made)

    def ignore_session(self, notebook: Path | None, files_dir: Path) -> None:
        """Do not report another session's notebook and files as written by our cells
        (a fork and its parent share the work dir)."""
        if notebook is not None:
            self.tracker.ignore.add(notebook.resolve())
        self.tracker.skip_dirs.add(str(files_dir.resolve()))
        self.tracker.changes()  # what the other session wrote so far is not our doing

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


def _redacted(
    outputs: list[dict[str, Any]], error: CellError | None, secrets: tuple[str, ...]
) -> tuple[list[dict[str, Any]], CellError | None]:
    """The outputs and error without the network policy's secrets (should the kernel hold one:
    an allowed host may echo a header back)."""
    needles = secret_needles(secrets)
    if not needles:
        return outputs, error
    if error is not None:
        error = CellError(
            redact(error.ename, needles),
            redact(error.evalue, needles),
            redact(error.traceback, needles),
        )
    return [redact(o, needles) for o in outputs], error


MAX_RECORDED_CONNECTIONS = 200
"""Network decisions kept in one cell's metadata (the latest); the Execution has them all."""

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


# -- where a session records ---------------------------------------------------------------


def prepare_paths(
    options: SessionOptions, made: list[Path], *, resume: bool
) -> tuple[Path, str, Path | None]:
    """A starting session's work dir (made if need be; ``made`` lists what was), its name
    and its notebook's path (None when recording is off)."""
    work_dir = prepare_work_dir(options.work_dir, made)
    name = options.name or default_session_name(work_dir)
    notebook = prepare_notebook_path(
        options.notebook, work_dir, name, resume=resume, overwrite=options.overwrite
    )
    return work_dir, name, notebook


def prepare_work_dir(given: Path | None, made: list[Path]) -> Path:
    """The work dir, created if missing (a fresh temporary one for ``None``).

    Every folder this call created is appended to ``made``, so a start that
    fails can remove them again (:func:`remove_made`).
    """
    if given is None:
        path = Path(tempfile.mkdtemp(prefix="jupyter-exec-"))
        made.append(path)
        log.warning("jupyter-exec: work dir %s (temporary, kept after the session)", path)
        return path
    path = given.expanduser().absolute()
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkDirError(f"cannot create the work dir {path}: {exc.strerror}") from exc
    made.extend(reversed(missing))
    if not path.is_dir():
        raise WorkDirError(f"the work dir {path} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise WorkDirError(f"the work dir {path} is not writable by this user")
    return path


def remove_made(made: list[Path], *, temporary: bool) -> None:
    """Undo :func:`prepare_work_dir`: a temporary dir goes whole, other folders only if empty."""
    for path in reversed(made):
        if temporary:
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.rmdir()


def prepare_notebook_path(
    given: Path | Literal[False] | None,
    work_dir: Path,
    name: str,
    *,
    resume: bool,
    overwrite: bool,
) -> Path | None:
    """Where the notebook goes (``None``: not recording), refusing to clobber one by accident."""
    if given is False:
        return None
    path = (work_dir / notebook_name(name) if given is None else given).expanduser().absolute()
    if path.suffix != ".ipynb":
        raise NotebookError(f"the notebook path {path} must end in .ipynb")
    if resume:
        if not path.is_file():
            raise NotebookError(f"cannot resume: no notebook at {path}")
        return path
    if path.exists() and not overwrite:
        raise NotebookError(
            f"{path} already exists; pass overwrite=True to replace it, "
            "or choose another notebook path or session name"
        )
    if not path.parent.is_dir():
        raise NotebookError(f"the folder of the notebook {path} does not exist")
    return path


def notebook_metadata(kernel: KernelHandle, options: SessionOptions, name: str) -> dict[str, Any]:
    """A session notebook's metadata: the kernel's spec and language, and ours."""
    spec = kernel.spec
    language_info = dict(kernel.kernel_info.get("language_info", {})) or {"name": "python"}
    return {
        "kernelspec": {
            "name": options.kernel_name if options.python is None else "python3",
            "display_name": spec.display_name if spec else options.kernel_name,
            "language": (spec.language if spec else None) or language_info.get("name", ""),
        },
        "language_info": language_info,
        "jupyter_exec": {
            "session": name,
            "backend": options.backend,
            "created": datetime.now(timezone.utc).isoformat(),
        },
    }


# -- forks, undo and checkpoints in the notebook ------------------------------------------


def fork_metadata(parent: Mapping[str, Any], name: str, where: dict[str, Any]) -> dict[str, Any]:
    """A fork's notebook metadata: the parent's, renamed, with ``jupyter_exec.fork`` = ``where``.

    The parent's own history of forks, undos and checkpoints stays behind.
    """
    metadata = copy.deepcopy(dict(parent))
    ours = dict(metadata.get("jupyter_exec") or {})
    ours.pop("state", None)
    ours.update(session=name, created=datetime.now(timezone.utc).isoformat(), fork=where)
    metadata["jupyter_exec"] = ours
    return metadata


def is_undone(cell: Mapping[str, Any]) -> bool:
    """Whether a notebook cell was undone (its effect is not in the session's state)."""
    ours = (cell.get("metadata") or {}).get("jupyter_exec") or {}
    return isinstance(ours, Mapping) and ours.get("undone") is True


def mark_undone(recorder: NotebookRecorder, from_index: int, undone: frozenset[int]) -> None:
    """Mark code cells undone (``jupyter_exec.undone``) so the notebook matches the state.

    After the state went back to a snapshot taken when the notebook had
    ``from_index`` cells: those from there on are undone, and earlier ones
    carry the marks they had then (``undone``). Replay and resume skip them.
    """
    for index, cell in enumerate(recorder.cells):
        if cell.get("cell_type") != "code":
            continue
        want = index >= from_index or index in undone
        ours = cell.setdefault("metadata", {}).setdefault("jupyter_exec", {})
        if bool(ours.get("undone")) == want:
            continue
        if want:
            ours["undone"] = True
        else:
            ours.pop("undone", None)
        recorder.refresh(index, save=False)
    recorder.save()


def mark_recovered(recorder: NotebookRecorder, index: int, recovery: StateRecovery) -> None:
    """Cell ``index``, whose kernel died, is undone: the state from before another cell came
    back from a snapshot or a checkpoint, with these names; others were lost (and why)."""
    cells = recorder.cells
    if not 0 <= index < len(cells):
        return
    ours = cells[index].setdefault("metadata", {}).setdefault("jupyter_exec", {})
    ours["undone"] = True
    ours["recovered"] = {
        "from_cell_index": recovery.from_cell_index,
        "names": list(recovery.names),
        "source": recovery.source,
        "lost": dict(recovery.lost),
    }
    recorder.refresh(index)


def note_state_change(
    recording: Recording | None, entry: dict[str, Any], next_cell_note: str | None
) -> None:
    """Add ``entry`` to the notebook's ``jupyter_exec.state`` history, and note the next cell."""
    if recording is None:
        return
    if next_cell_note is not None:
        recording.restart_note = next_cell_note
    recorder = recording.recorder
    if recorder is None:
        return
    ours = dict(recorder.metadata.get("jupyter_exec") or {})
    entry = {**entry, "at": datetime.now(timezone.utc).isoformat()}
    ours["state"] = [*ours.get("state", []), entry]
    recorder.set_metadata("jupyter_exec", ours)
    recorder.save()
