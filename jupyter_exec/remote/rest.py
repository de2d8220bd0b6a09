"""The Jupyter REST API of a server or gateway, with its failures translated once, here.

Every call a remote kernel needs (``/api/kernelspecs``, ``/api/kernels``,
``/api/contents``) goes through :meth:`RestClient.request`, and the kernel
websocket's handshake through :meth:`RestClient.refusal`; tornado's errors
become :class:`~jupyter_exec.BackendError` with a message that says what to
check (the URL, the token), so no caller handles a tornado exception. A
server that refuses with a reason (a gateway's policy, a quota) is a
:class:`ServerRefused` carrying that reason and the status, verbatim.
"""

from __future__ import annotations

import json
import socket
import ssl
from http.client import responses
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from jupyter_exec.exceptions import BackendError, ServerRefused
from jupyter_exec.exceptions import RemoteNotFound as NotFound

__all__ = ["NotFound", "RestClient", "ServerRefused", "server_reason", "url_join"]


def url_join(base: str, *parts: str) -> str:
    """``base`` with URL-quoted path ``parts`` appended (keeps a base path like ``/jupyter``)."""
    path = "/".join(quote(p.strip("/"), safe="/") for p in parts if p)
    return base.rstrip("/") + "/" + path


class RestClient:
    """Authenticated JSON requests against one server.

    ``token`` goes in an ``Authorization: token ...`` header, which Jupyter
    Server, Kernel Gateway and Enterprise Gateway all accept (and which exempts
    the request from jupyter_server's XSRF check).
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        headers: dict[str, str] | None = None,
        validate_cert: bool = True,
        request_timeout: float = 30.0,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"remote url must be http(s)://host[:port][/base], not {url!r}")
        self.base_url = urlunsplit((parts.scheme, parts.netloc, parts.path or "/", "", ""))
        self.headers = dict(headers or {})
        if token:
            self.headers["Authorization"] = f"token {token}"
        self.validate_cert = validate_cert
        self.request_timeout = request_timeout
        self._http = AsyncHTTPClient()

    @property
    def ws_base_url(self) -> str:
        """The base URL with ``ws``/``wss`` in place of ``http``/``https``."""
        return "ws" + self.base_url[len("http") :]

    def describe(self) -> str:
        return self.base_url.rstrip("/")

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        query: str = "",
    ) -> Any:
        """The decoded JSON answer of ``method path`` (``None`` for an empty body).

        Raises :class:`NotFound` on 404 and :class:`BackendError` on any other
        failure: unreachable server, rejected token, server error.
        """
        url = url_join(self.base_url, path) + (f"?{query}" if query else "")
        request = HTTPRequest(
            url,
            method=method,
            headers={**self.headers, "Content-Type": "application/json"},
            body=None if body is None and method != "POST" else json.dumps(body or {}),
            request_timeout=timeout or self.request_timeout,
            connect_timeout=min(10.0, timeout or self.request_timeout),
            validate_cert=self.validate_cert,
        )
        try:
            response = await self._http.fetch(request)
        except HTTPClientError as exc:
            raise self._http_error(method, path, exc) from None
        except (OSError, ssl.SSLError, socket.gaierror) as exc:
            raise BackendError(
                f"cannot reach the Jupyter server at {self.describe()}: {exc}"
                " (is it running, and is the URL right?)"
            ) from exc
        if not response.body:
            return None
        try:
            return json.loads(response.body)
        except json.JSONDecodeError as exc:
            raise BackendError(
                f"{method} {url} answered something that is not JSON: is {self.describe()} "
                "a Jupyter server?"
            ) from exc

    def _http_error(self, method: str, path: str, exc: HTTPClientError) -> BackendError:
        return self.refusal(f"{method} {self.describe()}/{path.lstrip('/')}", exc)

    def refusal(self, where: str, exc: HTTPClientError) -> BackendError:
        """Our error for the server's HTTP error ``exc`` to the request ``where``.

        The server's own reason (:func:`server_reason`) is kept verbatim on
        :class:`ServerRefused`; the hint about the token is given only when the
        refusal is about authentication: a 401, or a 403 that gives no reason
        (a 403 with a reason, such as Enterprise Gateway's "User 'root' is not
        authorized to start kernel ... set KERNEL_USERNAME", is about something else).
        """
        code = exc.code
        if code == 599:
            return BackendError(
                f"cannot reach the Jupyter server at {self.describe()}: {exc.message}"
            )
        reason = server_reason(exc)
        if code == 404:
            return NotFound(f"{where}: not found" + (f": {reason}" if reason else ""))
        if code == 401 or (code == 403 and not reason):
            return ServerRefused(
                f"{where}: the server refused (HTTP {code}"
                + (f": {reason}" if reason else "")
                + "): pass its token with token=... (or check the one given)",
                code,
                reason,
            )
        return ServerRefused(
            f"{where}: the server refused (HTTP {code})" + (f": {reason}" if reason else ""),
            code,
            reason,
        )


def server_reason(exc: HTTPClientError) -> str:
    """The server's own explanation of an HTTP error, or ``""`` when it gives none.

    Jupyter servers answer ``{"message": ..., "reason": ...}``; Enterprise
    Gateway puts its explanation in ``reason`` (also sent as the status line's
    reason phrase) and leaves ``message`` at the generic "Forbidden". Generic
    phrases ("Forbidden", "Internal Server Error") are no explanation, so they
    are skipped in favour of the next candidate.
    """
    generic = {responses.get(exc.code, "").lower(), "", "unknown http error", "unhandled error"}
    response = exc.response
    candidates: list[object] = []
    if response is not None and response.body:
        try:
            data = json.loads(response.body)
        except (ValueError, UnicodeDecodeError):
            data = None
        if isinstance(data, dict):
            candidates += [data.get("reason"), data.get("message")]
    if response is not None:
        candidates.append(response.reason)
    for candidate in candidates:
        if isinstance(candidate, str) and candidate.strip().lower() not in generic:
            return candidate.strip()
    return ""
