"""The E2B server's errors: our exceptions to the statuses and bodies the SDK maps, in one place.

Handlers raise jupyter-exec's exceptions (and the ``OSError`` kinds that a
file operation meets) and never pick a status themselves. :func:`status_of`
gives the HTTP status, from the REST API's own table
(:data:`jupyter_exec.server.errors.STATUS`) plus the file errors; the
SDK turns a status into its exception (404 ``NotFoundException``, 400
``InvalidArgumentException``, 401 ``AuthenticationException``...).
:func:`connect_code` gives the Connect RPC code for the same status, for the
envd endpoints. A sandbox that does not exist answers 502 with a message
that says it "was not found", which is how E2B's proxy says a sandbox ended:
the SDK then reports ``SandboxNotRunningException`` (and ``is_running()``
``False``), not a missing file.
"""

from __future__ import annotations

import errno
from typing import Any

from tornado.web import HTTPError

from jupyter_exec.exceptions import JupyterExecError, StorageError
from jupyter_exec.server.errors import clip
from jupyter_exec.server.errors import status_of as rest_status

__all__ = [
    "EXPECTED",
    "NotServed",
    "SandboxGone",
    "Unauthorized",
    "connect_code",
    "error_message",
    "status_of",
]


class Unauthorized(JupyterExecError):
    """A request without the token its sandbox (or the API) needs."""


class SandboxGone(JupyterExecError):
    """The sandbox a request names does not exist (never made, killed, or timed out)."""


class NotServed(JupyterExecError):
    """A route of E2B's API that this server does not serve (yet): 501, saying what it is.

    Not a 404: the SDK reads a 404 on a sandbox's route as "sandbox not found".
    """


EXPECTED = (SandboxGone, NotServed)
"""5xx answers that are no failure of the server: answered, never logged as errors."""


CONNECT_CODES = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "already_exists",
    429: "resource_exhausted",
    499: "canceled",
    501: "unimplemented",
    502: "unavailable",
    503: "unavailable",
    504: "deadline_exceeded",
    507: "resource_exhausted",
}


def status_of(exc: BaseException) -> int:
    """The HTTP status for ``exc`` (500 for anything we did not expect)."""
    if isinstance(exc, Unauthorized):
        return 401
    if isinstance(exc, SandboxGone):
        return 502
    if isinstance(exc, NotServed):
        return 501
    if isinstance(exc, HTTPError):
        return exc.status_code
    if isinstance(exc, TimeoutError) and isinstance(exc, JupyterExecError):
        return 504
    if isinstance(exc, StorageError) and exc.errno in (errno.ELOOP, errno.EINVAL):
        return 400  # a planted link or a FIFO: refused, not the server's fault
    if isinstance(exc, StorageError) and exc.errno in (errno.EISDIR, errno.ENOTDIR):
        return 400
    status = rest_status(exc)
    if status is not None:
        return status
    if isinstance(exc, FileNotFoundError):
        return 404
    if isinstance(exc, FileExistsError):
        return 409
    if isinstance(exc, (IsADirectoryError, NotADirectoryError)):
        return 400
    return 500


def error_message(exc: BaseException) -> str:
    """What to tell the client (never a stack trace; a bug says to see the log)."""
    if isinstance(exc, HTTPError):
        return exc.log_message or exc.reason or "error"
    if isinstance(exc, (JupyterExecError, OSError)):
        if isinstance(exc, OSError) and not isinstance(exc, StorageError) and exc.filename:
            return clip(f"{exc.strerror or exc}: {exc.filename}")
        return clip(str(exc))
    return "the server failed unexpectedly (a bug in jupyter-exec); see the server log"


def connect_code(status: int) -> str:
    """The Connect RPC code for an HTTP status."""
    return CONNECT_CODES.get(status, "internal" if status >= 500 else "unknown")


def api_body(status: int, exc: BaseException) -> dict[str, Any]:
    """The E2B API's error body (``code`` and ``message``), also read by the envd clients."""
    return {"code": status, "message": error_message(exc)}
