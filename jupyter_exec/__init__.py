"""jupyter-exec: stateful code execution on Jupyter kernels, every session recorded as a notebook.

The whole public surface is here; everything else is private and may change.
"""

from jupyter_exec._version import __version__
from jupyter_exec.engine.session import AsyncSession
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
from jupyter_exec.manager import AsyncSessionManager, SessionInfo, SessionManager
from jupyter_exec.models import CellError, Execution, Result, ScriptResult, StateRecovery
from jupyter_exec.network import NetworkPolicy
from jupyter_exec.notebook.replay import CellResult, ReplayReport, replay, replay_async
from jupyter_exec.options import SessionOptions
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

# Reprs and tracebacks say jupyter_exec.Session, not jupyter_exec.sync.Session.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or callable(_obj):
        _obj.__module__ = "jupyter_exec"
del _name, _obj
