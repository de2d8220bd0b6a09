"""Every error jupyter-exec raises, in one tree.

Errors in the *user's code* (``1/0``) are not exceptions: they are data on
``Execution.error``. The classes below are for everything else, and for the
opt-in ``Execution.raise_for_error()``::

    JupyterExecError
    ├── KernelError
    │   ├── KernelStartError          the kernel could not be started (missing ipykernel, bad spec)
    │   ├── KernelDiedError           the kernel process died (segfault, os._exit, OOM kill)
    │   └── KernelNotAliveError       an operation needs a live kernel and there is none
    ├── ExecutionError                raise_for_error(): the code raised an exception
    ├── ExecutionTimeout              (also a TimeoutError) the code ran past its timeout
    ├── SessionClosedError            the session was used after close()
    ├── SessionNotFound               no session by that name / id
    ├── SessionLimitError             a session manager's limit forbids another session
    ├── NotebookError                 a notebook could not be read, validated or written
    ├── WorkDirError                  a path would escape the work dir, or the work dir is unusable
    └── BackendError                  a kernel backend failed outside the kernel itself
        ├── DockerUnavailable         no Docker engine answers
        └── ImageError                a kernel image is missing or its build failed

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
    "DockerUnavailable",
    "ExecutionError",
    "ExecutionTimeout",
    "ImageError",
    "JupyterExecError",
    "KernelDiedError",
    "KernelError",
    "KernelNotAliveError",
    "KernelStartError",
    "NotebookError",
    "SessionClosedError",
    "SessionLimitError",
    "SessionNotFound",
    "WorkDirError",
]


class JupyterExecError(Exception):
    """Base class of every error raised by jupyter-exec."""


class KernelError(JupyterExecError):
    """A problem with the kernel process rather than with the code it ran."""


class KernelStartError(KernelError):
    """The kernel could not be started; the message says how to fix it."""


class KernelNotAliveError(KernelError):
    """An operation needs a live kernel and the session has none."""


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


class SessionClosedError(JupyterExecError):
    """The session was used after ``close()``."""


class SessionNotFound(JupyterExecError, KeyError):
    """No session has that name or id."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class SessionLimitError(JupyterExecError):
    """A session manager's limit (``max_sessions``, ``max_sessions_per_backend``) is reached."""


class NotebookError(JupyterExecError):
    """A notebook could not be read, validated or written."""


class WorkDirError(JupyterExecError):
    """A path would escape the work dir, or the work dir cannot be used."""


class BackendError(JupyterExecError):
    """A kernel backend (Docker, a remote server) failed outside the kernel itself."""


class DockerUnavailable(BackendError):
    """No Docker engine answers; the message says how to start one."""


class ImageError(BackendError):
    """A kernel image is missing or could not be built; carries the build log tail."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message + (f"\n--- build log (tail) ---\n{log_tail}" if log_tail else ""))
        self.log_tail = log_tail
