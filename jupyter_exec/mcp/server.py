"""The MCP server: named, stateful Jupyter sessions as tools (``jupyter-exec mcp`` runs it).

Built on the official ``mcp`` Python SDK (its ``MCPServer``, called ``FastMCP``
before mcp 2; both are supported). Transports: stdio (what desktop clients
launch) and streamable HTTP. Whoever reaches the HTTP server runs code as
this user, so it binds to loopback only, every request must carry the
server's bearer token (:class:`BearerAuth`; other users and processes of the
machine reach loopback too), and a request whose Host or Origin header is not
a loopback name is refused (a web page's DNS-rebinding attempt). The command
line (:mod:`jupyter_exec.cli.mcp`) closes every session on any exit, signals
included.

Tools::

    execute_code(code, session="default", language="python", timeout, backend)
                         run code in a named session, created on first use
    list_sessions()      the sessions, with work dir, notebook and state
    restart_session(session) / interrupt_session(session) / close_session(session)
    read_notebook(session)   the session's notebook as readable text
    list_files(session, path=".") / read_file(session, path)
                         the session's work dir (paths confined to it)
    fork_session(session, n=1, name) / undo(session, n=1) / checkpoint(session, name)
    restore_checkpoint(session, checkpoint) / list_checkpoints(session)
                         a session's state: branches, undo, named checkpoints
                         (:mod:`jupyter_exec.mcp.state`)

Code runs through the agent runner (:mod:`jupyter_exec.agents.agent`), as for every
agent front end: its text, images a cell displayed or saved as MCP image
content, and ``isError`` set when the code failed. Each
session has its own work dir ``<root>/<session>`` holding its files and its
notebook. The sessions are held by an
:class:`~jupyter_exec.manager.AsyncSessionManager` rooted at the work dir, which
brings ``--max-sessions``, ``--cull-idle`` and a warm pool (``--pool-size``)
of kernels of the server's environment. With a network policy (a
:class:`~jupyter_exec.engine.environments.DockerEnv` whose ``network`` is a
:class:`~jupyter_exec.NetworkPolicy`), every session is a Docker kernel that
reaches only the hosts the policy allows, and the text of a cell that tried
another says so (the agent runner lists the denied connections). With
``--ask-person`` the hosts the policy leaves undecided are put to the person at
the client, as MCP elicitations (:mod:`jupyter_exec.mcp.ask`).

This module is the server's face and its transports (who may reach it, and
how); the parts it is built from live beside it, one concern each: the
sessions in :mod:`jupyter_exec.mcp.sessions`, the tools in
:mod:`jupyter_exec.mcp.tools` (and :mod:`jupyter_exec.mcp.state`).
:class:`SessionRegistry` and :func:`build_server` are importable from here too.
"""

from __future__ import annotations

import contextlib
import hmac
import importlib
import ipaddress
import json
import os
import secrets
import socket
import sys
from typing import Any

from jupyter_exec.agents.llm import DEFAULT_LLM_CHARS
from jupyter_exec.boundary import ports
from jupyter_exec.exceptions import InvalidArgument
from jupyter_exec.mcp.sessions import SessionRegistry
from jupyter_exec.mcp.tools import _sdk, build_server

__all__ = ["ROUTES", "TOKEN_ENV", "SessionRegistry", "build_server", "http_app", "serve"]

DEFAULT_PORT = 8765
TOKEN_ENV = "JUPYTER_EXEC_MCP_TOKEN"
"""Environment variable holding the HTTP transport's token (else one is made and printed)."""


# -- transports -------------------------------------------------------------------------------


def _check_loopback(host: str) -> None:
    """Refuse to listen beyond this machine: the tools run arbitrary code."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InvalidArgument(
            f"refusing to listen on {host}: the MCP server runs code for whoever connects, "
            "so it only binds to loopback (127.0.0.1, ::1, localhost)"
        )


def _loopback_names(host: str) -> list[str]:
    """The Host header values a request to ``host`` may carry (any port)."""
    names = {host, "127.0.0.1", "localhost", "[::1]"}
    return sorted(f"[{n}]" if ":" in n and not n.startswith("[") else n for n in names)


def transport_security(host: str) -> Any:
    """The SDK's DNS-rebinding guard, on for every loopback address we may bind.

    A web page the user visits can make their browser send requests to
    localhost; its Host header then names the attacker's domain and its Origin
    the attacker's site, so both are checked against loopback names.
    """
    security = importlib.import_module("mcp.server.transport_security")
    names = _loopback_names(host)
    return security.TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{n}:*" for n in names],
        allowed_origins=[f"http://{n}:*" for n in names],
    )


MCP_PATH = "/mcp"
MAX_BODY = 8 << 20
"""Largest request body (one JSON-RPC message: a cell's code, an elicitation's answer): 8 MiB."""

ROUTES: dict[str, tuple[str, int]] = {MCP_PATH: ("bearer_token", MAX_BODY)}
"""Every path the HTTP transport serves, the credential that opens it, and its body limit.
:class:`BearerAuth` decides from this table, before the app (or any body) is reached."""


class BearerAuth:
    """ASGI middleware: the one gate of the HTTP transport, before the SDK's app.

    Every request must carry ``Authorization: Bearer <token>`` (binding to
    loopback keeps other machines out, not other users and processes of this
    one; the token does; compared in constant time), name a path of
    :data:`ROUTES` (any other is 404), and send no more body than the route
    takes: a declared ``Content-Length`` over it is refused (413) unread, and
    a longer streamed body is cut off at the limit. Nothing is read before the
    token is checked.
    """

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode() if token is not None else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if self._expected is not None and not hmac.compare_digest(
            headers.get(b"authorization", b""), self._expected
        ):
            why = (
                f"send the header Authorization: Bearer <token> (printed at start, or ${TOKEN_ENV})"
            )
            await _discard(receive, headers)
            await _refuse(send, 401, f"unauthorized: {why}")
            return
        route = ROUTES.get(str(scope.get("path", "")).rstrip("/") or "/")
        if route is None:
            await _discard(receive, headers)
            await _refuse(send, 404, f"no such route; the MCP endpoint is {MCP_PATH}")
            return
        limit = route[1]
        declared = headers.get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > limit:
            await _refuse(send, 413, f"the request body is larger than {limit:,} bytes")
            return
        await self.app(scope, _bounded(receive, limit), send)


DISCARD = 64 << 10
"""A refused request's body, when it declares no more than this, is read and dropped (never
kept) so that the connection closes cleanly and the client reads the refusal; a longer one is
not read at all: the connection closes under it."""


async def _discard(receive: Any, headers: dict[bytes, bytes]) -> None:
    declared = headers.get(b"content-length", b"")
    if not declared.isdigit() or int(declared) > DISCARD:
        return
    seen = 0
    while seen <= DISCARD:
        message = await receive()
        if message.get("type") != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body"):
            return


def _bounded(receive: Any, limit: int) -> Any:
    """``receive`` that ends the request as a disconnect once its body passes ``limit``."""
    seen = 0

    async def bounded() -> Any:
        nonlocal seen
        message = await receive()
        if message.get("type") == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                return {"type": "http.disconnect"}
        return message

    return bounded


async def _refuse(send: Any, status: int, message: str) -> None:
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="jupyter-exec"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.body", "body": body})


def http_app(server: Any, *, host: str, token: str | None) -> Any:
    """The streamable-HTTP ASGI app behind :class:`BearerAuth` (token None: ``--no-token``)."""
    security = transport_security(host)
    if _sdk().v2:
        app = server.streamable_http_app(host=host, transport_security=security)
    else:
        server.settings.transport_security = security
        app = server.streamable_http_app()
    return BearerAuth(app, token)


def new_token() -> str:
    """A token for the HTTP transport: from ``$JUPYTER_EXEC_MCP_TOKEN``, else a fresh one."""
    return os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)


async def serve(
    registry: SessionRegistry,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    max_output_chars: int = DEFAULT_LLM_CHARS,
    token: str | None = None,
) -> None:
    """Serve until the client goes away (stdio) or the task is cancelled (HTTP).

    Closing the sessions is the caller's: the command line runs
    ``registry.close_all()`` on every exit path, signals included.
    """
    server = build_server(registry, max_output_chars=max_output_chars)
    if transport == "stdio":
        await registry.start()
        await server.run_stdio_async()
        return
    _check_loopback(host)
    listener = bind(host, port)  # first: a taken port is told before any kernel starts
    import uvicorn

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Any:  # the command line owns the process's signals
            yield

    try:
        await registry.start()
    except BaseException:
        listener.close()
        raise
    app = http_app(server, host=host, token=token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    print(
        f"[jupyter-exec] MCP server on http://{host}:{port}/mcp (streamable HTTP)",
        file=sys.stderr,
        flush=True,
    )
    with listener:
        await _Server(config).serve(sockets=[listener])


def bind(host: str, port: int) -> socket.socket:
    """The HTTP transport's listening socket; a port that cannot be had is InvalidArgument.

    Bound here rather than by uvicorn, which logs a taken port and exits the
    process: the command line says it in one line, naming the port and ``--port``.
    """
    try:
        return ports.listen(host, port)
    except ports.PortUnavailable as exc:
        why = "is taken by another program" if exc.taken else (
            f"cannot be listened on ({exc.reason})")  # fmt: skip
        raise InvalidArgument(
            f"port {port} on {host} {why}: choose another with --port N"
        ) from None
