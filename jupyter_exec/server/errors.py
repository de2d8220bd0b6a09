"""The REST API's errors: one table from jupyter-exec's exceptions to HTTP statuses and bodies.

Handlers raise jupyter-exec's own exceptions (``SessionNotFound``,
``InvalidArgument``...) and never choose a status themselves: the handlers'
base class hands every exception to :func:`status_of` and :func:`error_body`,
once, where tornado turns an exception into a response. The body is always::

    {"error": "<what went wrong, a class name>", "message": "<what to fix>", "reason": "<HTTP>"}

``error`` is the exception's class name for jupyter-exec's errors, so a
client branches on it without parsing text; for refusals by Jupyter itself
(no token, a foreign ``Host``, a method the route does not serve) it is the
HTTP reason in one word (``Forbidden``, ``MethodNotAllowed``). A client's
mistake is always a 4xx; a 5xx means the server could not do what was
rightly asked (a kernel would not start, the disk is full) or a bug.

The REST API's own refusals are declared here too (their modules re-export
them), so the E2B server, which shares this table, loads no REST machinery.
"""

from __future__ import annotations

import errno
from http.client import responses
from typing import Any

from tornado.web import HTTPError

from jupyter_exec.exceptions import (
    BackendError,
    CheckpointError,
    ForkError,
    InvalidArgument,
    JupyterExecError,
    KernelError,
    KernelNotAliveError,
    NotebookError,
    SessionClosedError,
    SessionConflict,
    SessionLimitError,
    SessionNotFound,
    StorageError,
    WorkDirError,
)

__all__ = [
    "REFUSED_ERRNOS",
    "STATUS",
    "ApprovalNotFound",
    "CheckpointNotFound",
    "clip",
    "error_body",
    "status_of",
]


class CheckpointNotFound(InvalidArgument):
    """The session has no checkpoint of that name (a 404 over REST)."""


class ApprovalNotFound(InvalidArgument):
    """No pending approval has that id (answered already, timed out, or never asked)."""


STATUS: tuple[tuple[type[JupyterExecError], int], ...] = (
    (SessionNotFound, 404),
    (CheckpointNotFound, 404),  # a checkpoint named in the URL that the session does not have
    (ApprovalNotFound, 404),  # answered already, timed out, or never asked
    (InvalidArgument, 400),  # a bad field, name, path or value (InvalidRequest is one)
    (WorkDirError, 400),  # a path that escapes the root, or a folder that cannot be made
    (SessionConflict, 409),
    (KernelNotAliveError, 409),  # the kernel was shut down outside the API
    (SessionClosedError, 409),
    (ForkError, 409),  # this kernel cannot fork (remote, not IPython), or the fork failed
    (CheckpointError, 409),  # damaged, unsigned, altered, another environment or origin
    (SessionLimitError, 429),
    (StorageError, 507),  # the server's disk, not the client
    (KernelError, 503),  # a kernel that would not start or died
    (BackendError, 503),  # Docker, a gateway
    (JupyterExecError, 500),
)
"""jupyter-exec's exceptions to HTTP statuses, most specific first; the first match wins."""

MAX_MESSAGE = 2000
"""Longest message sent back: a message quotes what the client sent, which may be huge."""


REFUSED_ERRNOS = frozenset({errno.ELOOP, errno.EINVAL, errno.EISDIR, errno.ENOTDIR, errno.EFBIG})
"""A :class:`StorageError` with one of these is a path refused on purpose (a planted link, a
FIFO or a device, a file where a folder is named, a file over the read limit): the request met
what a kernel left there, not a failing disk, so it answers 400, not 507. A session notebook
that could not be saved for one of these reasons answers 409: the request was right, the work
dir holds what the kernel planted (the message says what to remove)."""


def _refused(exc: BaseException | None) -> bool:
    return isinstance(exc, StorageError) and exc.errno in REFUSED_ERRNOS


def _ours(exc: BaseException | None) -> BaseException | None:
    """``exc``, or the exception of ours it was raised from on a Jupyter route's behalf
    (:mod:`jupyter_exec.server.refusals`)."""
    if isinstance(exc, HTTPError) and isinstance(exc.__cause__, JupyterExecError):
        return exc.__cause__
    return exc


def status_of(exc: BaseException | None) -> int | None:
    """The HTTP status for one of jupyter-exec's exceptions; ``None`` for any other."""
    exc = _ours(exc)
    if not isinstance(exc, JupyterExecError):
        return None
    if _refused(exc):
        return 400
    cause = exc.__cause__
    if isinstance(exc, NotebookError) and _refused(cause):  # a link where the record goes
        return 409
    return next(code for kind, code in STATUS if isinstance(exc, kind))


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters in all)"


def _one_word(status: int) -> str:
    return "".join(responses.get(status, "Error").replace("-", " ").title().split())


def error_body(
    status: int, exc: BaseException | None, method: str = "", allowed: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The JSON body for an error response (see the module docstring).

    ``method`` and ``allowed`` (the route's methods) make a 405 say what would work.
    """
    reason = responses.get(status, "Error")
    exc = _ours(exc)
    if isinstance(exc, JupyterExecError):
        return {"error": type(exc).__name__, "message": clip(str(exc)), "reason": reason}
    if isinstance(exc, HTTPError):
        message = exc.log_message % exc.args if exc.log_message and exc.args else exc.log_message
        if status == 405:
            message = f"{method or 'this method'} is not served here; use {', '.join(allowed)}"
        elif status == 403 and not message:
            message = (
                "not authenticated or not allowed: send the server's token "
                "(Authorization: token ...), from a local Host unless remote access is on"
            )
        elif status == 404 and not message:
            message = (
                "no such endpoint here (or a cross-origin request, which Jupyter refuses: "
                "see c.ServerApp.allow_origin)"
            )
        return {
            "error": _one_word(status),
            "message": clip(message or reason),
            "reason": exc.reason or reason,
        }
    if status >= 500:
        return {
            "error": "InternalError",
            "message": "the server failed unexpectedly (a bug in jupyter-exec); see the server log",
            "reason": reason,
        }
    return {"error": _one_word(status), "message": reason, "reason": reason}
