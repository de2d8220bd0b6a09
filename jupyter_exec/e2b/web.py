"""The handlers' base: who may ask (Host, Origin, tokens), which sandbox, and errors once.

Every request passes three checks before a handler runs:

* **Host and Origin.** Bound to loopback, the server answers only requests
  whose ``Host`` names this machine, and refuses any ``Origin`` that is not
  a loopback page: a web page the user visits cannot reach it through DNS
  rebinding or a cross-site ``fetch``. The SDK sends no ``Origin``.
* **Tokens.** The API (create, list, connect, kill) needs ``X-API-KEY``, the
  server's key (the SDK sends ``E2B_API_KEY``). A sandbox's endpoints need its
  own access token, which the create call returned and the SDK sends as
  ``X-Access-Token`` (envd) or ``E2B-Traffic-Access-Token`` (code); a token
  opens its own sandbox only, so no sandbox serves another's files. Download
  and upload URLs carry a signature made from that token instead. The
  debug-mode sandbox has no token: it exists only in debug mode, which only
  listens on loopback.
* **The sandbox.** ``E2b-Sandbox-Id`` names it (the SDK always sends it);
  one that does not exist answers 502 "was not found", as E2B's proxy does.

Handlers raise our exceptions; :meth:`E2BHandler.write_error` turns each
into a status and body through :mod:`jupyter_exec.e2b.errors`, once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tornado.web import HTTPError, RequestHandler

from jupyter_exec.e2b.errors import (
    SandboxGone,
    Unauthorized,
    api_body,
    connect_code,
    error_message,
    status_of,
)
from jupyter_exec.e2b.sandboxes import Sandbox
from jupyter_exec.exceptions import InvalidArgument, SessionNotFound

if TYPE_CHECKING:
    from jupyter_exec.e2b.app import E2BServer

__all__ = ["LOOPBACK_NAMES", "E2BHandler", "file_signature"]

log = logging.getLogger("jupyter_exec.e2b")

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def _hostname(value: str) -> str:
    """The host of a ``Host`` header or an origin, without port or brackets, lowercase."""
    netloc = urlsplit(value).netloc if "://" in value else value
    host = netloc.rsplit("@", 1)[-1]
    if host.startswith("["):
        return host[1 : host.find("]")].lower()
    return host.split(":", 1)[0].lower()


def file_signature(path: str, operation: str, user: str, token: str, expiration: str) -> str:
    """The signature of a file URL, as the SDK makes it from the sandbox's token."""
    raw = f"{path}:{operation}:{user}:{token}" + (f":{expiration}" if expiration else "")
    digest = hashlib.sha256(raw.encode()).digest()
    return "v1_" + base64.b64encode(digest).rstrip(b"=").decode("ascii")


class E2BHandler(RequestHandler):
    """Checks Host and Origin, finds the sandbox, and answers errors in the SDK's terms."""

    error_style = "plain"  # "plain" {"code": 404, "message"}, or "connect" {"code": "not_found"}

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

    # -- who is asking ----------------------------------------------------------------------

    def require_api_key(self) -> None:
        given = self.request.headers.get("X-API-KEY", "")
        key = self.server.api_key
        if key is None:
            return
        if not hmac.compare_digest(given.encode(), key.encode()):
            raise Unauthorized(
                "send the server's API key: set E2B_API_KEY to the key `jupyter-exec e2b` printed"
            )

    def sandbox(self, sandbox_id: str | None = None) -> Sandbox:
        """The sandbox this request is for, if its token (or signature) opens it."""
        sandbox_id = sandbox_id or self.request.headers.get("E2b-Sandbox-Id")
        if not sandbox_id:
            signed = self._signed_sandbox()
            if signed is not None:
                return signed
            if self.server.sandboxes.debug:
                sandbox_id = "debug_sandbox_id"
            else:
                raise InvalidArgument("say which sandbox: send the E2b-Sandbox-Id header")
        try:
            sandbox = self.server.sandboxes.get(sandbox_id)
        except SessionNotFound as exc:
            raise SandboxGone(str(exc)) from None
        headers = self.request.headers
        for token in (headers.get("X-Access-Token"), headers.get("E2B-Traffic-Access-Token")):
            if sandbox.allows(token):
                return sandbox
        if self._signature_opens(sandbox):
            return sandbox
        raise Unauthorized(f"this request does not carry sandbox {sandbox_id!r}'s access token")

    def _signature_opens(self, sandbox: Sandbox) -> bool:
        signature = self.get_query_argument("signature", "")
        if not signature or sandbox.token is None:
            return False
        expiration = self.get_query_argument("signature_expiration", "")
        if expiration and (not expiration.isdigit() or int(expiration) < time.time()):
            return False
        operation = "read" if self.request.method == "GET" else "write"
        expected = file_signature(
            self.get_query_argument("path", ""),
            operation,
            self.get_query_argument("username", ""),
            sandbox.token,
            expiration,
        )
        return hmac.compare_digest(signature.encode(), expected.encode())

    def _signed_sandbox(self) -> Sandbox | None:
        if not self.get_query_argument("signature", ""):
            return None
        for sandbox in self.server.sandboxes.every():
            if self._signature_opens(sandbox):
                return sandbox
        raise Unauthorized("the file URL's signature is wrong or has expired")

    def json_body(self) -> dict[str, Any]:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError as exc:
            raise InvalidArgument(f"the request body is not JSON: {exc}") from None
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
        if status >= 500 and not isinstance(exc, SandboxGone):
            log.error("E2B request %s %s failed", self.request.method, self.request.path,
                      exc_info=exc_info)  # fmt: skip
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        if self.error_style == "connect":
            body: dict[str, Any] = {"code": connect_code(status), "message": error_message(exc)}
        else:
            body = api_body(status, exc)
        self.finish(json.dumps(body))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """Expected refusals are answered, not logged as server errors (write_error logs bugs)."""
        if value is not None and status_of(value) >= 500 and not isinstance(value, SandboxGone):
            return  # write_error logs it with its traceback
        log.info("E2B %s %s: %s", self.request.method, self.request.path, value)
