"""REST handlers under ``/api/exec``: parse the request, call ServerSessions, write JSON.

Every method is behind Jupyter's authentication (``@web.authenticated``) and
its authorizer (``@authorized`` on the ``exec`` resource; running code is the
``execute`` action, as for kernels). jupyter-exec's exceptions become HTTP
errors in one place, :func:`http_errors`; the body of every error is
``{"message", "reason", "error"}``, ``error`` naming the exception class so a
client can branch without parsing text.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.utils import url_escape, url_path_join
from tornado import web
from tornado.iostream import StreamClosedError

from jupyter_exec.exceptions import (
    BackendError,
    JupyterExecError,
    KernelNotAliveError,
    SessionClosedError,
    SessionLimitError,
    SessionNotFound,
    WorkDirError,
)
from jupyter_exec.server.sessions import (
    InvalidRequest,
    ServerSessions,
    SessionConflict,
)

__all__ = ["AUTH_RESOURCE", "SETTINGS_KEY", "default_handlers"]

AUTH_RESOURCE = "exec"
"""The resource name an authorizer sees for every jupyter-exec endpoint."""

SETTINGS_KEY = "jupyter_exec_sessions"
"""Where the extension puts its :class:`ServerSessions` in the web app's settings."""

KEEPALIVE = 15.0
"""Seconds of silence after which a stream sends an SSE comment, so proxies keep it open."""

_STATUS: tuple[tuple[type[JupyterExecError], int], ...] = (
    (SessionNotFound, 404),
    (InvalidRequest, 400),
    (WorkDirError, 400),
    (SessionConflict, 409),
    (KernelNotAliveError, 409),
    (SessionClosedError, 409),
    (SessionLimitError, 429),  # the manager's limits (SessionLimitReached is one of them)
    (BackendError, 503),
)


_Method = TypeVar("_Method", bound=Callable[..., Awaitable[None]])


def exec_authorized(action: str | None = None) -> Callable[[_Method], _Method]:
    """jupyter_server's ``@authorized`` on the ``exec`` resource (typed, for mypy --strict).

    ``action`` defaults, as in jupyter_server, to the HTTP method's: read for
    GET, write for POST and DELETE.
    """
    return cast("Callable[[_Method], _Method]", authorized(action, resource=AUTH_RESOURCE))


class ExecHTTPError(web.HTTPError):
    """An HTTPError that keeps the message verbatim (tornado would %-format it)."""

    def __init__(self, status_code: int, message: str, error: str | None = None) -> None:
        super().__init__(status_code, log_message=message.replace("%", "%%"))
        self.message = message
        self.error = error


@contextmanager
def http_errors() -> Iterator[None]:
    """Translate jupyter-exec's exceptions into HTTP errors: the handlers' one seam."""
    try:
        yield
    except JupyterExecError as exc:
        status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 500)
        raise ExecHTTPError(status, str(exc), type(exc).__name__) from exc


# Request bodies: field -> (accepted types, required). Unknown fields are refused,
# so a typo ("timout") is an error rather than silently ignored.
_Fields = Mapping[str, tuple[tuple[type, ...], bool]]

_CREATE: _Fields = {
    "name": ((str,), False),
    "work_dir": ((str,), False),
    "backend": ((str,), False),
    "kernel_name": ((str,), False),
    "timeout": ((int, float), False),
}
_EXECUTE: _Fields = {"code": ((str,), True), "timeout": ((int, float), False)}
_REPLAY: _Fields = {
    "notebook": ((str,), True),
    "until": ((int,), False),
    "timeout": ((int, float), False),
    "kernel_name": ((str,), False),
}


def parse_body(raw: bytes, fields: _Fields) -> dict[str, Any]:
    """The request's JSON object, checked against ``fields``; raises :class:`InvalidRequest`."""
    if not raw.strip():
        body: Any = {}
    else:
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequest(f"the request body must be a JSON object, not {type(body).__name__}")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise InvalidRequest(
            f"unknown field(s) {', '.join(unknown)}; accepted: {', '.join(sorted(fields))}"
        )
    for key, (types, required) in fields.items():
        if key not in body:
            if required:
                raise InvalidRequest(f"the field {key!r} is required")
            continue
        value = body[key]
        if isinstance(value, bool) or not isinstance(value, types):
            wanted = "number" if float in types else "integer" if int in types else "string"
            raise InvalidRequest(f"{key!r} must be a {wanted}, not {json.dumps(value)}")
    timeout = body.get("timeout")
    if isinstance(timeout, (int, float)) and not (math.isfinite(timeout) and timeout > 0):
        raise InvalidRequest(f"'timeout' must be a positive number of seconds, not {timeout!r}")
    return body


class ExecAPIHandler(ExtensionHandlerMixin, APIHandler):
    """Base of the jupyter-exec handlers: the sessions, JSON in and out, JSON errors."""

    auth_resource = AUTH_RESOURCE

    @property
    def sessions(self) -> ServerSessions:
        sessions: ServerSessions = self.settings[SETTINGS_KEY]
        return sessions

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data, default=str))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, ExecHTTPError):
            self.set_header("Content-Type", "application/json")
            self.finish(
                json.dumps({"message": exc.message, "reason": exc.reason, "error": exc.error})
            )
            return
        super().write_error(status_code, **kwargs)

    def session_url(self, session_id: str) -> str:
        return str(url_path_join(self.base_url, "api", "exec", "sessions", url_escape(session_id)))


class SessionsHandler(ExecAPIHandler):
    """``/api/exec/sessions``: list and create."""

    @web.authenticated
    @exec_authorized()
    async def get(self) -> None:
        self.write_json([self.sessions.model(e) for e in self.sessions.list()])

    @web.authenticated
    @exec_authorized()
    async def post(self) -> None:
        with http_errors():
            body = parse_body(self.request.body, _CREATE)
            entry = await self.sessions.create(**body)
        self.set_header("Location", self.session_url(entry.id))
        self.write_json(self.sessions.model(entry), status=201)


class SessionHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}``: look at one, or stop it (the notebook stays)."""

    @web.authenticated
    @exec_authorized()
    async def get(self, session_id: str) -> None:
        with http_errors():
            self.write_json(self.sessions.model(self.sessions.get(session_id)))

    @web.authenticated
    @exec_authorized()
    async def delete(self, session_id: str) -> None:
        with http_errors():
            await self.sessions.delete(session_id)
        self.set_status(204)
        self.finish()


class ExecuteHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/execute``: run code, answer when it is done."""

    @web.authenticated
    @exec_authorized("execute")
    async def post(self, session_id: str) -> None:
        with http_errors():
            body = parse_body(self.request.body, _EXECUTE)
            _, execution = await self.sessions.execute(
                session_id, body["code"], body.get("timeout")
            )
            self.write_json(self.sessions.execution_model(execution))


class ExecuteStreamHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/execute/stream``: run code, send outputs as server-sent events.

    Events: ``output`` (one per output as it arrives: an nbformat output, a
    stream chunk, a ``clear_output`` or ``update_display_data``), then one
    ``result`` (the same JSON as the blocking endpoint), or ``error`` if the
    session failed. A client that goes away does not stop the code: it runs
    to the end and is recorded in the notebook.
    """

    @web.authenticated
    @exec_authorized("execute")
    async def post(self, session_id: str) -> None:
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        with http_errors():
            body = parse_body(self.request.body, _EXECUTE)
            task = self.sessions.execute_in_background(
                session_id,
                body["code"],
                body.get("timeout"),
                lambda event: queue.put_nowait(json.dumps(event, default=str)),
            )
        task.add_done_callback(lambda _: queue.put_nowait(None))
        self.set_header("Content-Type", "text/event-stream; charset=utf-8")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")  # nginx: do not buffer the stream
        try:
            await self.flush()
            while (item := await self._next(queue)) is not None:
                await self._send(item or None)
            try:
                _, execution = task.result()
                await self._send(json.dumps(self.sessions.execution_model(execution)), "result")
            except JupyterExecError as exc:
                error = {"message": str(exc), "error": type(exc).__name__}
                await self._send(json.dumps(error), "error")
            except Exception:  # a bug: the status line is sent already, so say it in the stream
                self.log.exception("jupyter-exec: streamed execution failed")
                await self._send(json.dumps({"message": "Unhandled error", "error": None}), "error")
        except StreamClosedError:
            self.log.info("jupyter-exec: stream client left; the execution goes on")
            return
        self.finish()

    @staticmethod
    async def _next(queue: asyncio.Queue[str | None]) -> str | None:
        """The next event, or ``""`` after KEEPALIVE seconds without one."""
        try:
            return await asyncio.wait_for(queue.get(), KEEPALIVE)
        except asyncio.TimeoutError:
            return ""

    async def _send(self, data: str | None, event: str = "output") -> None:
        self.write(f"event: {event}\ndata: {data}\n\n" if data is not None else ": keepalive\n\n")
        await self.flush()


class InterruptHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/interrupt``: KeyboardInterrupt in the running code."""

    @web.authenticated
    @exec_authorized("execute")
    async def post(self, session_id: str) -> None:
        with http_errors():
            parse_body(self.request.body, {})
            await self.sessions.interrupt(session_id)
        self.set_status(204)
        self.finish()


class RestartHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/restart``: a fresh kernel process; all state is lost."""

    @web.authenticated
    @exec_authorized("execute")
    async def post(self, session_id: str) -> None:
        with http_errors():
            parse_body(self.request.body, {})
            entry = await self.sessions.restart(session_id)
            self.write_json(self.sessions.model(entry))


class ReplayHandler(ExecAPIHandler):
    """``/api/exec/replay``: re-run a notebook on a fresh kernel, report cell by cell."""

    @web.authenticated
    @exec_authorized("execute")
    async def post(self) -> None:
        with http_errors():
            body = parse_body(self.request.body, _REPLAY)
            notebook = body.pop("notebook")
            self.write_json(await self.sessions.replay(notebook, **body))


_ID = r"(?P<session_id>[^/]+)"  # any id: an unknown one gets a JSON 404 from the sessions

default_handlers: list[tuple[str, type[ExecAPIHandler]]] = [
    (r"/api/exec/sessions", SessionsHandler),
    (rf"/api/exec/sessions/{_ID}", SessionHandler),
    (rf"/api/exec/sessions/{_ID}/execute", ExecuteHandler),
    (rf"/api/exec/sessions/{_ID}/execute/stream", ExecuteStreamHandler),
    (rf"/api/exec/sessions/{_ID}/interrupt", InterruptHandler),
    (rf"/api/exec/sessions/{_ID}/restart", RestartHandler),
    (r"/api/exec/replay", ReplayHandler),
]
