"""REST handlers under ``/api/exec``: parse the request, call ServerSessions, write JSON.

Who may call a route is decided in one place, :meth:`ExecAPIHandler.prepare`,
from what each handler class declares, before a byte of its body is read:

* Jupyter's own checks (:class:`~jupyter_server.base.handlers.APIHandler`:
  ``Host``, ``Origin``, XSRF for browsers) and its identity (a token or a
  login cookie): no user, 403;
* jupyter_server's authorizer, on the ``exec`` resource with the action the
  route declares per method in :attr:`ExecAPIHandler.actions` (running code
  is ``execute``, as for kernels); a session attached to a running kernel
  also needs ``execute`` on ``kernels`` (:meth:`ExecAPIHandler.require`), as
  JupyterLab's kernel websocket does;
* the body, streamed in only then, no larger than the route's
  :attr:`~ExecAPIHandler.max_body` (a longer declared one: 413, unread).

A handler cannot skip these: :meth:`ExecAPIHandler.__init_subclass__` refuses
one that overrides ``prepare`` or ``data_received``, or that serves a method
it declares no action for. Handlers raise jupyter-exec's exceptions and never
pick a status: :class:`ExecAPIHandler` turns every exception into a status and
a JSON body through the one table in :mod:`~jupyter_exec.server.errors`.
Request bodies are checked by :mod:`~jupyter_exec.server.bodies` before anything runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any, ClassVar

from jupyter_core.utils import ensure_async
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.utils import url_escape, url_path_join
from tornado import web
from tornado.http1connection import HTTP1Connection
from tornado.iostream import StreamClosedError

from jupyter_exec.exceptions import JupyterExecError
from jupyter_exec.server import bodies
from jupyter_exec.server.errors import clip, error_body, status_of
from jupyter_exec.server.sessions import ServerSessions

__all__ = ["AUTH_RESOURCE", "SETTINGS_KEY", "ExecAPIHandler", "default_handlers"]

AUTH_RESOURCE = "exec"
"""The resource name an authorizer sees for every jupyter-exec endpoint."""

SETTINGS_KEY = "jupyter_exec_sessions"
"""Where the extension puts its :class:`ServerSessions` in the web app's settings."""

KEEPALIVE = 15.0
"""Seconds of silence after which a stream sends an SSE comment, so proxies keep it open."""

SMALL_BODY = 1 << 20
"""Largest body of a route that carries no code: 1 MiB."""
CODE_BODY = 16 << 20
"""Largest body of a route that carries code: 16 MiB."""

METHODS = ("get", "post", "put", "patch", "delete")
SEALED = ("prepare", "data_received")


@web.stream_request_body
class ExecAPIHandler(ExtensionHandlerMixin, APIHandler):
    """Base of the jupyter-exec handlers: who may call, the body, JSON in and out, errors.

    Each route declares :attr:`actions` (the authorizer's action per HTTP
    method, on :data:`AUTH_RESOURCE`), :attr:`body_fields` (what its POST
    body may hold, see :mod:`bodies`) and :attr:`max_body`.
    """

    auth_resource = AUTH_RESOURCE
    actions: ClassVar[Mapping[str, str]] = {}
    """``{"GET": "read", "POST": "execute"}``: what the authorizer is asked, per method."""
    body_fields: ClassVar[bodies.Fields] = bodies.NO_FIELDS
    max_body: ClassVar[int] = SMALL_BODY
    wakes: ClassVar[bool] = True
    """A route on one session brings it back if it is from before a restart (first use)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        overridden = [name for name in SEALED if name in vars(cls)]
        undeclared = [m.upper() for m in METHODS if m in vars(cls) and m.upper() not in cls.actions]
        if overridden or undeclared:
            raise TypeError(
                f"{cls.__name__}: every request is authorised in ExecAPIHandler.prepare from "
                f"the class's `actions`; it overrides {overridden} or declares no action for "
                f"{undeclared}"
            )

    async def prepare(self) -> None:  # type: ignore[override]
        """Authenticate, authorise the route's declared action, then let the body in."""
        self._chunks: list[bytes] = []
        self._admitted = False
        await super().prepare()
        method = (self.request.method or "").upper()
        action = self.actions.get(method)
        if action is not None:  # else tornado answers 405 (no such method here)
            await self.require(action, AUTH_RESOURCE)
        self._bound_body()
        session_id = self.path_kwargs.get("session_id")
        if action is not None and isinstance(session_id, str):
            await self.sessions.woken(session_id)  # a sleep under way ends first
            if self.wakes:
                await self.sessions.wake(session_id)  # authorised first: no kernel for a stranger
        self._admitted = True

    async def require(self, action: str, resource: str) -> None:
        """403 unless the authenticated user may do ``action`` on ``resource``."""
        user = self.current_user
        if not user or not await ensure_async(
            self.authorizer.is_authorized(self, user, action, resource)
        ):
            raise web.HTTPError(403, f"not authorized to {action} on {resource}")

    def _bound_body(self) -> None:
        connection = self.request.connection
        if isinstance(connection, HTTP1Connection):
            connection.set_max_body_size(self.max_body)  # the connection closes past it
        declared = self.request.headers.get("Content-Length", "0")
        if not declared.isdigit():
            raise bodies.InvalidRequest("Content-Length must be a number of bytes")
        if int(declared) > self.max_body:
            raise web.HTTPError(
                413, f"the request body is larger than this route takes ({self.max_body:,} bytes)"
            )

    def data_received(self, chunk: bytes) -> None:
        """Keep the body of an admitted request (a refused one's is dropped as it arrives)."""
        if self._admitted and not self._finished:
            self._chunks.append(chunk)

    @property
    def sessions(self) -> ServerSessions:
        sessions: ServerSessions = self.settings[SETTINGS_KEY]
        return sessions

    def body(self) -> dict[str, Any]:
        """The request body, checked against :attr:`body_fields`."""
        return bodies.parse_body(b"".join(self._chunks), self.body_fields)

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data, default=str))

    # -- errors: the one seam --------------------------------------------------------

    def send_error(self, status_code: int = 500, **kwargs: Any) -> None:
        """Send an error; jupyter-exec's exceptions get their status from the errors table."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        super().send_error(status_of(exc) or status_code, **kwargs)

    def log_exception(
        self,
        typ: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """A client's mistake is one warning line; only failures of the server get a traceback."""
        status = status_of(value)
        if status is not None and status < 500:
            self.log.warning(
                "jupyter-exec: %s %s: %s", status, type(value).__name__, clip(str(value), 300)
            )
            return
        super().log_exception(typ, value, tb)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        body = error_body(status_code, exc, self.request.method or "", self.allowed_methods())
        self.set_header("Content-Type", "application/json")
        if not getattr(self, "_admitted", False):  # refused before its body: tornado closes
            self.set_header("Connection", "close")
        self.finish(json.dumps(body))

    @classmethod
    def allowed_methods(cls) -> tuple[str, ...]:
        """The HTTP methods this route serves."""
        return tuple(m for m in ("GET", "POST", "PUT", "PATCH", "DELETE") if m.lower() in vars(cls))

    def session_url(self, session_id: str) -> str:
        return str(url_path_join(self.base_url, "api", "exec", "sessions", url_escape(session_id)))


class SessionsHandler(ExecAPIHandler):
    """``/api/exec/sessions``: list and create."""

    actions = {"GET": "read", "POST": "write"}

    body_fields = bodies.CREATE

    async def get(self) -> None:
        self.write_json(self.sessions.models())

    async def post(self) -> None:
        body = self.body()
        if "kernel_id" in body:  # an agent on a running kernel runs code on it, as its owner
            await self.require("execute", "kernels")
        entry = await self.sessions.create(**body)
        self.set_header("Location", self.session_url(entry.id))
        self.write_json(self.sessions.model(entry), status=201)


class SessionHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}``: look at one, or stop it (the notebook stays)."""

    actions = {"GET": "read", "DELETE": "write"}
    wakes = False  # looking at or deleting one from before a restart needs no kernel

    async def get(self, session_id: str) -> None:
        self.write_json(self.sessions.model_of(session_id))

    async def delete(self, session_id: str) -> None:
        await self.sessions.delete(session_id)
        self.set_status(204)
        self.finish()


class ExecuteHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/execute``: run code, answer when it is done."""

    actions = {"POST": "execute"}

    body_fields = bodies.EXECUTE
    max_body = CODE_BODY

    async def post(self, session_id: str) -> None:
        body = self.body()
        _, execution = await self.sessions.execute(session_id, body["code"], body.get("timeout"))
        self.write_json(self.sessions.execution_model(execution))


class ExecuteStreamHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/execute/stream``: run code, send outputs as server-sent events.

    Events: ``output`` (one per output as it arrives: an nbformat output, a
    stream chunk, a ``clear_output`` or ``update_display_data``), then one
    ``result`` (the same JSON as the blocking endpoint), or ``error`` if the
    session failed. A client that goes away does not stop the code: it runs
    to the end and is recorded in the notebook.
    """

    actions = {"POST": "execute"}

    body_fields = bodies.EXECUTE
    max_body = CODE_BODY

    async def post(self, session_id: str) -> None:
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        body = self.body()
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

    actions = {"POST": "execute"}

    async def post(self, session_id: str) -> None:
        self.body()
        await self.sessions.interrupt(session_id)
        self.set_status(204)
        self.finish()


class RestartHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/restart``: a fresh kernel process; all state is lost."""

    actions = {"POST": "execute"}

    async def post(self, session_id: str) -> None:
        self.body()
        entry = await self.sessions.restart(session_id)
        self.write_json(self.sessions.model(entry))


class SleepHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/sleep``: state saved, kernel given back; its next use wakes it."""

    actions = {"POST": "execute"}
    wakes = False  # asleep already: said again, never woken to be put to sleep

    async def post(self, session_id: str) -> None:
        self.body()
        await self.sessions.sleep(session_id)
        self.write_json(self.sessions.model_of(session_id))


class ForkHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/fork``: new sessions from this one's live state (201)."""

    actions = {"POST": "execute"}

    body_fields = bodies.FORK

    async def post(self, session_id: str) -> None:
        body = self.body()
        forks = await self.sessions.fork(session_id, body.get("n", 1), body.get("name"))
        urls = [self.session_url(e.id) for e in forks]
        self.set_header("Location", urls[0])
        self.set_header("Link", ", ".join(f'<{url}>; rel="item"' for url in urls))
        self.write_json([self.sessions.model(e) for e in forks], status=201)


class UndoHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/undo``: the state from before the last ``n`` cells."""

    actions = {"POST": "execute"}

    body_fields = bodies.UNDO

    async def post(self, session_id: str) -> None:
        entry = await self.sessions.undo(session_id, self.body().get("n", 1))
        self.write_json(self.sessions.model(entry))


class CheckpointsHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/checkpoints``: list them, or take one (201)."""

    actions = {"GET": "read", "POST": "execute"}

    body_fields = bodies.CHECKPOINT

    async def get(self, session_id: str) -> None:
        made = self.sessions.checkpoints(session_id)
        self.write_json([self.sessions.checkpoint_model(c) for c in made])

    async def post(self, session_id: str) -> None:
        made = await self.sessions.checkpoint(session_id, self.body().get("name"))
        url = url_path_join(self.session_url(session_id), "checkpoints", url_escape(made.name))
        self.set_header("Location", url)
        self.write_json(self.sessions.checkpoint_model(made), status=201)


class RestoreHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/checkpoints/{name}/restore``: back to that checkpoint."""

    actions = {"POST": "execute"}

    async def post(self, session_id: str, name: str) -> None:
        self.body()
        entry = await self.sessions.restore(session_id, name)
        self.write_json(self.sessions.model(entry))


class ApprovalsHandler(ExecAPIHandler):
    """``/api/exec/approvals``: network requests waiting for a person, of every session."""

    actions = {"GET": "read"}

    async def get(self) -> None:
        self.write_json([p.model() for p in self.sessions.approvals.list()])


class SessionApprovalsHandler(ExecAPIHandler):
    """``/api/exec/sessions/{id}/approvals``: the pending approvals of one session."""

    actions = {"GET": "read"}

    async def get(self, session_id: str) -> None:
        self.sessions.get(session_id)
        self.write_json([p.model() for p in self.sessions.approvals.list(session_id)])


class ApprovalHandler(ExecAPIHandler):
    """``/api/exec/approvals/{id}``: allow or deny one (``{"allow": true}``)."""

    actions = {"POST": "execute"}

    body_fields = bodies.ANSWER

    async def post(self, approval_id: str) -> None:
        allow = self.body()["allow"]
        answered = self.sessions.approvals.answer(approval_id, allow)
        self.write_json({**answered.model(), "allow": allow})


class ReplayHandler(ExecAPIHandler):
    """``/api/exec/replay``: re-run a notebook on a fresh kernel, report cell by cell."""

    actions = {"POST": "execute"}

    body_fields = bodies.REPLAY

    async def post(self) -> None:
        body = self.body()
        notebook = body.pop("notebook")
        self.write_json(await self.sessions.replay(notebook, **body))


_ID = r"(?P<session_id>[^/]+)"  # any id: an unknown one gets a JSON 404 from the sessions
_NAME = r"(?P<name>[^/]+)"
_APPROVAL = r"(?P<approval_id>[^/]+)"

default_handlers: list[tuple[str, type[ExecAPIHandler]]] = [
    (r"/api/exec/sessions", SessionsHandler),
    (rf"/api/exec/sessions/{_ID}", SessionHandler),
    (rf"/api/exec/sessions/{_ID}/execute", ExecuteHandler),
    (rf"/api/exec/sessions/{_ID}/execute/stream", ExecuteStreamHandler),
    (rf"/api/exec/sessions/{_ID}/interrupt", InterruptHandler),
    (rf"/api/exec/sessions/{_ID}/restart", RestartHandler),
    (rf"/api/exec/sessions/{_ID}/sleep", SleepHandler),
    (rf"/api/exec/sessions/{_ID}/fork", ForkHandler),
    (rf"/api/exec/sessions/{_ID}/undo", UndoHandler),
    (rf"/api/exec/sessions/{_ID}/checkpoints", CheckpointsHandler),
    (rf"/api/exec/sessions/{_ID}/checkpoints/{_NAME}/restore", RestoreHandler),
    (rf"/api/exec/sessions/{_ID}/approvals", SessionApprovalsHandler),
    (r"/api/exec/replay", ReplayHandler),
    (r"/api/exec/approvals", ApprovalsHandler),
    (rf"/api/exec/approvals/{_APPROVAL}", ApprovalHandler),
]
