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

The cell in flight and the outputs it settles into live in
:mod:`jupyter_exec.engine.inflight`; where a session records (work dir, notebook
path) in :mod:`jupyter_exec.engine.workdir`; the notebook metadata that forks,
undos and state changes edit in :mod:`jupyter_exec.engine.meta`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_exec.engine import guard, remote_files
from jupyter_exec.engine.inflight import (
    Cell,
    SafeSpill,
    copy_output,
    final_outputs,
    joined,
    redacted,
    storage_error,
)
from jupyter_exec.engine.installs import Installs
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.engine.outputs import CellOutputs
from jupyter_exec.engine.recorder import NotebookRecorder, new_cell_id
from jupyter_exec.engine.runner import CellRun
from jupyter_exec.engine.runorder import run_stamp
from jupyter_exec.engine.scripts import run_script, script_path
from jupyter_exec.engine.store import FileSpill, OutputStore, WorkDirTracker
from jupyter_exec.engine.widget_capture import merge_widget_state
from jupyter_exec.exceptions import NotebookError, StorageError, WorkDirError
from jupyter_exec.models import Execution, Result, ScriptResult
from jupyter_exec.network.policy import Connection
from jupyter_exec.network.redact import Redactor
from jupyter_exec.session import envrecord
from jupyter_exec.state.forking import container_of

__all__ = ["Recording"]

MAX_WRITTEN_NOTED = 1000
"""Most created files named in a notebook's ``jupyter_exec.written``."""


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
        self._image_noted = False  # a Docker kernel's image is asked of the engine once
        """Why the kernel was restarted; noted on the next recorded cell."""
        # display_id -> (cell index, output number in the cell, the output dict in the record)
        self._displays: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}

    def next_index(self) -> int:
        """The index the next cell will have: in the notebook, or in the cells run without one."""
        return len(self.recorder) if self.recorder is not None else self.cells_run

    def plan_installs(self, installs: Installs) -> None:
        """The helpers :meth:`begin` asks of a new kernel process for a written cell (the
        stream guard; with a notebook, the environment capture), in the session's batch."""
        guard.plan(installs)
        if self.recorder is not None:
            envrecord.plan(installs)

    async def begin(self, kernel: KernelHandle, *, write: bool, max_chars: int) -> Cell:
        """A new cell to run: its index, its output builder and, when writing, its spill file
        and the request that the kernel's stream guard keep a flood back."""
        index = self.next_index()
        self.cells_run += 1
        spill = SafeSpill(FileSpill(self.store, index)) if write else None
        network = getattr(kernel, "network", None)  # (a scripted test kernel has none)
        # The one place a policy's secrets are taken out of what the kernel sends: every
        # event, output, spill and record of the cell is built from redacted messages.
        redactor = Redactor(network.policy.secret_values()) if network is not None else None
        builder = CellOutputs(max_stream_chars=max_chars, spill=spill, redactor=redactor)
        cell = Cell(index, builder, spill, redactor=redactor)
        if network is not None:
            cell.network, cell.network_mark = network, network.mark()
            network.cell = index
            cell.network_revived = await network.revive()
        if spill is not None:
            cell.guard = await guard.prepare(
                kernel, self.store.work_dir, self.store.folder, index, cell.builder.head_limit
            )
            cell.expressions.update(await remote_files.expressions(kernel))
            if self.recorder is not None:
                cell.expressions.update(await envrecord.expressions(kernel))
                if not self._image_noted:
                    self._image_noted = True
                    self._note_image(await envrecord.docker_image(kernel))
        cell.host = kernel.host
        return cell

    async def bring_home(
        self, kernel: KernelHandle, cell: Cell, run: CellRun
    ) -> StorageError | None:
        """Copy the files a remote kernel's cell wrote into the work dir (before
        :meth:`record`, whose scan then lists them); the write failure, if any, to report
        with the cell (:mod:`jupyter_exec.engine.remote_files`)."""
        if cell.spill is None or remote_files.EXPRESSION_KEY not in cell.expressions:
            return None
        try:
            home = await remote_files.bring_home(
                kernel, run.user_expressions, self.store.work_dir, self._ours
            )
        except StorageError as exc:
            cell.left_remote.append({"reason": str(exc)})
            return exc
        cell.left_remote.extend(home.left)
        return None

    def _ours(self, name: str) -> str | None:
        """Why a remote kernel's file may not take ``name`` in the work dir, or None."""
        path = (self.store.work_dir / name).absolute()
        if path in self.tracker.ignore:
            return "it is the session's notebook"
        inside = str(path)
        for skipped in self.tracker.skip_dirs:
            if inside == skipped or inside.startswith(skipped + "/"):
                return "it is in a folder the session writes its own files to"
        return None

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
                spill.error = spill.error or storage_error(exc, "the full text of a stream")
        spilled = spill.close() if spill is not None else []
        failure: StorageError | NotebookError | None = spill.error if spill is not None else None
        outputs, error = final_outputs(builder, run)
        connections: tuple[Connection, ...] = ()
        if cell.network is not None:
            connections = cell.network.since(cell.network_mark)
        if cell.redactor is not None:  # again, now that \r and \b are applied, and the errors
            outputs, error = redacted(outputs, error, cell.redactor)

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
                    failure = failure or storage_error(exc, f"an output of cell {cell_index + 1}")
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
        changed = self.tracker.changes()  # before the cell is saved: its record names them
        if write and self.recorder is not None:
            self._note_environment(run, cell.redactor)
            self._note_host(cell.host)
            self._note_written(changed)
            captured = builder.captures.finish()
            if captured:  # what Output widgets captured goes in their state, as Jupyter keeps it
                widgets = merge_widget_state(self.recorder.metadata, captured)
                self.recorder.set_metadata("widgets", widgets)
        if write:
            try:
                touched = self._update_earlier_cells(builder.foreign_updates)
            except (OSError, WorkDirError) as exc:
                touched = set()
                failure = failure or storage_error(exc, "an updated output's file")
            self._remember_displays(builder, cell_index, numbered)
            if self.recorder is not None:
                for index in touched:
                    self.recorder.refresh(index, save=False)
                try:
                    recorded_index = self.recorder.append(
                        self._cell(
                            code,
                            builder,
                            run,
                            duration,
                            outputs,
                            connections,
                            cell.network_revived,
                            cell.host,
                            cell.left_remote,
                        )
                    )
                except NotebookError as exc:
                    recorded_index = len(self.recorder) - 1
                    failure = failure or exc

        seen = set(saved)
        execution = Execution(
            code=code,
            status=run.status,
            results=tuple(results),
            stdout=joined(outputs, "stdout", cell.redactor),
            stderr=joined(outputs, "stderr", cell.redactor),
            error=error,
            execution_count=builder.execution_count,
            files=(*saved, *(p for p in changed if p not in seen)),
            duration=duration,
            cell_index=recorded_index,
            state_lost=run.state_lost,
            truncated=builder.truncated,
            spilled=tuple(spilled),
            outputs=tuple(copy_output(o) for o in outputs),
            connections=connections,
            host=cell.host,
        )
        if failure is not None:
            failure._attach(execution)
            raise failure
        return execution

    def _note_host(self, host: str | None) -> None:
        """Every host the session's remote kernel ran on, in order, in the notebook metadata."""
        if host is None or self.recorder is None:
            return
        ours = dict(self.recorder.metadata.get("jupyter_exec") or {})
        hosts = [h for h in ours.get("hosts") or [] if isinstance(h, str)]
        if host not in hosts:
            ours["hosts"] = [*hosts, host]
            self.recorder.set_metadata("jupyter_exec", ours)

    def _note_image(self, image: dict[str, str] | None) -> None:
        if image is None or self.recorder is None:
            return
        ours = dict(self.recorder.metadata.get("jupyter_exec") or {})
        ours["environment"] = {**(ours.get("environment") or {}), "docker_image": image}
        self.recorder.set_metadata("jupyter_exec", ours)

    def _note_written(self, changed: list[Path]) -> None:
        """The work-dir files the cells created (absent when the session started), in the
        notebook metadata (``jupyter_exec.written``): a replay leaves them out of the copy of
        the inputs it runs in, so ``%%file`` says "Writing" again, as recorded."""
        if self.recorder is None:
            return
        root = self.tracker.root
        fresh = [
            p.relative_to(root).as_posix()
            for p in changed
            if str(p) not in self.tracker.initial and p.is_relative_to(root)
        ]
        ours = dict(self.recorder.metadata.get("jupyter_exec") or {})
        written = [w for w in ours.get("written") or [] if isinstance(w, str)]
        new = [w for w in fresh if w not in written]
        if new and len(written) < MAX_WRITTEN_NOTED:
            ours["written"] = [*written, *new][:MAX_WRITTEN_NOTED]
            self.recorder.set_metadata("jupyter_exec", ours)

    def _note_environment(self, run: CellRun, redactor: Redactor | None) -> None:
        """What the kernel's environment capture reported with this cell, into the metadata
        (saved with the cell; see :mod:`jupyter_exec.session.envrecord`)."""
        reported = envrecord.parse(run.user_expressions)
        if reported is None or self.recorder is None:
            return
        if redactor is not None:  # a policy's secrets stay out of the notebook, here too
            reported = redactor.value(reported)
        ours = dict(self.recorder.metadata.get("jupyter_exec") or {})
        ours["environment"] = envrecord.merge(ours.get("environment") or {}, reported)
        self.recorder.set_metadata("jupyter_exec", ours)

    def _cell(
        self,
        code: str,
        builder: CellOutputs,
        run: CellRun,
        duration: float,
        outputs: list[dict[str, Any]],
        connections: tuple[Connection, ...] = (),
        network_revived: bool = False,
        host: str | None = None,
        left_remote: list[dict[str, Any]] | None = None,
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
        if host is not None:
            ours["host"] = host
        if left_remote:
            ours["remote_files_left"] = left_remote[:MAX_RECORDED_CONNECTIONS]
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
        produced = tuple(p for p in self.tracker.changes() if p != path.absolute())
        connections = network.since(mark) if network is not None else ()
        output = result.output
        if network is not None:  # the process shares the kernel's proxy, and its secrets
            output = Redactor(network.policy.secret_values()).text(output)
        return dataclasses.replace(result, files=produced, connections=connections, output=output)

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
            self.tracker.ignore.add(notebook.absolute())
        self.tracker.skip_dirs.add(str(files_dir.absolute()))
        self.tracker.changes()  # what the other session wrote so far is not our doing

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()  # the spare file; the notebook stays


MAX_RECORDED_CONNECTIONS = 200
"""Network decisions kept in one cell's metadata (the latest); the Execution has them all."""
