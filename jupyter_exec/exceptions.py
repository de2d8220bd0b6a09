"""Every error jupyter-exec raises, in one tree.

Errors in the *user's code* (``1/0``) are not exceptions: they are data on
``Execution.error``. The classes below are for everything else, and for the
opt-in ``Execution.raise_for_error()``::

    JupyterExecError
    ├── InvalidArgument               (a ValueError) a bad name, option, environment or encoding
    ├── MissingDependency             (also an ImportError) an optional extra is not installed
    ├── KernelError
    │   ├── KernelStartError          the kernel could not be started (missing ipykernel, bad spec)
    │   ├── KernelDiedError           the kernel process died (segfault, os._exit, OOM kill)
    │   ├── KernelNotAliveError       an operation needs a live kernel and there is none
    │   └── ForkError                 a kernel could not be forked (not supported, or it failed)
    ├── ExecutionError                raise_for_error(): the code raised an exception
    ├── ExecutionTimeout              (also a TimeoutError) the code ran past its timeout
    ├── SessionClosedError            the session was used after close(), or closed under a running
    │                                 cell (then it carries that cell's Execution, recorded)
    ├── SessionNotFound               (also a KeyError) no session by that name / id
    ├── SessionConflict               a session's name or notebook is already taken
    ├── SessionLimitError             a session manager's limit forbids another session
    ├── NotebookError                 a notebook could not be read, validated or written
    ├── StorageError                  (also an OSError) a file in the work dir could not be written
    │                                 (disk full, ...); carries the Execution; the session goes on
    ├── WorkDirError                  a path would escape the work dir (a link, '..'), or the
    │   │                             work dir is unusable
    │   ├── WorkDirNotFound           (also a FileNotFoundError) a work dir to make has no parent
    │   └── WorkDirShared             a Docker or remote session's folder would be, hold or lie
    │                                 inside a local session's folder (or the reverse)
    ├── CheckpointError               a checkpoint on disk is corrupt, partial, or from another
    │                                 environment (``mismatches`` names what differs)
    └── BackendError                  a kernel backend failed outside the kernel itself
        ├── DockerUnavailable         no Docker engine answers
        ├── ImageError                a kernel image is missing or its build failed
        └── RemoteError               a remote Jupyter server / gateway answered with an error
            ├── RemoteNotFound        it answered 404 (the kernel or file does not exist)
            └── ServerRefused         it refused (any other HTTP error); carries status and reason

Errors raised by jupyter_client, zmq, docker and tornado are translated into
these once, where jupyter-exec calls those libraries; callers never need to
catch (or string-match) a third-party exception.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jupyter_exec.models import Execution

__all__ = [
    "BackendError",
    "CheckpointError",
    "DockerUnavailable",
    "ExecutionError",
    "ExecutionTimeout",
    "ForkError",
    "HostUnreachable",
    "ImageError",
    "InvalidArgument",
    "JupyterExecError",
    "KernelDiedError",
    "KernelError",
    "KernelNotAliveError",
    "KernelStartError",
    "MissingDependency",
    "NotebookError",
    "RemoteError",
    "RemoteNotFound",
    "ServerRefused",
    "SessionClosedError",
    "SessionConflict",
    "SessionLimitError",
    "SessionNotFound",
    "StorageError",
    "WorkDirError",
    "WorkDirNotFound",
    "WorkDirShared",
]


class JupyterExecError(Exception):
    """Base class of every error raised by jupyter-exec."""


class InvalidArgument(JupyterExecError, ValueError):
    """A bad argument (name, option, environment, encoding); the message says what to fix."""


class MissingDependency(JupyterExecError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class KernelError(JupyterExecError):
    """A problem with the kernel process rather than with the code it ran."""


class KernelStartError(KernelError):
    """The kernel could not be started; the message says how to fix it."""


class KernelNotAliveError(KernelError):
    """An operation needs a live kernel and the session has none."""


class ForkError(KernelError):
    """A kernel could not be forked: its kind does not support it, or the fork failed."""


class _CarriesExecution:
    """Mixin for errors raised from an :class:`Execution` by ``raise_for_error()``."""

    execution: Execution | None

    def _attach(self, execution: Execution | None) -> None:
        self.execution = execution


class KernelDiedError(KernelError, _CarriesExecution):
    """The kernel died while running code; its state is lost."""

    def __init__(self, message: str, execution: Execution | None = None) -> None:
        super().__init__(message)
        self._attach(execution)


class ExecutionError(JupyterExecError, _CarriesExecution):
    """The executed code raised an exception (only from ``raise_for_error()``)."""

    def __init__(self, message: str, execution: Execution | None = None) -> None:
        super().__init__(message)
        self._attach(execution)


class ExecutionTimeout(JupyterExecError, TimeoutError, _CarriesExecution):
    """The code ran past its timeout and was interrupted (or its kernel restarted)."""

    def __init__(self, message: str, execution: Execution | None = None) -> None:
        super().__init__(message)
        self._attach(execution)


class SessionClosedError(JupyterExecError, _CarriesExecution):
    """The session was used after ``close()``, or was closed while a cell ran.

    In the second case ``execution`` is that cell as far as it got (status
    ``"cancelled"``, outputs so far), and the notebook holds it.
    """

    def __init__(self, message: str, execution: Execution | None = None) -> None:
        super().__init__(message)
        self._attach(execution)


class SessionNotFound(JupyterExecError, KeyError):
    """No session has that name or id."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class SessionConflict(JupyterExecError):
    """The session's name or notebook is already taken."""


class SessionLimitError(JupyterExecError):
    """A session manager's limit (``max_sessions``, ``max_sessions_per_backend``) is reached."""


class NotebookError(JupyterExecError, _CarriesExecution):
    """A notebook could not be read, validated or written.

    When saving a cell failed, ``execution`` is that cell's result: the cell is
    kept in memory and written with the next successful save.
    """

    def __init__(self, message: str, execution: Execution | None = None) -> None:
        super().__init__(message)
        self._attach(execution)


class StorageError(JupyterExecError, OSError, _CarriesExecution):
    """A file in the work dir (an output, a spill, a script) could not be written.

    ``errno`` is the operating system's reason (``ENOSPC`` for a full disk);
    ``execution`` is the cell whose file it was, when there is one. Nothing the
    kernel printed is lost from the notebook, and the session goes on.
    """

    def __init__(
        self, message: str, errno: int | None = None, execution: Execution | None = None
    ) -> None:
        JupyterExecError.__init__(self, message)
        self.errno = errno
        self.strerror = message
        self._attach(execution)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class WorkDirError(JupyterExecError):
    """A path would escape the work dir, or the work dir cannot be used."""


class WorkDirNotFound(WorkDirError, FileNotFoundError):
    """A work dir to be made has no parent folder (a ``FileNotFoundError``, as AG2's
    command-line executors raise)."""


class WorkDirShared(WorkDirError):
    """A session's folder would cross a trust line: a Docker or remote session's folder
    is, contains or lies inside a live local session's folder, or the reverse.

    The message names both folders and both sessions (see
    :mod:`jupyter_exec.boundary.folders`).
    """


class BackendError(JupyterExecError):
    """A kernel backend (Docker, a remote server) failed outside the kernel itself."""


class DockerUnavailable(BackendError):
    """No Docker engine answers; the message says how to start one."""


class HostUnreachable(BackendError):
    """A cluster host cannot be reached over SSH; the message names the host and why."""


class ImageError(BackendError):
    """A kernel image is missing or could not be built; carries the build log tail."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message + (f"\n--- build log (tail) ---\n{log_tail}" if log_tail else ""))
        self.log_tail = log_tail


class RemoteError(BackendError):
    """A remote Jupyter server or gateway answered with an error."""


class RemoteNotFound(RemoteError):
    """The server answered 404: the kernel (or file) it was asked about does not exist."""


class ServerRefused(RemoteError):
    """The server was reached and refused (an HTTP error other than 404).

    ``status`` is the HTTP status and ``reason`` the server's own explanation
    (its JSON ``message`` / ``reason``), kept verbatim so a caller can act on it.
    """

    def __init__(self, message: str, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class CheckpointError(JupyterExecError):
    """A checkpoint on disk cannot be used: corrupt, partial, or from another environment.

    ``mismatches`` lists what differs between the checkpoint's environment and the
    kernel's (``"numpy 2.1.0 in the checkpoint, 1.26.4 in this kernel"``); empty for a
    damaged checkpoint. ``restore(..., force=True)`` loads one whose only fault is that.
    """

    def __init__(self, message: str, mismatches: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.mismatches = mismatches
