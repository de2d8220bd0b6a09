"""Session: the blocking face of AsyncSession.

Every call is forwarded to the AsyncSession running on the event loop thread
all blocking front ends share (:mod:`jupyter_exec.engine.loop_thread`). That
keeps a single implementation (no hand-copied twin), and works where the
caller already runs a loop (inside Jupyter, inside an async web app) - which
``asyncio.run`` per call would not.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from jupyter_exec.engine.loop_thread import run_blocking
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
)
from jupyter_exec.session.readthrough import ReadThrough
from jupyter_exec.session.session import AsyncSession, OutputCallback
from jupyter_exec.state.session_state import Checkpoint

__all__ = ["Session"]

T = TypeVar("T")


class _ClosedAtExit(weakref.WeakSet[T]):
    """Open objects of one kind: those a script forgot to close are closed with ``close`` at
    interpreter exit (best effort), so no kernel outlives the interpreter."""

    def __init__(self, close: Callable[[T], object]) -> None:
        super().__init__()
        self._close = close
        atexit.register(self.close_all)

    def close_all(self) -> None:
        for item in list(self):
            with contextlib.suppress(Exception):  # best effort at interpreter exit
                self._close(item)


_open_sessions: _ClosedAtExit[Session] = _ClosedAtExit(lambda session: session.close())


class Session(contextlib.AbstractContextManager["Session"]):
    """A stateful kernel session whose every execution is recorded as a notebook cell.

    The blocking counterpart of :class:`AsyncSession`, with the same
    parameters (see :class:`~jupyter_exec.options.SessionOptions`), plus
    ``start=False`` to start later. Use as a context manager::

        with Session(work_dir="analysis") as s:
            s.execute("x = 21 * 2")
            print(s.execute("x").text)   # 42

    Local kernels run with your rights: they are for trusted code. For code
    you do not trust, use ``backend="docker"``.
    """

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
        start: bool = True,
    ) -> None:
        self._async = AsyncSession(
            work_dir,
            kernel_name,
            python,
            notebook,
            name,
            timeout,
            language=language,
            backend=backend,
            docker=docker,
            network=network,
            env=env,
            interrupt_grace=interrupt_grace,
            startup_timeout=startup_timeout,
            max_output_chars=max_output_chars,
            undo_steps=undo_steps,
            checkpoint_every=checkpoint_every,
            save_state=save_state,
            state_budget_mb=state_budget_mb,
            overwrite=overwrite,
            environment=environment,
            url=url,
            token=token,
            host=host,
            kernel_manager=kernel_manager,
            owns_kernel=owns_kernel,
            options=options,
        )
        if start:
            self.start()

    @classmethod
    def from_async(cls, session: AsyncSession) -> Session:
        """The blocking face of an ``AsyncSession`` already running on jupyter-exec's loop.

        (The session must live on the loop :class:`Session` uses; a session
        manager's sessions do.)
        """
        self = cls.__new__(cls)
        self._async = session
        return self

    @classmethod
    def resume(
        cls,
        notebook: str | os.PathLike[str],
        *,
        until: int | None = None,
        work_dir: str | os.PathLike[str] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> Session:
        """A started session continuing ``notebook``; see :meth:`AsyncSession.resume`."""
        start = kwargs.pop("start", True)
        self = cls.__new__(cls)
        self._async = AsyncSession.resume(
            notebook, until=until, work_dir=work_dir, name=name, **kwargs
        )
        return self.start() if start else self

    resumed = ReadThrough[list[Execution]](
        "_async.resumed", "When resumed: the executions that rebuilt the kernel's state."
    )
    resumed_cells = ReadThrough[list[int]](
        "_async.resumed_cells",
        "When resumed: the notebook's code-cell number of each of :attr:`resumed`.",
    )

    @property
    def async_session(self) -> AsyncSession:
        """The underlying :class:`AsyncSession` (its methods run on the session's loop)."""
        return self._async

    def start(self) -> Session:
        run_blocking(self._async.start())
        _open_sessions.add(self)
        return self

    def execute(
        self,
        code: str,
        timeout: float | None = None,
        on_output: OutputCallback | None = None,
    ) -> Execution:
        """Run ``code`` (see :meth:`AsyncSession.execute`); ``on_output`` runs on our loop."""
        return run_blocking(
            self._async.execute(code, timeout=timeout, on_output=on_output),
            on_interrupt=self._async.interrupt,
        )

    def run_script(
        self,
        code: str,
        language: str = "python",
        filename: str | None = None,
        timeout: float | None = None,
    ) -> ScriptResult:
        """Run ``code`` as a new process in the session's environment; see
        :meth:`AsyncSession.run_script`."""
        return run_blocking(self._async.run_script(code, language, filename, timeout))

    def record_cell(self, cell: dict[str, Any]) -> int | None:
        """Append a cell that was not executed; see :meth:`AsyncSession.record_cell`."""
        return self._async.record_cell(cell)

    def fork(self, n: int = 1, name: str | None = None) -> list[Session]:
        """``n`` new sessions from this one's live state; see :meth:`AsyncSession.fork`."""
        forks = run_blocking(self._async.fork(n, name))
        made = [Session.from_async(child) for child in forks]
        _open_sessions.update(made)
        return made

    def undo(self, n: int = 1) -> None:
        """Go back to the state before the last ``n`` cells; see :meth:`AsyncSession.undo`."""
        run_blocking(self._async.undo(n))

    def checkpoint(self, name: str | None = None) -> Checkpoint:
        """Remember the current state; see :meth:`AsyncSession.checkpoint`."""
        return run_blocking(self._async.checkpoint(name))

    def restore(
        self,
        checkpoint: Checkpoint | str | os.PathLike[str],
        *,
        force: bool = False,
        trust_origin: bool = False,
    ) -> None:
        """Go back to a checkpoint (or load one from disk); see :meth:`AsyncSession.restore`."""
        run_blocking(self._async.restore(checkpoint, force=force, trust_origin=trust_origin))

    def checkpoints(self) -> list[Checkpoint]:
        """This session's checkpoints, oldest first."""
        return self._async.checkpoints()

    def flush(self) -> None:
        """Wait until the state of every cell so far is written and signed; see
        :meth:`AsyncSession.flush` (a large change is written while your code runs on)."""
        run_blocking(self._async.flush())

    def sleep(self) -> dict[str, str]:
        """Save the state and stop the kernel until the next call; the names not saved, with
        why. See :meth:`AsyncSession.sleep`."""
        return run_blocking(self._async.sleep())

    def wake(self) -> None:
        """Start a sleeping session's kernel now; see :meth:`AsyncSession.wake`."""
        run_blocking(self._async.wake())

    sleeping = ReadThrough[bool](
        "_async.sleeping", "Whether the session is asleep (no kernel until its next call)."
    )

    def interrupt(self) -> None:
        run_blocking(self._async.interrupt())

    def restart(self) -> None:
        run_blocking(self._async.restart())

    def close(self, *, now: bool = False) -> None:
        run_blocking(self._async.close(now=now))
        _open_sessions.discard(self)

    work_dir = ReadThrough[Path]("_async.work_dir")
    name = ReadThrough[str]("_async.name")
    files_dir = ReadThrough[Path](
        "_async.files_dir", "``<work_dir>/<name>_files``: where rich outputs are saved."
    )
    notebook_path = ReadThrough[Path | None]("_async.notebook_path")
    kernel_id = ReadThrough[str | None]("_async.kernel_id")
    language_info = ReadThrough[dict[str, Any]]("_async.language_info")
    language = ReadThrough[str](
        "_async.language",
        "What the session runs (``python``, ``r``, ``bash``, ``javascript``, ``typescript``).",
    )

    @property
    def is_alive(self) -> bool:
        return run_blocking(self._async.check_alive())

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncSession", "Session", 1)
