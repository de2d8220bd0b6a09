"""AsyncSession: a kernel, a work dir and a notebook; code in, an Execution out.

One execution, end to end::

    execute(code) ─► kernel: execute_request (allow_stdin=False: input() fails fast)
                     IOPub messages ─► CellOutputs (nbformat outputs)     [outputs.py]
                     deadline passed ─► interrupt, grace period, else restart
                     silence + dead process ─► restart, report how it died
                  ─► rich outputs ─► files in the work dir               [store.py]
                  ─► the cell ─► session notebook, saved atomically      [recorder.py]
                  ─► Execution (results, streams, error, files)          [models.py]

Executions on one session are queued (an asyncio.Lock is FIFO), never
interleaved. Local kernels run with the rights of this process: they are for
trusted code. Use the Docker backend for anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
import os
import shutil
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from jupyter_client.kernelspec import KernelSpec

from jupyter_exec import guard
from jupyter_exec.codeblocks import normalise_language
from jupyter_exec.exceptions import (
    BackendError,
    KernelNotAliveError,
    KernelStartError,
    NotebookError,
    SessionClosedError,
    WorkDirError,
)
from jupyter_exec.kernel import (
    KernelHandle,
    attach_kernel,
    interrupt_kernel,
    kernel_spec_for_python,
    restart_kernel,
    start_kernel,
)
from jupyter_exec.models import CellError, Execution, Result, ScriptResult
from jupyter_exec.naming import (
    backup_notebook_name,
    default_session_name,
    files_folder,
    safe_name,
    validate_name,
)
from jupyter_exec.outputs import DEFAULT_MAX_STREAM_CHARS, CellOutputs, stream_text, strip_ansi
from jupyter_exec.recorder import NotebookRecorder, new_cell_id, read_notebook
from jupyter_exec.runner import CellRun, CellRunner, OutputCallback, is_interrupt
from jupyter_exec.scripts import run_script, script_path
from jupyter_exec.store import FileSpill, OutputStore, WorkDirTracker

__all__ = [
    "DEFAULT_INTERRUPT_GRACE",
    "DEFAULT_STARTUP_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "AsyncSession",
    "OutputCallback",
]

log = logging.getLogger("jupyter_exec")

DEFAULT_INTERRUPT_GRACE = 3.0
"""Seconds an interrupted cell gets to stop before the kernel is restarted."""
DEFAULT_STARTUP_TIMEOUT = 60.0
"""Seconds a kernel gets to start and answer."""
DEFAULT_TIMEOUT = 600.0
"""Seconds a cell may run by default before it is interrupted (``None`` = no limit)."""

Backend = Literal["local", "docker", "remote"]


class AsyncSession:
    """A stateful kernel session whose every execution is recorded as a notebook cell.

    Parameters
    ----------
    work_dir:
        The kernel's working directory, where output files and the notebook go.
        ``None`` makes a fresh temporary directory, which is kept (and logged).
    kernel_name:
        An installed kernelspec to run (ignored when ``python`` or ``backend``
        says otherwise).
    python:
        An interpreter, a virtual environment folder, or a command name to run
        the kernel with; it must have ipykernel.
    notebook:
        Where to record: ``None`` for ``<work_dir>/<name>.ipynb``, a path, or
        ``False`` for no recording.
    name:
        The session's name (default ``session-<date>-<time>``); it names the
        notebook and the ``<name>_files`` folder of saved outputs.
    timeout:
        Default seconds per execution (``None``: no limit). On timeout the
        kernel is interrupted; if that does not take within
        ``interrupt_grace`` seconds, it is restarted.
    backend:
        ``"local"`` (a subprocess of this process, for trusted code) or
        ``"docker"`` (a hardened, network-less container).
    docker:
        Options for the Docker backend (traits of ``DockerProvisioner``, e.g.
        ``{"network": True, "memory": "2g"}``).
    environment:
        Where code runs, said once for every front end: an
        ``jupyter_exec.environments.Environment`` or a string such as
        ``"venv"`` (a cached venv made on demand), ``"venv:/path"``,
        ``"python:/usr/bin/python3.12"``, ``"docker"``, ``"docker:my/image"``.
        It sets ``python`` / ``backend`` / ``docker`` when the session starts.
    url, token:
        For ``backend="remote"``: the Jupyter Server / Kernel Gateway /
        Enterprise Gateway to run the kernel on, and its token.
    kernel_manager:
        An already started ``AsyncKernelManager`` to use instead of starting a
        kernel (how the server extension uses the Jupyter server's kernels, and
        how a session manager hands out warm kernels from its pool).
    owns_kernel:
        With ``kernel_manager``: whether ``close()`` shuts that kernel down
        (default ``False``: its owner does).
    """

    recorder_class: type[NotebookRecorder] = NotebookRecorder
    """What records the notebook; the server extension's subclass merges with a person's edits."""

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        kernel_name: str = "python3",
        python: str | os.PathLike[str] | None = None,
        notebook: str | os.PathLike[str] | Literal[False] | None = None,
        name: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        *,
        backend: Backend = "local",
        docker: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        max_output_chars: int = DEFAULT_MAX_STREAM_CHARS,
        overwrite: bool = False,
        environment: Any = None,
        url: str | None = None,
        token: str | None = None,
        kernel_manager: Any = None,
        owns_kernel: bool = False,
    ) -> None:
        if name is not None:
            validate_name(name)
        if backend not in ("local", "docker", "remote"):
            raise ValueError(f"unknown backend {backend!r}: use 'local', 'docker' or 'remote'")
        if backend == "remote" and not url and kernel_manager is None:
            raise ValueError("backend='remote' needs url= (the Jupyter server or gateway)")
        self._work_dir_arg = work_dir
        self.kernel_name = kernel_name
        self.python = python
        self._notebook_arg = notebook
        self._name_arg = name
        self.timeout = timeout
        self.backend: Backend = backend
        self.docker_options = dict(docker or {})
        self.env = env
        self.interrupt_grace = interrupt_grace
        self.startup_timeout = startup_timeout
        self.max_output_chars = max_output_chars
        self.overwrite = overwrite
        self.environment = environment
        self.url = url
        self.token = token
        self._external_km = kernel_manager
        self._owns_kernel = owns_kernel or kernel_manager is None

        self._work_dir: Path | None = None
        self._name: str | None = None
        self._notebook_path: Path | None = None
        self._kernel: KernelHandle | None = None
        self._recorder: NotebookRecorder | None = None
        self._store: OutputStore | None = None
        self._tracker: WorkDirTracker | None = None
        self._lock = asyncio.Lock()
        self._cells_run = 0
        self._last_activity = time.monotonic()
        self._scripts_run = 0
        self._closed = False
        self._generation = 0  # bumped by every restart, so a waiting execute notices
        self._restart_note: str | None = None  # recorded on the next cell
        # display_id -> (cell index, output number in the cell, the output dict in the record)
        self._displays: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}
        self._resume: tuple[int | None] | None = None  # (until,) when resuming a notebook
        self.resumed: list[Execution] = []
        """When resumed: the executions that rebuilt the kernel's state, in order."""

    # -- properties ----------------------------------------------------------------

    @property
    def work_dir(self) -> Path:
        if self._work_dir is None:
            raise SessionClosedError("the session has not been started")
        return self._work_dir

    @property
    def name(self) -> str:
        if self._name is None:
            raise SessionClosedError("the session has not been started")
        return self._name

    @property
    def files_dir(self) -> Path:
        """``<work_dir>/<name>_files``: where rich outputs and overflowing streams are saved."""
        return self.work_dir / files_folder(self.name)

    @property
    def notebook_path(self) -> Path | None:
        """The recorded notebook, or ``None`` when recording is off."""
        return self._notebook_path

    @property
    def kernel_id(self) -> str | None:
        return self._kernel.kernel_id if self._kernel else None

    @property
    def language_info(self) -> dict[str, Any]:
        return dict(self._kernel.kernel_info.get("language_info", {})) if self._kernel else {}

    @property
    def is_alive(self) -> bool:
        """Whether the kernel process is running (a cheap check for local kernels)."""
        if self._kernel is None or self._closed:
            return False
        process = getattr(self._kernel.km.provisioner, "process", None)
        if process is not None:
            return process.poll() is None
        return bool(self._kernel.km.has_kernel)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    @property
    def busy(self) -> bool:
        """Whether an execution is running or queued on this session."""
        return self._lock.locked()

    @property
    def last_activity(self) -> float:
        """``time.monotonic()`` when the last execution ended (or the session started)."""
        return self._last_activity

    async def check_alive(self) -> bool:
        """Ask the backend whether the kernel is alive (accurate for every backend)."""
        return self._kernel is not None and not self._closed and await self._kernel.is_alive()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._kernel else "not started")
        where = f" work_dir={str(self._work_dir)!r}" if self._work_dir else ""
        return f"<{type(self).__name__} {self._name or '?'} {self.backend} {state}{where}>"

    # -- lifecycle -------------------------------------------------------------------

    @classmethod
    def resume(
        cls,
        notebook: str | os.PathLike[str],
        *,
        until: int | None = None,
        work_dir: str | os.PathLike[str] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> AsyncSession:
        """A session that continues a recorded notebook (started by ``async with`` / ``start()``).

        On start, the notebook's code cells (the first ``until`` of them, if
        given) are re-run silently to rebuild the kernel's state; their
        executions are in ``session.resumed``. New cells are then appended to
        the same notebook, numbering on. ``work_dir`` defaults to the
        notebook's folder and ``name`` to its stem, so output files continue in
        the same ``<name>_files`` folder. Other arguments are as for the constructor.
        """
        path = Path(notebook).expanduser().absolute()
        session = cls(
            path.parent if work_dir is None else work_dir,
            notebook=path,
            name=name or safe_name(path.stem),
            overwrite=True,
            **kwargs,
        )
        session._resume = (until,)
        return session

    async def start(self) -> AsyncSession:
        """Create the work dir and notebook, and start the kernel. Idempotent."""
        if self._closed:
            raise SessionClosedError("this session was closed; create a new one")
        if self._kernel is not None:
            return self
        self._work_dir = self._prepare_work_dir()
        self._name = self._name_arg or self._default_name()
        self._notebook_path = self._prepare_notebook_path()
        self._store = OutputStore(self._work_dir, files_folder(self._name))
        # Read a notebook to resume before starting anything, so a bad one costs no kernel.
        recorded = (
            read_notebook(self._notebook_path) if self._resume and self._notebook_path else None
        )
        if self.environment is not None:
            await self._apply_environment()
        if self._external_km is None and self.backend == "remote":
            from jupyter_exec.remote import start_remote_kernel

            self._external_km = await start_remote_kernel(
                self.url or "", self.token, self.kernel_name, self.startup_timeout, env=self.env
            )
        if self._external_km is not None:
            self._kernel = await attach_kernel(self._external_km, self.startup_timeout)
        else:
            self._kernel = await start_kernel(
                kernel_name=self.kernel_name,
                spec=await self._kernel_spec(),
                cwd=self._work_dir,
                env=self.env,
                startup_timeout=self.startup_timeout,
            )
        ignore = [self._notebook_path] if self._notebook_path else []
        self._tracker = WorkDirTracker(
            self._work_dir, ignore=ignore, skip_dirs=[self._work_dir / self._store.folder]
        )
        if recorded is not None and self._resume is not None:
            try:
                await self._rebuild_from_notebook(recorded, self._resume[0])
            except BaseException:
                await self.close()
                raise
        elif self._notebook_path is not None:
            self._recorder = self.recorder_class(self._notebook_path, self._notebook_metadata())
            self._recorder.save()
        log.info("session %s: kernel %s, work dir %s", self._name, self.kernel_id, self._work_dir)
        return self

    async def _apply_environment(self) -> None:
        """Prepare the environment (a venv may be built) and take its session options."""
        from jupyter_exec.environments import parse_environment

        try:
            env = parse_environment(self.environment)
        except ValueError as exc:
            raise KernelStartError(str(exc)) from None
        options = await env.async_session_options()
        self.python = options.get("python", self.python)
        self.backend = options.get("backend", self.backend)
        self.docker_options = {**options.get("docker", {}), **self.docker_options}

    async def _rebuild_from_notebook(self, nb: Any, until: int | None) -> None:
        """Re-run the recorded code cells, then adopt the notebook as this session's record.

        With ``until``, cells after the ``until``-th code cell no longer match
        the kernel's state: the full notebook is first copied to
        ``<stem>.before-resume-<time>.ipynb`` beside it, then the live record is
        cut after that cell, so it stays a faithful, replayable account.
        """
        assert self._notebook_path is not None
        assert self._kernel is not None
        cells = [dict(c) for c in nb.cells]
        for cell in cells:
            cell.setdefault("id", new_cell_id())  # nbformat < 4.5 had no cell ids
        positions = [
            i for i, c in enumerate(cells) if c["cell_type"] == "code" and c["source"].strip()
        ]
        entry: dict[str, Any] = {"at": datetime.now(timezone.utc).isoformat()}
        if until is not None:
            if until < 0:
                raise ValueError(f"until must be >= 0, not {until}")
            if until < len(positions):
                keep = positions[until - 1] + 1 if until else 0
                backup = self._notebook_path.with_name(
                    backup_notebook_name(self._notebook_path.stem)
                )
                shutil.copy2(self._notebook_path, backup)
                entry.update(dropped_cells=len(cells) - keep, backup=backup.name)
                cells = cells[:keep]
            positions = positions[:until]
        code_cells = [nb.cells[i] for i in positions]
        for cell in code_cells:
            self.resumed.append(
                await self._execute(self._kernel, cell.source, self.timeout, None, record=False)
            )
        failed = [i for i, e in enumerate(self.resumed, start=1) if not e.ok]
        metadata = dict(nb.metadata)
        metadata.update({k: v for k, v in self._notebook_metadata().items() if k != "jupyter_exec"})
        history = dict(metadata.get("jupyter_exec", {}))
        history.setdefault("session", self.name)
        entry.update(cells_rerun=len(code_cells), failed=failed)
        history["resumed"] = [*history.get("resumed", []), entry]
        metadata["jupyter_exec"] = history
        self._recorder = self.recorder_class(self._notebook_path, metadata, cells)
        self._recorder.save()
        self._restart_note = f"resumed: state rebuilt by re-running {len(code_cells)} cell(s)"
        if failed:
            log.warning("resume of %s: re-run cells %s failed", self._notebook_path, failed)

    def record_cell(self, cell: dict[str, Any]) -> int | None:
        """Append a cell that was not executed (markdown, raw, or a code cell kept as is).

        Returns its index in the notebook, or ``None`` when recording is off.
        Used by replay to keep a notebook's layout; gives the cell an id if it has none.
        """
        if self._recorder is None:
            return None
        cell = dict(cell)
        cell.setdefault("id", new_cell_id())
        cell.setdefault("metadata", {})
        return self._recorder.append(cell)

    @property
    def notebook_metadata(self) -> dict[str, Any]:
        """A copy of the session notebook's metadata (empty when recording is off)."""
        return copy.deepcopy(self._recorder.metadata) if self._recorder is not None else {}

    def set_notebook_metadata(self, key: str, value: Any) -> None:
        """Set a top-level notebook metadata entry and save (no-op when recording is off)."""
        if self._recorder is not None:
            self._recorder.set_metadata(key, value)
            self._recorder.save()

    def _prepare_work_dir(self) -> Path:
        if self._work_dir_arg is None:
            path = Path(tempfile.mkdtemp(prefix="jupyter-exec-"))
            log.warning("jupyter-exec: work dir %s (temporary, kept after the session)", path)
            return path
        path = Path(self._work_dir_arg).expanduser().absolute()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkDirError(f"cannot create the work dir {path}: {exc.strerror}") from exc
        if not path.is_dir():
            raise WorkDirError(f"the work dir {path} is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise WorkDirError(f"the work dir {path} is not writable by this user")
        return path

    def _default_name(self) -> str:
        return default_session_name(self.work_dir)

    def _prepare_notebook_path(self) -> Path | None:
        if self._notebook_arg is False:
            return None
        if self._notebook_arg is None:
            path = self.work_dir / f"{self.name}.ipynb"
        else:
            path = Path(self._notebook_arg).expanduser().absolute()
        if path.suffix != ".ipynb":
            raise NotebookError(f"the notebook path {path} must end in .ipynb")
        if self._resume is not None:
            if not path.is_file():
                raise NotebookError(f"cannot resume: no notebook at {path}")
            return path
        if path.exists() and not self.overwrite:
            raise NotebookError(
                f"{path} already exists; pass overwrite=True to replace it, "
                "or choose another notebook path or session name"
            )
        if not path.parent.is_dir():
            raise NotebookError(f"the folder of the notebook {path} does not exist")
        return path

    async def _kernel_spec(self) -> KernelSpec | None:
        if self.backend == "docker":
            from jupyter_exec.backends import docker_kernel_spec

            return docker_kernel_spec(self.docker_options)
        if self.python is not None:
            # Probes the interpreter (a subprocess): not on the event loop.
            return await asyncio.to_thread(kernel_spec_for_python, self.python)
        return None

    def _notebook_metadata(self) -> dict[str, Any]:
        assert self._kernel is not None
        spec = self._kernel.spec
        language_info = self.language_info or {"name": "python"}
        return {
            "kernelspec": {
                "name": self.kernel_name if self.python is None else "python3",
                "display_name": spec.display_name if spec else self.kernel_name,
                "language": (spec.language if spec else None) or language_info.get("name", ""),
            },
            "language_info": language_info,
            "jupyter_exec": {
                "session": self.name,
                "backend": self.backend,
                "created": datetime.now(timezone.utc).isoformat(),
            },
        }

    async def close(self) -> None:
        """Stop the kernel. The work dir and notebook stay. Idempotent."""
        if self._closed:
            return
        self._closed = True
        kernel, self._kernel = self._kernel, None
        if self._recorder is not None:
            self._recorder.close()  # the spare file; the notebook stays
        if kernel is not None:
            await kernel.shutdown(kernel=self._owns_kernel)
        log.info("session %s closed; notebook %s", self._name, self._notebook_path)

    async def __aenter__(self) -> AsyncSession:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _live_kernel(self) -> KernelHandle:
        if self._closed:
            raise SessionClosedError("the session is closed")
        if self._kernel is None:
            raise KernelNotAliveError(
                "the session has not been started (use `async with` or start())"
            )
        return self._kernel

    async def interrupt(self) -> None:
        """Interrupt the running cell (KeyboardInterrupt in the kernel); state is kept."""
        await interrupt_kernel(self._live_kernel())

    async def restart(self) -> None:
        """Restart the kernel: all state is lost; the notebook notes it on the next cell."""
        await self._restart_after_failure("restarted by request")

    async def run_script(
        self,
        code: str,
        language: str = "python",
        filename: str | None = None,
        timeout: float | None = None,
    ) -> ScriptResult:
        """Write ``code`` to a file in the work dir and run it as a new process.

        Stateless, like a command-line executor: the process runs in the
        session's environment (the kernel's interpreter and environment on the
        host, or the session's own container) with the work dir as cwd, and
        shares nothing with the kernel. ``language`` is ``"python"`` or
        ``"sh"`` (``"bash"``, ``"py"``... are accepted); ``filename`` (relative,
        confined to the work dir) defaults to ``<name>_files/script-NNN.<ext>``.
        A run past ``timeout`` is killed and exits 124.
        """
        kernel = self._live_kernel()
        if self.backend == "remote":
            raise BackendError(
                "run_script needs the kernel's own machine; with a remote kernel, "
                "run shell code in a cell instead (%%bash)"
            )
        language = normalise_language(language)
        self._scripts_run += 1
        path = script_path(
            self.work_dir, files_folder(self.name), self._scripts_run, language, filename
        )
        spec = kernel.spec
        assert self._tracker is not None
        self._tracker.changes()  # what changed before this run is not the script's doing
        result = await run_script(
            path,
            code,
            language,
            work_dir=self.work_dir,
            kernel_argv=list(spec.argv) if spec else [],
            kernel_env=dict(spec.env or {}) if spec else {},
            provisioner=kernel.km.provisioner,
            timeout=self.timeout if timeout is None else timeout,
        )
        produced = tuple(p for p in self._tracker.changes() if p != path.resolve())
        return dataclasses.replace(result, files=produced)

    # -- execution -------------------------------------------------------------------

    async def execute(
        self,
        code: str,
        timeout: float | None = None,
        on_output: OutputCallback | None = None,
    ) -> Execution:
        """Run ``code`` in the kernel and return what it did.

        ``timeout`` overrides the session default for this call. Errors in the
        code are returned as ``execution.error``; a timeout or a dead kernel
        also end in an ``Execution`` (``status`` ``"timeout"`` / ``"died"``), so
        this only raises for problems of the session itself.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        self._live_kernel()
        async with self._lock:
            kernel = self._live_kernel()
            try:
                return await self._execute(
                    kernel, code, self.timeout if timeout is None else timeout, on_output
                )
            except asyncio.CancelledError:
                # The caller gave up: stop the cell too, so the next one does not wait behind it.
                with contextlib.suppress(Exception):
                    await asyncio.shield(interrupt_kernel(kernel))
                raise
            finally:
                self._last_activity = time.monotonic()

    async def _execute(
        self,
        kernel: KernelHandle,
        code: str,
        timeout: float | None,
        on_output: OutputCallback | None,
        *,
        record: bool = True,
    ) -> Execution:
        """Run one cell; ``record=False`` (resume) saves no files and no notebook cell."""
        assert self._store is not None
        cell_index = len(self._recorder) if self._recorder is not None else self._cells_run
        self._cells_run += 1
        spill = FileSpill(self._store, cell_index) if record else None
        builder = CellOutputs(max_stream_chars=self.max_output_chars, spill=spill)
        runner = CellRunner(
            kernel,
            interrupt_grace=self.interrupt_grace,
            restart=self._restart_after_failure,
            generation=lambda: self._generation,
        )
        started = time.monotonic()
        cell_guard = (
            await guard.prepare(
                kernel, self._store.work_dir, self._store.folder, cell_index, builder.head_limit
            )
            if spill is not None
            else None
        )
        try:
            metadata = cell_guard.metadata if cell_guard is not None else None
            run = await runner.run(code, builder, timeout, on_output, metadata)
            if cell_guard is not None and spill is not None:
                cell_guard.absorb(builder, spill)
        finally:
            if spill is not None:
                spill.close()
        spilled = list(spill.paths.values()) if spill is not None else []
        duration = time.monotonic() - started
        return self._finish(code, cell_index, builder, run, duration, record, spilled, cell_guard)

    async def _restart_after_failure(self, note: str) -> None:
        """Restart the kernel; a waiting execution notices (generation), the next cell notes it."""
        kernel = self._live_kernel()
        self._generation += 1
        await restart_kernel(kernel, self.startup_timeout)
        self._restart_note = note

    # -- recording ---------------------------------------------------------------------

    def _finish(
        self,
        code: str,
        cell_index: int,
        builder: CellOutputs,
        run: CellRun,
        duration: float,
        record: bool,
        spilled: list[Path],
        cell_guard: guard.CellGuard | None = None,
    ) -> Execution:
        """Turn a finished run into files, a notebook cell and the caller's Execution."""
        assert self._store is not None
        assert self._tracker is not None
        status, error, state_lost, timing = run.status, run.error, run.state_lost, run.timing
        outputs = builder.finish()
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
        elif status == "error":
            error = _error_from(outputs)

        results: list[Result] = []
        saved: list[Path] = list(spilled)  # full text of truncated streams
        numbers: dict[int, int] = {}  # id(output) -> its number among the cell's rich outputs
        for number, output in enumerate(
            (o for o in outputs if o["output_type"] in ("display_data", "execute_result")), start=1
        ):
            numbers[id(output)] = number
            by_mime = (
                self._store.save_bundle(cell_index, number, output.get("data", {}))
                if record
                else {}
            )
            if cell_guard is not None:  # too large to send: the kernel saved these itself
                by_mime.update(cell_guard.saved_files(output))
            saved.extend(by_mime.values())
            results.append(
                Result(
                    data=output.get("data", {}),
                    metadata=output.get("metadata", {}),
                    is_main_result=output["output_type"] == "execute_result",
                    files=by_mime,
                )
            )
        touched: set[int] = set()
        if record:
            for display_id, shown in builder.displays.items():
                self._displays.setdefault(display_id, []).extend(
                    (cell_index, numbers[id(o)], o) for o in shown if id(o) in numbers
                )
            touched = self._apply_foreign_updates(builder.foreign_updates)

        ours: dict[str, Any] = {"status": status, "duration": round(duration, 6)}
        if self._restart_note is not None and record and status != "died" and not state_lost:
            ours["kernel"] = self._restart_note
            self._restart_note = None
        if state_lost:
            ours["state_lost"] = True
        cell = {
            "cell_type": "code",
            "id": new_cell_id(),
            "execution_count": builder.execution_count,
            "metadata": {"execution": timing, "jupyter_exec": ours},
            "outputs": outputs,
            "source": code,
        }
        recorded_index: int | None = None
        save_error: NotebookError | None = None
        if self._recorder is not None and record:
            for index in touched:
                self._recorder.refresh(index, save=False)
            try:
                recorded_index = self._recorder.append(cell)
            except NotebookError as exc:
                recorded_index = len(self._recorder) - 1
                save_error = exc

        changed = self._tracker.changes()
        seen = set(saved)
        files = tuple(saved) + tuple(p for p in changed if p not in seen)
        execution = Execution(
            code=code,
            status=status,
            results=tuple(results),
            stdout=stream_text(outputs, "stdout"),
            stderr=stream_text(outputs, "stderr"),
            error=error,
            execution_count=builder.execution_count,
            files=files,
            duration=duration,
            cell_index=recorded_index,
            state_lost=state_lost,
            truncated=builder.truncated,
            spilled=tuple(spilled),
            outputs=tuple(outputs),
        )
        if save_error is not None:
            save_error.execution = execution
            raise save_error
        return execution

    def _apply_foreign_updates(self, updates: list[dict[str, Any]]) -> set[int]:
        """Apply ``update_display_data`` aimed at earlier cells, to notebook and files."""
        assert self._store is not None
        touched: set[int] = set()
        for update in updates:
            for cell_index, number, output in self._displays.get(update["display_id"], ()):
                output["data"] = update["data"]
                output["metadata"] = update["metadata"]
                touched.add(cell_index)
                if self._recorder is not None:  # only the updated output's files change
                    self._store.save_bundle(cell_index, number, update["data"])
        return touched


def _error_from(outputs: list[dict[str, Any]]) -> CellError | None:
    for output in reversed(outputs):
        if output.get("output_type") == "error":
            return CellError(
                ename=str(output.get("ename", "")),
                evalue=str(output.get("evalue", "")),
                traceback=strip_ansi("\n".join(output.get("traceback", []))),
            )
    return None
