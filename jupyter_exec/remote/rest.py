"""The Jupyter REST API of a server or gateway, with its failures translated once, here.

Every call a remote kernel needs (``/api/kernelspecs``, ``/api/kernels``,
``/api/contents``) goes through :meth:`RestClient.request`; tornado's errors
become :class:`~jupyter_exec.BackendError` with a message that says what to
check (the URL, the token), so no caller handles a tornado exception.
"""

from __future__ import annotations

import json
import socket
import ssl
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from jupyter_exec.exceptions import BackendError, ServerRefused
from jupyter_exec.exceptions import RemoteNotFound as NotFound

__all__ = ["NotFound", "RestClient", "ServerRefused", "url_join"]


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
        code = exc.code
        detail = _server_message(exc)
        where = f"{method} {self.describe()}/{path.lstrip('/')}"
        if code == 599:
            return BackendError(
                f"cannot reach the Jupyter server at {self.describe()}: {exc.message}"
            )
        if code in (401, 403):
            return BackendError(
                f"the Jupyter server at {self.describe()} refused the request ({code}): "
                "pass its token with token=... (or check the one given)"
            )
        if code == 404:
            return NotFound(f"{where}: not found{detail}")
        return ServerRefused(f"{where} failed with HTTP {code}{detail}")


def _server_message(exc: HTTPClientError) -> str:
    """The server's own explanation from an error body (``{"message": ...}``), if any."""
    body = exc.response.body if exc.response is not None else b""
    try:
        data = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return ""
    message = data.get("message") or data.get("reason") if isinstance(data, dict) else None
    return f": {message}" if message else ""
