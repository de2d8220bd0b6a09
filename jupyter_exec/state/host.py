"""What the state machinery needs of a session: a small protocol, so it never imports one.

:class:`~jupyter_exec.AsyncSession` satisfies it (a test checks that it still
does). The state modules take a :class:`StateHost` wherever they work on "the
session", which keeps the dependency one way: the engine imports the state
machinery, and the state machinery knows the engine only as this shape. The
underscored members are the engine's own bookkeeping that undo, restore and
recovery have to change in step with it (the live kernel, the recording, the
execution lock, the restart counter).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from jupyter_exec.engine.kernel import KernelHandle
    from jupyter_exec.engine.recording import Recording
    from jupyter_exec.notebook.recorder import NotebookRecorder
    from jupyter_exec.options import SessionOptions
    from jupyter_exec.state.session_state import SessionState

__all__ = ["ForkHost", "StateHost"]


class StateHost(Protocol):
    """A running session, as forks, undo, checkpoints and recovery see it."""

    _kernel: KernelHandle | None
    _recording: Recording | None
    _lock: asyncio.Lock
    _generation: int

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


class ForkHost(StateHost, Protocol):
    """A session that can be forked: its class makes the children, which it then wires up.

    A fork is a new session of the parent's class around a kernel the engine
    did not start, so the state machinery sets the few fields a start would
    have set (its work dir, name and notebook).
    """

    _state: SessionState
    _work_dir: Path | None
    _name: str | None
    _notebook_path: Path | None

    def __init__(self, *, options: SessionOptions) -> None: ...

    @property
    def files_dir(self) -> Path: ...

    async def close(self) -> None: ...
