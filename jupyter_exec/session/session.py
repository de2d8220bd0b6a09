"""AsyncSession: a kernel, a work dir and a notebook; code in, an Execution out.

The session holds the parts together and keeps executions in order; each part
lives in its own module::

    SessionOptions  every option, validated, with its help          [options.py]
    launch_kernel   the kernel for those options (local, interpreter,
                    Docker, remote, given, from an environment)       [launch.py]
    the kernel      its handle, execution lock and generation: one owner  [core.py]
                    its views; restart, replace, adopt, a lost kernel [kernel_methods.py]
    execute(code) ─► the in-kernel helpers, once per kernel process: one request [installs.py]
                  ─► CellRunner: send it, collect IOPub into nbformat
                     outputs, enforce the deadline, notice death     [runner.py]
                  ─► Recording: output files, display updates across
                     cells, the notebook cell, files the code wrote  [recording.py]
                  ─► the caller's Execution, a copy of what was recorded [models.py]
                  around them, the session's declared hooks          [hooks.py]
    fork / undo / checkpoint / restore: copy-on-write forks and
                    snapshots of the kernel, and the state's hooks     [state/]
    sleep / wake    the state saved and the kernel stopped; the next call
                    starts one and loads that state                  [sleep.py]

Executions on one session are queued (an asyncio.Lock is FIFO), never
interleaved. Local kernels run with the rights of this process: they are for
trusted code. Use the Docker backend for anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from jupyter_exec.boundary import claims
from jupyter_exec.boundary.folders import FolderClaim, trust_of
from jupyter_exec.boundary.folders import claim as claim_folder
from jupyter_exec.boundary.naming import check_encodable, files_folder
from jupyter_exec.engine import remote_files
from jupyter_exec.engine.core import KernelSlot
from jupyter_exec.engine.hooks import CellCall, Hooks, KernelEvent
from jupyter_exec.engine.idle import IdleSigner
from jupyter_exec.engine.inflight import Cell
from jupyter_exec.engine.installs import Installs
from jupyter_exec.engine.kernel import KernelHandle, interrupt_kernel
from jupyter_exec.engine.languages import normalise_language
from jupyter_exec.engine.meta import notebook_metadata
from jupyter_exec.engine.recorder import NotebookRecorder, read_notebook
from jupyter_exec.engine.runner import CellRun, CellRunner, OutputCallback
from jupyter_exec.engine.workdir import prepare_paths, remove_made
from jupyter_exec.exceptions import (
    BackendError,
    InvalidArgument,
    KernelNotAliveError,
    SessionClosedError,
)
from jupyter_exec.models import Execution, ScriptResult
from jupyter_exec.options import (
    DEFAULT_CHECKPOINT_EVERY,
    DEFAULT_INTERRUPT_GRACE,
    DEFAULT_MAX_OUTPUT_CHARS,
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_STATE_BUDGET_MB,
    DEFAULT_TIMEOUT,
    DEFAULT_UNDO_STEPS,
    Backend,
    SessionOptions,
    options_from,
)
from jupyter_exec.session.kernel_methods import KernelMethods
from jupyter_exec.session.launch import launch_kernel, resolve_environment
from jupyter_exec.session.readthrough import ReadThrough
from jupyter_exec.session.recording import Recording
from jupyter_exec.session.sleep import WakeNote, put_to_sleep, refuse_sleep, wake_up
from jupyter_exec.state.api import StateMethods
from jupyter_exec.state.cellhooks import StateHooks
from jupyter_exec.state.session_state import SessionState

__all__ = ["AsyncSession", "Backend", "OutputCallback"]

log = logging.getLogger("jupyter_exec")

S = TypeVar("S", bound="AsyncSession")

CLOSE_WAIT = 10.0
"""Seconds ``close()`` waits for a running cell to record itself before stopping the kernel."""


class AsyncSession(KernelMethods, StateMethods):
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
    _state: SessionState  # the state API works on it through its protocol (StateOperations)

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        kernel_name: str = "python3",
        python: str | os.PathLike[str] | None = None,
        notebook: str | os.PathLike[str] | Literal[False] | None = None,
        name: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        *,
        language: str | None = None,
        backend: Backend = "local",
        docker: dict[str, Any] | None = None,
        network: Any = None,
        env: dict[str, str] | None = None,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        undo_steps: int = DEFAULT_UNDO_STEPS,
        checkpoint_every: float | None = DEFAULT_CHECKPOINT_EVERY,
        save_state: bool | None = None,
        state_budget_mb: int = DEFAULT_STATE_BUDGET_MB,
        overwrite: bool = False,
        environment: Any = None,
        url: str | None = None,
        token: str | None = None,
        host: str | None = None,
        kernel_manager: Any = None,
        owns_kernel: bool = False,
        options: SessionOptions | None = None,
    ) -> None:
        given = dict(locals())  # exactly the parameters above: the SessionOptions fields
        del given["self"], given["options"]
        if save_state is None:  # the default: state kept where the kernel can keep it
            del given["save_state"]
        self._options = options_from(options, **given)
        self._state_asked = save_state is True
        """``save_state=True`` was asked for: a kernel that cannot keep state is refused."""
        self._work_dir: Path | None = None
        self._name: str | None = None
        self._notebook_path: Path | None = None
        self._slot = KernelSlot()  # the kernel, the execution lock, the generation
        self._recording: Recording | None = None
        self._folder: FolderClaim | None = None
        self._notebook_note: claims.Recording | None = None  # no replay records over it
        self._last_activity = time.monotonic()
        self._closed = False
        # While a cell runs: a future done once it is recorded, and the task running it.
        self._running: tuple[asyncio.Future[None], asyncio.Task[Any] | None] | None = None
        self._resume: tuple[int | None] | None = None  # (until,) when resuming a notebook
        self._state = SessionState(self._options.undo_steps, self._options.checkpoint_every)
        self._idle = IdleSigner(  # the last cell's state signed while no cell runs
            self._slot,
            self._state.unsigned_generation,
            lambda kernel: self._state.sign_written(self, kernel),
            lambda: self._closed,
        )
        self.hooks = Hooks()
        """The session's per-cell hooks (:mod:`jupyter_exec.engine.hooks`); its state first."""
        self.hooks.add(StateHooks(self._state, self))
        self._sleeping = False
        self._slept: dict[str, str] = {}
        self._wake_note: WakeNote | None = None  # added on the first sleep
        self._waking: asyncio.Future[None] | None = None  # done once a wake under way ends
        self.resumed: list[Execution] = []
        """When resumed: the executions that rebuilt the kernel's state, in order."""
        self.resumed_cells: list[int] = []
        """When resumed: the notebook's code-cell number (from 1) of each of ``resumed``; the
        cells before the first were brought back from the saved state, not re-run."""

    @property
    def options(self) -> SessionOptions:
        """The session's options (once started: with its environment resolved)."""
        return self._options

    timeout = ReadThrough[float | None](
        "_options.timeout", "Default seconds per execution (``None``: no limit)."
    )
    backend = ReadThrough[Backend]("_options.backend")

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

    def share_work_dir(self, other: AsyncSession) -> None:
        """Leave ``other``'s notebook and saved outputs out of the files this session's cells
        are said to have written: the two sessions share the work dir (an agent's kernels of
        other languages beside its Python one)."""
        recording = self._recording
        if recording is None:
            return
        if other.notebook_path is not None:
            recording.tracker.ignore.add(other.notebook_path.absolute())
        recording.tracker.skip_dirs.add(str(other.files_dir.absolute()))

    @property
    def notebook_path(self) -> Path | None:
        """The recorded notebook, or ``None`` when recording is off."""
        return self._notebook_path

    @property
    def _recorder(self) -> NotebookRecorder | None:
        return self._recording.recorder if self._recording is not None else None

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    @property
    def sleeping(self) -> bool:
        """Whether the session is asleep (:meth:`sleep`): open, with no kernel until its next
        call wakes it."""
        return self._sleeping and not self._closed

    @property
    def busy(self) -> bool:
        """Whether an execution is running or queued on this session (the idle session's
        short ask for its saved state does not count)."""
        return self._running is not None or (self._slot.is_locked() and not self._idle.signing)

    @property
    def last_activity(self) -> float:
        """``time.monotonic()`` when the last execution ended (or the session started)."""
        return self._last_activity

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._kernel else "not started")
        state = "sleeping" if self.sleeping else state
        where = f" work_dir={str(self._work_dir)!r}" if self._work_dir else ""
        return f"<{type(self).__name__} {self._name or '?'} {self.backend} {state}{where}>"

    @classmethod
    def resume(
        cls: type[S],
        notebook: str | os.PathLike[str],
        *,
        until: int | None = None,
        work_dir: str | os.PathLike[str] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> S:
        """A session that continues a recorded notebook (started by ``async with`` / ``start()``).

        On start, the notebook's code cells (the first ``until`` of them, if
        given) are re-run silently to rebuild the kernel's state; their
        executions are in ``session.resumed``. New cells are then appended to
        the same notebook, numbering on. ``work_dir`` defaults to the
        notebook's folder and ``name`` to its stem, so output files continue in
        the same ``<name>_files`` folder. Other arguments are as for the constructor.
        """
        from jupyter_exec.session.resume import for_notebook

        session = for_notebook(cls, notebook, until, work_dir, name, kwargs)
        session._resume = (until,)
        return session

    async def start(self) -> AsyncSession:
        """Make the work dir and notebook and start the kernel (idempotent; undone if it fails)."""
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
        work_dir, name, self._notebook_path = prepare_paths(
            self._options, made, resume=self._resume is not None
        )
        self._work_dir, self._name = work_dir, name
        # Read a notebook to resume before starting anything, so a bad one costs no kernel.
        recorded = (
            read_notebook(self._notebook_path) if self._resume and self._notebook_path else None
        )
        self._options = await resolve_environment(self._options)
        # Before any kernel: a folder never crosses a trust line (boundary.folders).
        self._folder = claim_folder(
            work_dir, trust_of(self.backend), f"session {name!r} ({self.backend})"
        )
        if self._notebook_path is not None:
            self._notebook_note = claims.recording(self._notebook_path, f"session {name!r}")
        kernel = await launch_kernel(self._options, work_dir)
        self._slot.place(kernel)
        if self._options.host is not None:  # the gateway placed it where it was asked?
            await remote_files.check_host(kernel, self._options.host)
        if kernel.network is not None:  # what a network policy's ask is told
            kernel.network.session = name
        self._recording = Recording(work_dir, files_folder(name), self._notebook_path)
        if self._state_asked and self.backend == "remote":
            await self._require_state(kernel)
        if recorded is not None and self._resume is not None:
            from jupyter_exec.session.resume import rebuild

            await rebuild(self, recorded, self._resume[0])
        elif self._notebook_path is not None:
            metadata = notebook_metadata(kernel, self._options, name)
            self._recording.adopt(self.recorder_class(self._notebook_path, metadata))

    async def _require_state(self, kernel: KernelHandle) -> None:
        """``save_state=True`` for a remote kernel: its per-cell state is set up now, and a
        kernel that cannot keep it (not IPython, a folder it cannot write...) is refused
        here, naming why, instead of each later cell running without it. The default
        (``save_state`` not given) sets it up at the first cell, where the kernel can."""
        if not kernel.runs_ipython:
            why = (
                f"it runs {kernel.language or 'another language'!r}, and only an IPython "
                "kernel's namespace is saved"
            )
        elif await self._state.setup_generations(self, kernel):
            return
        else:
            durable = self._state.durable
            why = durable.generations.unavailable or durable.unavailable or "see the log"
        raise InvalidArgument(
            f"save_state=True, but the remote kernel {self._options.kernel_name!r} cannot keep its "
            f"state: {why}; leave save_state out (state is then kept where the kernel can "
            "keep it) or set save_state=False"
        )

    async def _undo_start(self, made: list[Path]) -> None:
        kernel = self._slot.place(None)
        if kernel is not None:
            with contextlib.suppress(Exception):
                await kernel.shutdown(kernel=self._options.shuts_down_kernel)
        if self._recording is not None:
            self._recording.close()
            self._recording = None
        await asyncio.to_thread(remove_made, made, temporary=self._options.work_dir is None)
        self._release_folder()

    def _release_folder(self) -> None:
        folder, self._folder = self._folder, None
        if folder is not None:
            folder.release()
        note, self._notebook_note = self._notebook_note, None
        if note is not None:
            note.release()

    def record_cell(self, cell: dict[str, Any]) -> int | None:
        """Append a cell that was not executed (replay keeps a notebook's layout with it).

        Returns its index in the notebook (``None`` when recording is off).
        """
        return self._recording.record_cell(cell) if self._recording is not None else None

    @property
    def notebook_metadata(self) -> dict[str, Any]:
        """A copy of the session notebook's metadata (empty when recording is off)."""
        return self._recording.metadata() if self._recording is not None else {}

    def set_notebook_metadata(self, key: str, value: Any) -> None:
        """Set a top-level notebook metadata entry and save (no-op when recording is off)."""
        if self._recording is not None:
            self._recording.set_metadata(key, value)

    async def close(self, *, now: bool = False) -> None:
        """Stop the kernel. The work dir and notebook stay. Idempotent.

        ``now``: kill the kernel's process at once instead of asking it to shut
        down (which a Python kernel takes about a second to do, busy or not):
        what ending a sandbox needs, since nothing more is asked of its kernel.

        A cell running meanwhile stops waiting, is recorded with its outputs
        so far, and its caller gets :class:`~jupyter_exec.SessionClosedError`
        carrying that Execution.
        """
        if self._closed:
            return
        self._closed = True
        # A cell cut short by this close leaves its kernel busy: nothing new to sign, and a
        # flush would only wait for that cell (it was CLOSE_FLUSH seconds per close).
        cut_short = self._running is not None
        if self._running is not None and self._running[1] is not asyncio.current_task():
            with contextlib.suppress(Exception, asyncio.TimeoutError):  # (not from on_output)
                await asyncio.wait_for(asyncio.shield(self._running[0]), CLOSE_WAIT)
        await self._idle.finish(CLOSE_WAIT, cell_running=self._running is not None)
        if self._waking is not None:  # a wake under way ends first (its kernel is closed below)
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._waking), CLOSE_WAIT)
        last = self._slot.kernel
        if last is not None and not cut_short:  # the last cell's state
            dead = self._slot.known_dead(last)
            await self.hooks.before_close(KernelEvent(last, "the session closes", dead))
        kernel = self._slot.place(None)
        if self._recording is not None:
            self._recording.close()
        try:
            if kernel is not None:
                await kernel.shutdown(now=now, kernel=self._options.shuts_down_kernel)
        finally:
            try:
                await self.hooks.after_close(self._options.shuts_down_kernel)
            finally:
                self._release_folder()
        log.info("session %s closed; notebook %s", self._name, self._notebook_path)

    async def __aenter__(self) -> AsyncSession:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def sleep(self) -> dict[str, str]:
        """Save the state, stop the kernel and stay open, asleep, until the next call.

        Waits for a running cell. The last cell's state is flushed and signed
        (:doc:`/howto/state`), the session's snapshots and forks are ended and
        its kernel is stopped: a local kernel's process, a Docker session's
        container. The next call that needs a kernel (:meth:`execute`,
        :meth:`run_script`, :meth:`restart`, :meth:`fork`...) or :meth:`wake`
        starts one on the same options and loads the saved state; :meth:`close`
        needs none. Returns the names the saved state does not hold, each with
        why (an open file, a lock, a lambda...): they will not be there on wake.
        Undo points do not survive a sleep (checkpoints on disk do). Raises
        :class:`~jupyter_exec.CheckpointError` for a session whose state cannot
        come back (not Python, remote, ``save_state=False``, a kernel it was
        given); it then keeps running. Asleep already: the same names again.
        """
        self._usable()
        await self._idle.finish(CLOSE_WAIT, cell_running=self._running is not None)
        async with self._slot.locked():
            if self._sleeping:
                return dict(self._slept)
            kernel = self._live_kernel()
            refuse_sleep(self, kernel)
            if self._wake_note is None:
                self._wake_note = WakeNote()
                self.hooks.add(self._wake_note)
            record = await put_to_sleep(self, kernel)
            self._slept = record.unsaved
            self._sleeping = True
            return dict(record.unsaved)

    async def wake(self) -> None:
        """Start the sleeping session's kernel now and load its saved state (the next call
        would); nothing for a session awake. What did not come back is on the next
        Execution (``recovered``)."""
        self._usable()
        if not self._sleeping:
            return
        async with self._slot.locked():
            await self._awake()

    def _usable(self) -> None:
        """Raise unless the session is open and started (a sleeping one is)."""
        if self._closed:
            raise SessionClosedError("the session is closed")
        if not self._sleeping:
            self._live_kernel()

    async def _awake(self) -> None:
        """Wake the session if it sleeps (the caller holds the lock)."""
        if not self._sleeping or self._closed:
            return
        assert self._wake_note is not None
        self._waking = asyncio.get_running_loop().create_future()
        try:
            self._wake_note.pending = await wake_up(self)
            self._sleeping = False
        finally:
            self._waking.set_result(None)
            self._waking = None
        self._last_activity = time.monotonic()

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
        if self.backend == "remote":
            raise BackendError("run_script needs the kernel's own machine; use %%bash in a cell")
        assert self._recording is not None
        timeout = self.timeout if timeout is None else timeout
        await self.wake()
        return await self._recording.run_script(
            self._live_kernel(), code, normalise_language(language), filename, timeout
        )

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
        check_encodable(code, "the code")
        self._usable()
        async with self._slot.locked():
            await self._awake()
            kernel = self._live_kernel()
            self._running = (asyncio.get_running_loop().create_future(), asyncio.current_task())
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
                self._running[0].set_result(None)
                self._running = None
                self._last_activity = time.monotonic()
        self._idle.after_cell(kernel)
        if execution.status == "cancelled":
            if self._recording is not None:  # closed from within the cell (on_output): tidy up
                self._recording.close()
            raise SessionClosedError(
                "the session was closed while this cell ran; the cell is recorded with its "
                "outputs so far (see .execution)",
                execution,
            )
        return execution

    async def replay_cell(self, code: str) -> Execution:
        """Run ``code`` recording nothing (no files, no notebook cell): a resume re-running
        a notebook's cells to rebuild the kernel's state. In turn with other cells."""
        async with self._slot.locked():
            await self._awake()
            return await self._execute(self._live_kernel(), code, self.timeout, None, record=False)

    async def _execute(
        self,
        kernel: KernelHandle,
        code: str,
        timeout: float | None,
        on_output: OutputCallback | None,
        *,
        record: bool = True,
    ) -> Execution:
        """Run one cell: the hooks before it, the runner, the recording, the hooks after it
        (``record=False``: a resume's cell, written nowhere)."""
        recording = self._recording
        assert recording is not None
        call = CellCall(code, kernel, recording.next_index(), record, self._slot, on_output)
        execution: Execution | None = None
        try:
            if record and not kernel.installs_sent:
                await self._install_helpers(kernel, recording)
            await self.hooks.before_cell(call)
            cell = await recording.begin(
                kernel, write=record, max_chars=self._options.max_output_chars
            )
            call.index = cell.index
            run = await self._run(call, cell, timeout)
            await self.hooks.after_reply(call, run)
            execution = recording.record(code, cell, run, time.monotonic() - call.started)
        finally:
            execution = await self.hooks.after_record(call, execution)
        assert execution is not None  # (the hooks return None only for a cell that raised)
        if call.problem is not None:  # a remote file that could not be written here
            call.problem._attach(execution)
            raise call.problem
        return execution

    async def _install_helpers(self, kernel: KernelHandle, recording: Recording) -> None:
        """Before a kernel process's first recorded cell: every in-kernel helper its hooks
        and its recording would install one by one, in one silent request (a round trip and
        a pass over each module's source apiece was most of a first cell's time)."""
        kernel.installs_sent = True
        installs = Installs(kernel, self._work_dir)
        await self.hooks.kernel_installs(installs)
        recording.plan_installs(installs)
        with contextlib.suppress(KernelNotAliveError):  # the cell finds it dead, and says so
            await installs.send()

    async def _run(self, call: CellCall, cell: Cell, timeout: float | None) -> CellRun:
        """The runner on the cell; then a remote kernel's files brought home."""
        recording = self._recording
        assert recording is not None
        runner = CellRunner(
            call.kernel,
            interrupt_grace=self._options.interrupt_grace,
            restart=self._restart_in_cell,
            generation=lambda: self._slot.generation,
            closing=lambda: self._closed,
        )
        call.started = time.monotonic()
        expressions = {**call.expressions, **cell.expressions}
        try:
            run = await runner.run(
                call.code, cell.builder, timeout, call.on_output, cell.metadata, expressions
            )
            call.problem = await recording.bring_home(call.kernel, cell, run)
        except BaseException:
            cell.abandon()
            raise
        call.run = run
        return run


if TYPE_CHECKING:
    from jupyter_exec.state.host import ForkHost

    def _has_the_shape_the_state_machinery_needs(session: AsyncSession) -> ForkHost:
        return session  # mypy: the engine still satisfies jupyter_exec.state.host.ForkHost
