"""What the state machinery needs of a session: a small protocol, so it never imports one.

:class:`~jupyter_exec.AsyncSession` satisfies it (a test checks that it still
does). The state modules take a :class:`StateHost` wherever they work on "the
session", which keeps the dependency one way: the engine imports the state
machinery, and the state machinery knows the engine only as this shape. The
kernel, its execution lock and its generation belong to the session's
:class:`~jupyter_exec.engine.core.KernelSlot`; the state machinery reads them
there and replaces the kernel only through the session's declared methods
(``replace_kernel``, ``adopt_kernel``), never by writing the session's fields.
The underscored members left are only read: the recording, and the live kernel
(or why there is none).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from jupyter_exec.engine.core import KernelSlot
    from jupyter_exec.engine.hooks import Replacement
    from jupyter_exec.engine.kernel import KernelHandle
    from jupyter_exec.engine.recorder import NotebookRecorder
    from jupyter_exec.options import SessionOptions
    from jupyter_exec.session.recording import Recording
    from jupyter_exec.state.checkpoints import Checkpoint

__all__ = ["ForkHost", "StateHost", "StateOperations"]


class StateHost(Protocol):
    """A running session, as forks, undo, checkpoints and recovery see it."""

    _recording: Recording | None

    @property
    def kernel_slot(self) -> KernelSlot:
        """The session's kernel, execution lock and generation (their one owner)."""
        ...

    @property
    def recorder_class(self) -> type[NotebookRecorder]:
        """What records the notebook (a class attribute of the session's class)."""
        ...

    @property
    def name(self) -> str: ...

    @property
    def work_dir(self) -> Path: ...

    @property
    def notebook_path(self) -> Path | None: ...

    @property
    def options(self) -> SessionOptions: ...

    @property
    def timeout(self) -> float | None: ...

    @property
    def closed(self) -> bool: ...

    def _live_kernel(self) -> KernelHandle:
        """The session's kernel, or :class:`~jupyter_exec.KernelNotAliveError`."""
        ...

    async def restart(self, note: str = ...) -> None: ...

    async def wake(self) -> None:
        """A sleeping session's kernel started and its state loaded (nothing if awake)."""

    async def replace_kernel(self, new: KernelHandle, reason: Replacement) -> KernelHandle | None:
        """Make ``new`` serve the session; the kernel it replaced, for the caller to retire."""
        ...


class StateOperations(Protocol):
    """What a session's state object does for the state API (``undo``, ``checkpoint``...).

    :class:`~jupyter_exec.state.session_state.SessionState` is one; naming the shape here
    keeps the protocol from importing the class that uses it."""

    async def undo(self, session: StateHost, n: int) -> None: ...

    async def checkpoint(self, session: StateHost, name: str | None) -> Checkpoint: ...

    async def restore(
        self,
        session: StateHost,
        checkpoint: Checkpoint | str | os.PathLike[str],
        force: bool,
        trust_origin: bool,
    ) -> None: ...

    def list_checkpoints(self, session: StateHost) -> list[Checkpoint]: ...

    async def flush(self, session: StateHost) -> None: ...


class ForkHost(StateHost, Protocol):
    """A session that can be forked: its class makes the children, which it then wires up.

    A fork is a new session of the parent's class around a kernel the engine
    did not start: ``adopt_kernel`` makes it a started session, as a start would.
    """

    @property
    def _state(self) -> StateOperations:
        """The session's state object (read only here: a session may hold a richer one)."""
        ...

    def __init__(self, *, options: SessionOptions) -> None: ...

    def adopt_kernel(
        self, kernel: KernelHandle, work_dir: Path, notebook_path: Path | None
    ) -> Recording:
        """Become a started session around ``kernel``; its recording, to seed."""
        ...

    @property
    def files_dir(self) -> Path: ...

    async def close(self) -> None: ...
