"""jupyter-exec: stateful code execution on Jupyter kernels, every session recorded as a notebook.

The whole public surface is here; everything else is private and may change.

The sessions, managers and replay pull in jupyter_client, zmq, nbformat and
asyncio, a few hundred milliseconds a command such as ``jupyter-exec
--version`` or an HTTP server's parser never uses. So only the version and the
error types (a leaf module) are loaded with the package; every other public
name is loaded on its first use, from the table below (see
:mod:`jupyter_exec._lazy`). Type checkers read the ordinary imports under
``TYPE_CHECKING``.
"""

from typing import TYPE_CHECKING, Any

from jupyter_exec._lazy import lazy_names
from jupyter_exec._version import __version__
from jupyter_exec.exceptions import (
    BackendError,
    CheckpointError,
    DockerUnavailable,
    ExecutionError,
    ExecutionTimeout,
    ForkError,
    ImageError,
    InvalidArgument,
    JupyterExecError,
    KernelDiedError,
    KernelError,
    KernelNotAliveError,
    KernelStartError,
    MissingDependency,
    NotebookError,
    RemoteError,
    RemoteNotFound,
    ServerRefused,
    SessionClosedError,
    SessionConflict,
    SessionLimitError,
    SessionNotFound,
    StorageError,
    WorkDirError,
)

if TYPE_CHECKING:
    from jupyter_exec.manager import AsyncSessionManager, SessionInfo, SessionManager
    from jupyter_exec.models import CellError, Execution, Result, ScriptResult, StateRecovery
    from jupyter_exec.network import NetworkPolicy
    from jupyter_exec.notebook.replay import CellResult, ReplayReport, replay, replay_async
    from jupyter_exec.options import SessionOptions
    from jupyter_exec.session.session import AsyncSession
    from jupyter_exec.state.session_state import Checkpoint
    from jupyter_exec.sync import Session

__all__ = [
    "AsyncSession",
    "AsyncSessionManager",
    "BackendError",
    "CellError",
    "CellResult",
    "Checkpoint",
    "CheckpointError",
    "DockerUnavailable",
    "Execution",
    "ExecutionError",
    "ExecutionTimeout",
    "ForkError",
    "ImageError",
    "InvalidArgument",
    "JupyterExecError",
    "KernelDiedError",
    "KernelError",
    "KernelNotAliveError",
    "KernelStartError",
    "MissingDependency",
    "NetworkPolicy",
    "NotebookError",
    "RemoteError",
    "RemoteNotFound",
    "ReplayReport",
    "Result",
    "ScriptResult",
    "ServerRefused",
    "Session",
    "SessionClosedError",
    "SessionConflict",
    "SessionInfo",
    "SessionLimitError",
    "SessionManager",
    "SessionNotFound",
    "SessionOptions",
    "StateRecovery",
    "StorageError",
    "WorkDirError",
    "__version__",
    "replay",
    "replay_async",
]

# Each public name loaded on first use, and the module that defines it.
_LAZY: dict[str, str] = {
    "AsyncSession": "jupyter_exec.session.session",
    "AsyncSessionManager": "jupyter_exec.manager",
    "CellError": "jupyter_exec.models",
    "CellResult": "jupyter_exec.notebook.replay",
    "Checkpoint": "jupyter_exec.state.session_state",
    "Execution": "jupyter_exec.models",
    "NetworkPolicy": "jupyter_exec.network",
    "ReplayReport": "jupyter_exec.notebook.replay",
    "Result": "jupyter_exec.models",
    "ScriptResult": "jupyter_exec.models",
    "Session": "jupyter_exec.sync",
    "SessionInfo": "jupyter_exec.manager",
    "SessionManager": "jupyter_exec.manager",
    "SessionOptions": "jupyter_exec.options",
    "StateRecovery": "jupyter_exec.models",
    "replay": "jupyter_exec.notebook.replay",
    "replay_async": "jupyter_exec.notebook.replay",
}


def _public(obj: Any) -> Any:
    """Reprs and tracebacks say ``jupyter_exec.Session``, not ``jupyter_exec.sync.Session``."""
    if isinstance(obj, type) or callable(obj):
        obj.__module__ = "jupyter_exec"
    return obj


if not TYPE_CHECKING:  # type checkers read the imports above, and check every name
    __getattr__, __dir__ = lazy_names(__name__, _LAZY, loaded=_public)

for _name in __all__:
    if _name not in _LAZY and _name != "__version__":
        _public(globals()[_name])
del _name, Any, TYPE_CHECKING, lazy_names  # only the public surface is left public
