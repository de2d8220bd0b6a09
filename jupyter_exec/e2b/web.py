"""The handlers' base: who may ask (Host, Origin, the route's credential), then the body.

Every request passes these steps, in this order, before a handler method runs:

* **Host and Origin.** Bound to loopback, the server answers only requests
  whose ``Host`` names this machine, and refuses any ``Origin`` that is not
  a loopback page: a web page the user visits cannot reach it through DNS
  rebinding or a cross-site ``fetch``. The SDK sends no ``Origin``.
* **The route's credential.** Each route of :data:`jupyter_exec.e2b.app.ROUTES`
  declares what opens it (:class:`~jupyter_exec.e2b.auth.RouteAuth`), and
  :func:`jupyter_exec.e2b.auth.decide` decides, once, from the headers and
  the query alone: the API needs the server's key, a sandbox's routes its
  own access token, and only the files route takes a file URL's signature,
  for its one path and operation. The :class:`~jupyter_exec.e2b.auth.Grant`
  is :attr:`E2BHandler.grant`; :meth:`E2BHandler.sandbox` is its sandbox.
* **A route that answers from the headers alone** (a path this server does
  not serve: 404, or E2B's route for a feature it does not serve yet: 501,
  :mod:`jupyter_exec.e2b.unserved`) answers now, once the credential is
  checked; its body is never read, and a body sent with it closes the connection.
* **The body**, read only now (``@stream_request_body``: tornado hands the
  body to :meth:`data_received` after ``prepare()``), and no larger than the
  route's limit: a declared ``Content-Length`` over it is refused (413)
  before a byte is read, a longer body closes the connection. A refused
  request's body is never read into memory.

Subclasses cannot change these steps: :meth:`E2BHandler.__init_subclass__`
refuses a handler that overrides ``prepare``, ``initialize`` or
``data_received``. Handlers raise our exceptions; :meth:`E2BHandler.write_error`
turns each into a status and body through :mod:`jupyter_exec.e2b.errors`, once.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tornado import httputil
from tornado.http1connection import HTTP1Connection
from tornado.web import HTTPError, RequestHandler, stream_request_body

from jupyter_exec.e2b.auth import Grant, Request, RouteAuth, decide, file_signature
from jupyter_exec.e2b.errors import (
    EXPECTED,
    Unauthorized,
    api_body,
    connect_code,
    error_message,
    status_of,
)
from jupyter_exec.e2b.fields import loads
from jupyter_exec.e2b.sandboxes import Sandbox
from jupyter_exec.exceptions import InvalidArgument

if TYPE_CHECKING:
    from jupyter_exec.e2b.app import E2BServer

__all__ = ["LOOPBACK_NAMES", "E2BHandler", "file_signature"]

log = logging.getLogger("jupyter_exec.e2b")

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})

SEALED = ("prepare", "initialize", "data_received")
"""The steps every request takes: a handler overriding one of them could skip the credential."""


def _hostname(value: str) -> str:
    """The host of a ``Host`` header or an origin, without port or brackets, lowercase."""
    netloc = urlsplit(value).netloc if "://" in value else value
    host = netloc.rsplit("@", 1)[-1]
    if host.startswith("["):
        return host[1 : host.find("]")].lower()
    return host.split(":", 1)[0].lower()


@stream_request_body
class E2BHandler(RequestHandler):
    """Checks Host and Origin and the route's credential, then takes the body, bounded."""

    error_style = "plain"  # "plain" {"code": 404, "message"}, or "connect" {"code": "not_found"}
    grant: Grant | None = None
    """What opened this request (set by :meth:`prepare`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        overridden = [name for name in SEALED if name in vars(cls)]
        if overridden:
            raise TypeError(
                f"{cls.__name__} overrides {overridden}: every E2B request is authenticated "
                "there, from the route table (jupyter_exec.e2b.app.ROUTES)"
            )

    def initialize(self, auth: RouteAuth) -> None:
        self.auth = auth
        self._chunks: list[bytes] = []
        self._body: bytes | None = None
        self._admitted = False

    @property
    def server(self) -> E2BServer:
        return self.settings["e2b_server"]  # type: ignore[no-any-return]

    def check_xsrf_cookie(self) -> None:
        """Token-authenticated JSON API: no cookies, so no XSRF."""

    def prepare(self) -> None:
        allowed = self.server.allowed_hosts
        host = _hostname(self.request.host or "")
        if allowed is not None and host not in allowed:
            raise HTTPError(403, f"Host {host!r} is not served here (DNS rebinding?)")
        origin = self.request.headers.get("Origin")
        if origin is not None and _hostname(origin) not in (allowed or LOOPBACK_NAMES):
            raise HTTPError(403, f"requests from web pages at {origin!r} are refused")
        self.grant = decide(self.auth.opens_with, self._as_request(), self.server.sandboxes,
                            self.server.api_key)  # fmt: skip
        refusal = self.refusal()
        if refusal is not None:  # answered from the headers: the connection takes no body
            self._cap_body(0)
            raise refusal
        self._bound_body()
        self._admitted = True

    def refusal(self) -> Exception | None:
        """What a route that answers every request from its headers alone raises (404, 501)."""
        return None

    def _as_request(self) -> Request:
        return Request(
            self.request.method or "",
            self.request.headers.get,
            lambda name: self.get_query_argument(name, ""),
        )

    def _cap_body(self, limit: int) -> None:
        """Let the connection read at most ``limit`` bytes of the body: it closes past them."""
        connection = self.request.connection
        if isinstance(connection, HTTP1Connection):
            connection.set_max_body_size(limit)

    def _bound_body(self) -> None:
        """Let the connection read at most the route's limit; refuse a longer declared body."""
        limit = self.max_body()
        self._cap_body(limit)
        declared = self.request.headers.get("Content-Length", "0")
        if not declared.isdigit():
            raise InvalidArgument(f"Content-Length must be a number of bytes, not {declared!r}")
        if int(declared) > limit:
            raise HTTPError(
                413, f"the request body is larger than this route takes ({limit:,} bytes)"
            )

    def max_body(self) -> int:
        """The route's body limit (the files route's is the server's upload limit)."""
        return self.auth.max_body

    def data_received(self, chunk: bytes) -> None:
        """Keep the body of an admitted request (the connection stops it at the limit)."""
        if not self._finished:  # a refused request's body is dropped as it arrives
            self._chunks.append(chunk)

    def body(self) -> bytes:
        """The whole request body (read after the credential was checked, within the limit)."""
        if self._body is None:
            self._body = b"".join(self._chunks)
            self._chunks.clear()
        return self._body

    def uploaded(self, field: str) -> list[httputil.HTTPFile]:
        """The parts named ``field`` of a multipart body."""
        files: dict[str, list[httputil.HTTPFile]] = {}
        arguments: dict[str, list[bytes]] = {}
        try:
            httputil.parse_body_arguments(
                self.request.headers.get("Content-Type", ""), self.body(), arguments, files,
                self.request.headers,
            )  # fmt: skip
        except httputil.HTTPInputError as exc:
            raise InvalidArgument(f"the multipart upload cannot be read: {exc}") from None
        return files.get(field, [])

    # -- who is asking ----------------------------------------------------------------------

    def sandbox(self) -> Sandbox:
        """The sandbox the request's credential opened."""
        sandbox = self.grant.sandbox if self.grant is not None else None
        if sandbox is None:
            raise Unauthorized(
                "send the E2b-Sandbox-Id header and the sandbox's access token (X-Access-Token)"
            )
        return sandbox

    def json_body(self) -> dict[str, Any]:
        body = loads(self.body() or b"{}")
        if not isinstance(body, dict):
            raise InvalidArgument("the request body must be a JSON object")
        return body

    def send_json(self, value: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(value))

    # -- errors -----------------------------------------------------------------------------

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        exc = exc_info[1] if exc_info else HTTPError(status_code)
        status = status_of(exc)
        if status >= 500 and not isinstance(exc, EXPECTED):
            log.error("E2B request %s %s failed", self.request.method, self.request.path,
                      exc_info=exc_info)  # fmt: skip
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        if not self._admitted:  # refused before its body was read: tornado closes, say so
            self.set_header("Connection", "close")
        if self.error_style == "connect":
            body: dict[str, Any] = {"code": connect_code(status), "message": error_message(exc)}
        else:
            body = api_body(status, exc)
        self.finish(json.dumps(body))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """Expected refusals are answered, not logged as server errors (write_error logs bugs)."""
        if value is not None and status_of(value) >= 500 and not isinstance(value, EXPECTED):
            return  # write_error logs it with its traceback
        log.info("E2B %s %s: %s", self.request.method, self.request.path, value)
