"""AsyncSession: a kernel, a work dir and a notebook; code in, an Execution out.

The session holds the parts together and keeps executions in order; each part
lives in its own module::

    SessionOptions  every option, validated, with its help          [options.py]
    launch_kernel   the kernel for those options (local, interpreter,
                    Docker, remote, given, from an environment)       [launch.py]
    execute(code) ─► CellRunner: send it, collect IOPub into nbformat
                     outputs, enforce the deadline, notice death     [runner.py]
                  ─► Recording: output files, display updates across
                     cells, the notebook cell, files the code wrote  [recording.py]
                  ─► the caller's Execution, a copy of what was recorded [models.py]

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

from jupyter_exec.codeblocks import normalise_language
from jupyter_exec.exceptions import (
    BackendError,
    InvalidArgument,
    KernelNotAliveError,
    NotebookError,
    SessionClosedError,
    WorkDirError,
)
from jupyter_exec.kernel import KernelHandle, interrupt_kernel, restart_kernel
from jupyter_exec.launch import launch_kernel, resolve_environment
from jupyter_exec.models import Execution, ScriptResult
from jupyter_exec.naming import default_session_name, files_folder, notebook_name, safe_name
from jupyter_exec.options import (
    DEFAULT_INTERRUPT_GRACE,
    DEFAULT_MAX_OUTPUT_CHARS,
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_TIMEOUT,
    Backend,
    SessionOptions,
    options_from,
)
from jupyter_exec.outputs import CellOutputs
from jupyter_exec.recorder import NotebookRecorder, read_notebook
from jupyter_exec.recording import Recording
from jupyter_exec.runner import CellRunner, OutputCallback
from jupyter_exec.scripts import run_script, script_path

__all__ = [
    "DEFAULT_INTERRUPT_GRACE",
    "DEFAULT_STARTUP_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "AsyncSession",
    "Backend",
    "OutputCallback",
]

log = logging.getLogger("jupyter_exec")

CLOSE_WAIT = 10.0
"""Seconds ``close()`` waits for a running cell to record itself before stopping the kernel."""


class AsyncSession:
    """A stateful kernel session whose every execution is recorded as a notebook cell.

    Takes the fields of :class:`~jupyter_exec.options.SessionOptions` as
    keyword arguments (``work_dir``, ``kernel_name``, ``python``,
    ``notebook``, ``name``, ``timeout``, ``backend``, ``docker``, ``env``,
    ``environment``, ``url``, ``token``, ``kernel_manager``, ...; each one's
    help is there), or a ready ``options=`` object, which arguments that
    differ from their defaults override. Invalid options raise
    :class:`~jupyter_exec.InvalidArgument` here, before any kernel starts.
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
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        overwrite: bool = False,
        environment: Any = None,
        url: str | None = None,
        token: str | None = None,
        kernel_manager: Any = None,
        owns_kernel: bool = False,
        options: SessionOptions | None = None,
    ) -> None:
        self._options = options_from(
            options,
            work_dir=work_dir,
            kernel_name=kernel_name,
            python=python,
            notebook=notebook,
            name=name,
            timeout=timeout,
            backend=backend,
            docker=docker,
            env=env,
            interrupt_grace=interrupt_grace,
            startup_timeout=startup_timeout,
            max_output_chars=max_output_chars,
            overwrite=overwrite,
            environment=environment,
            url=url,
            token=token,
            kernel_manager=kernel_manager,
            owns_kernel=owns_kernel,
        )
        self._work_dir: Path | None = None
        self._name: str | None = None
        self._notebook_path: Path | None = None
        self._kernel: KernelHandle | None = None
        self._recording: Recording | None = None
        self._lock = asyncio.Lock()
        self._last_activity = time.monotonic()
        self._scripts_run = 0
        self._closed = False
        self._generation = 0  # bumped by every restart, so a waiting execute notices
        self._running: asyncio.Future[None] | None = None  # done when the running cell is recorded
        self._resume: tuple[int | None] | None = None  # (until,) when resuming a notebook
        self.resumed: list[Execution] = []
        """When resumed: the executions that rebuilt the kernel's state, in order."""

    # -- properties ----------------------------------------------------------------

    @property
    def options(self) -> SessionOptions:
        """The session's options (once started: with its environment resolved)."""
        return self._options

    @property
    def timeout(self) -> float | None:
        """Default seconds per execution (``None``: no limit)."""
        return self._options.timeout

    @property
    def backend(self) -> Backend:
        return self._options.backend

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
    def _recorder(self) -> NotebookRecorder | None:
        return self._recording.recorder if self._recording is not None else None

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
        if until is not None and until < 0:
            raise InvalidArgument(f"until must be >= 0, not {until}")
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
        """Create the work dir and notebook, and start the kernel. Idempotent.

        A start that fails leaves nothing behind: no kernel, and no work dir
        it created.
        """
        if self._closed:
            raise SessionClosedError("this session was closed; create a new one")
        if self._kernel is not None:
            return self
        made: list[Path] = []
        try:
            await self._start(made)
        except BaseException:
            await self._undo_start(made)
            raise
        log.info("session %s: kernel %s, work dir %s", self._name, self.kernel_id, self._work_dir)
        return self

    async def _start(self, made: list[Path]) -> None:
        self._work_dir = work_dir = self._prepare_work_dir(made)
        self._name = name = self._options.name or default_session_name(work_dir)
        self._notebook_path = self._prepare_notebook_path()
        # Read a notebook to resume before starting anything, so a bad one costs no kernel.
        recorded = (
            read_notebook(self._notebook_path) if self._resume and self._notebook_path else None
        )
        self._options = await resolve_environment(self._options)
        self._kernel = await launch_kernel(self._options, work_dir)
        self._recording = Recording(work_dir, files_folder(name), self._notebook_path)
        if recorded is not None and self._resume is not None:
            from jupyter_exec.resume import rebuild

            await rebuild(self, recorded, self._resume[0])
        elif self._notebook_path is not None:
            recorder = self.recorder_class(self._notebook_path, self.notebook_metadata_for_kernel())
            recorder.save()
            self._recording.recorder = recorder

    async def _undo_start(self, made: list[Path]) -> None:
        kernel, self._kernel = self._kernel, None
        if kernel is not None:
            with contextlib.suppress(Exception):
                await kernel.shutdown(kernel=self._owns_kernel)
        if self._recording is not None:
            self._recording.close()
            self._recording = None
        for path in reversed(made):  # only folders this start created
            if self._options.work_dir is None:  # a fresh temporary one: all of it is ours
                await asyncio.to_thread(shutil.rmtree, path, True)
            else:
                with contextlib.suppress(OSError):
                    path.rmdir()  # only if still empty

    @property
    def _owns_kernel(self) -> bool:
        return self._options.owns_kernel or self._options.kernel_manager is None

    def notebook_metadata_for_kernel(self) -> dict[str, Any]:
        """The notebook metadata for this session's kernel (kernelspec, language, ours)."""
        assert self._kernel is not None
        spec = self._kernel.spec
        options = self._options
        language_info = self.language_info or {"name": "python"}
        return {
            "kernelspec": {
                "name": options.kernel_name if options.python is None else "python3",
                "display_name": spec.display_name if spec else options.kernel_name,
                "language": (spec.language if spec else None) or language_info.get("name", ""),
            },
            "language_info": language_info,
            "jupyter_exec": {
                "session": self.name,
                "backend": options.backend,
                "created": datetime.now(timezone.utc).isoformat(),
            },
        }

    def record_cell(self, cell: dict[str, Any]) -> int | None:
        """Append a cell that was not executed (markdown, raw, or a code cell kept as is).

        Returns its index in the notebook, or ``None`` when recording is off.
        Used by replay to keep a notebook's layout; gives the cell an id if it has none.
        """
        return self._recording.record_cell(cell) if self._recording is not None else None

    @property
    def notebook_metadata(self) -> dict[str, Any]:
        """A copy of the session notebook's metadata (empty when recording is off)."""
        recorder = self._recorder
        return copy.deepcopy(recorder.metadata) if recorder is not None else {}

    def set_notebook_metadata(self, key: str, value: Any) -> None:
        """Set a top-level notebook metadata entry and save (no-op when recording is off)."""
        recorder = self._recorder
        if recorder is not None:
            recorder.set_metadata(key, value)
            recorder.save()

    def _prepare_work_dir(self, made: list[Path]) -> Path:
        given = self._options.work_dir
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

    def _prepare_notebook_path(self) -> Path | None:
        given = self._options.notebook
        if given is False:
            return None
        path = self.work_dir / notebook_name(self.name) if given is None else given
        path = path.expanduser().absolute()
        if path.suffix != ".ipynb":
            raise NotebookError(f"the notebook path {path} must end in .ipynb")
        if self._resume is not None:
            if not path.is_file():
                raise NotebookError(f"cannot resume: no notebook at {path}")
            return path
        if path.exists() and not self._options.overwrite:
            raise NotebookError(
                f"{path} already exists; pass overwrite=True to replace it, "
                "or choose another notebook path or session name"
            )
        if not path.parent.is_dir():
            raise NotebookError(f"the folder of the notebook {path} does not exist")
        return path

    async def close(self) -> None:
        """Stop the kernel. The work dir and notebook stay. Idempotent.

        A cell running meanwhile stops waiting, is recorded with its outputs
        so far, and its caller gets :class:`~jupyter_exec.SessionClosedError`
        carrying that Execution.
        """
        if self._closed:
            return
        self._closed = True
        running = self._running
        if running is not None and not running.done():
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(running), CLOSE_WAIT)
        kernel, self._kernel = self._kernel, None
        if self._recording is not None:
            self._recording.close()
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

    async def _restart_after_failure(self, note: str) -> None:
        """Restart the kernel; a waiting execution notices (generation), the next cell notes it."""
        kernel = self._live_kernel()
        self._generation += 1
        await restart_kernel(kernel, self._options.startup_timeout)
        assert self._recording is not None
        self._recording.restart_note = note

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
        assert self._recording is not None
        tracker = self._recording.tracker
        tracker.changes()  # what changed before this run is not the script's doing
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
        produced = tuple(p for p in tracker.changes() if p != path.resolve())
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
        this only raises for problems of the session itself: a write that
        failed (:class:`~jupyter_exec.StorageError`,
        :class:`~jupyter_exec.NotebookError`) or a ``close()`` meanwhile
        (:class:`~jupyter_exec.SessionClosedError`), each carrying the Execution.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        _check_encodable(code)
        self._live_kernel()
        async with self._lock:
            kernel = self._live_kernel()
            self._running = asyncio.get_running_loop().create_future()
            try:
                execution = await self._execute(
                    kernel, code, self.timeout if timeout is None else timeout, on_output
                )
            except asyncio.CancelledError:
                # The caller gave up: stop the cell too, so the next one does not wait behind it.
                with contextlib.suppress(Exception):
                    await asyncio.shield(interrupt_kernel(kernel))
                raise
            finally:
                self._running.set_result(None)
                self._running = None
                self._last_activity = time.monotonic()
        if execution.status == "cancelled":
            raise SessionClosedError(
                "the session was closed while this cell ran; the cell is recorded with its "
                "outputs so far (see .execution)",
                execution,
            )
        return execution

    async def _execute(
        self,
        kernel: KernelHandle,
        code: str,
        timeout: float | None,
        on_output: OutputCallback | None,
        *,
        record: bool = True,
    ) -> Execution:
        """Run one cell: the runner, then the recording (``record=False``: a resume, no writes)."""
        recording = self._recording
        assert recording is not None
        cell_index = recording.next_index()
        spill = recording.spill(cell_index) if record else None
        builder = CellOutputs(max_stream_chars=self._options.max_output_chars, spill=spill)
        runner = CellRunner(
            kernel,
            interrupt_grace=self._options.interrupt_grace,
            restart=self._restart_after_failure,
            generation=lambda: self._generation,
            closing=lambda: self._closed,
        )
        started = time.monotonic()
        try:
            cell_guard = (
                None if spill is None else await recording.guard(kernel, cell_index, builder)
            )
            metadata = cell_guard.metadata if cell_guard is not None else None
            run = await runner.run(code, builder, timeout, on_output, metadata)
            if spill is not None:
                recording.absorb(cell_guard, builder, spill)
        except BaseException:
            if spill is not None:
                spill.close()
            raise
        duration = time.monotonic() - started
        return recording.record(code, cell_index, builder, run, duration, spill, cell_guard)


def _check_encodable(code: str) -> None:
    """Refuse code the kernel could never receive (lone surrogates), before sending anything."""
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"the code has a lone surrogate (U+{ord(code[exc.start]):04X}) at position "
            f"{exc.start}, which is not valid Unicode text; remove it or encode the data "
            "another way (bytes, escapes)"
        ) from None
