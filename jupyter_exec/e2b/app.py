"""The E2B server: one tornado app, every route on every port, over one session manager.

The SDK reaches a sandbox in one of two ways, and both land here:

* **debug mode** (``E2B_DEBUG=true``): code on ``localhost:49999``, envd on
  ``localhost:49983``, sandbox ``debug_sandbox_id``, no API call, no token;
* **API mode**: ``E2B_API_URL`` for the control plane and ``E2B_SANDBOX_URL``
  for all sandbox traffic (one URL; the ``E2b-Sandbox-Id`` header says
  which sandbox, the access token proves the right to it).

Since the paths of the three services do not overlap, each port serves all
of them, and one port is enough in API mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.log import access_log
from tornado.netutil import bind_sockets
from tornado.web import Application, RequestHandler

from jupyter_exec.e2b import api, branches, code, envd, metrics
from jupyter_exec.e2b.auth import (
    API_KEY,
    CODE_BODY,
    FILE_SIGNATURE,
    PUBLIC,
    SANDBOX_TOKEN,
    SMALL_BODY,
    RouteAuth,
)
from jupyter_exec.e2b.limits import CODE_PORT, ENVD_PORT, MAX_SANDBOX_TIMEOUT, MAX_UPLOAD
from jupyter_exec.e2b.sandboxes import Sandboxes, sandbox_options
from jupyter_exec.e2b.unserved import (
    NOT_SERVED,
    UNSERVED_AUTH,
    NotFoundHandler,
    NotServedHandler,
    pattern_of,
    shown,
)
from jupyter_exec.e2b.watch import Watchers
from jupyter_exec.e2b.web import LOOPBACK_NAMES, E2BHandler
from jupyter_exec.exceptions import InvalidArgument
from jupyter_exec.manager import AsyncSessionManager

__all__ = ["CODE_PORT", "ENVD_PORT", "ROUTES", "E2BConfig", "E2BServer", "is_loopback"]

log = logging.getLogger("jupyter_exec.e2b")

REAP_INTERVAL = 5.0
"""Seconds between two looks for sandboxes past their timeout."""

_SANDBOX = r"(?P<sandbox_id>[A-Za-z0-9._-]+)"
_CONTEXT = r"(?P<context_id>[A-Za-z0-9._-]+)"
_TOKEN = frozenset({SANDBOX_TOKEN})
_KEY = frozenset({API_KEY})
_FILES = frozenset({SANDBOX_TOKEN, FILE_SIGNATURE})
_HEALTH = frozenset({PUBLIC, SANDBOX_TOKEN})

ROUTES: tuple[tuple[str, type[E2BHandler], RouteAuth], ...] = (
    (r"/execute", code.ExecuteHandler, RouteAuth(_TOKEN, CODE_BODY)),
    (r"/contexts", code.ContextsHandler, RouteAuth(_TOKEN, SMALL_BODY)),
    (rf"/contexts/{_CONTEXT}", code.ContextHandler, RouteAuth(_TOKEN, SMALL_BODY)),
    (rf"/contexts/{_CONTEXT}/restart", code.ContextRestartHandler, RouteAuth(_TOKEN, SMALL_BODY)),
    (r"/health", envd.HealthHandler, RouteAuth(_HEALTH, 0)),
    (r"/files", envd.FilesHandler, RouteAuth(_FILES, MAX_UPLOAD)),
    (r"/filesystem\.Filesystem/(?P<method>\w+)", envd.FilesystemHandler,
     RouteAuth(_TOKEN, SMALL_BODY)),
    (r"/process\.Process/(?P<method>\w+)", envd.ProcessHandler, RouteAuth(_TOKEN, CODE_BODY)),
    (r"/(?:v2/)?sandboxes", api.SandboxesHandler, RouteAuth(_KEY, SMALL_BODY)),
    (rf"/sandboxes/{_SANDBOX}", api.SandboxHandler, RouteAuth(_KEY, SMALL_BODY)),
    (rf"/sandboxes/{_SANDBOX}/timeout", api.TimeoutHandler, RouteAuth(_KEY, SMALL_BODY)),
    (rf"/(?:v2/)?sandboxes/{_SANDBOX}/connect", api.ConnectHandler, RouteAuth(_KEY, SMALL_BODY)),
    (rf"/sandboxes/{_SANDBOX}/pause", api.PauseHandler, RouteAuth(_KEY, SMALL_BODY)),
    (rf"/sandboxes/{_SANDBOX}/resume", api.ConnectHandler, RouteAuth(_KEY, SMALL_BODY)),
    (rf"/sandboxes/{_SANDBOX}/fork", branches.ForkHandler, RouteAuth(_KEY, SMALL_BODY)),
    (rf"/sandboxes/{_SANDBOX}/snapshots", branches.SnapshotHandler, RouteAuth(_KEY, SMALL_BODY)),
    (r"/snapshots", branches.SnapshotsHandler, RouteAuth(_KEY, 0)),
    (r"/templates/(?P<template_id>[A-Za-z0-9._:-]+)", branches.TemplateHandler,
     RouteAuth(_KEY, 0)),
    (rf"/sandboxes/{_SANDBOX}/metrics", metrics.MetricsHandler, RouteAuth(_KEY, 0)),
)  # fmt: skip
"""Every route, its handler, and what opens it (:mod:`jupyter_exec.e2b.auth`): the one table.
The files route's body limit is the server's :attr:`E2BConfig.max_upload_bytes`."""


def log_request(handler: RequestHandler) -> None:
    """tornado's access log line without the query: a file URL's signature is a credential."""
    status = handler.get_status()
    refused = status < 500 or status == 501  # 501: a route E2B has that is not served here
    level = logging.INFO if status < 400 else logging.WARNING if refused else logging.ERROR
    access_log.log(level, "%d %s %s (%s) %.2fms", status, handler.request.method,
                   handler.request.path, handler.request.remote_ip,
                   1000.0 * handler.request.request_time())  # fmt: skip


def is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class E2BConfig:
    """How the server runs; the command line fills it (``jupyter-exec e2b --help``)."""

    root_dir: Path
    host: str = "127.0.0.1"
    ports: tuple[int, ...] = (CODE_PORT, ENVD_PORT)
    debug: bool = False
    api_key: str | None = None
    session_options: dict[str, Any] = field(default_factory=dict)
    pool_size: int = 0
    zygote: dict[str, Any] = field(default_factory=dict)
    """``AsyncSessionManager`` zygote traits (``zygote_size``, ``zygote_preload``...)."""
    max_sessions: int = 0
    sandbox_timeout: float = 300.0
    max_sandbox_timeout: float = MAX_SANDBOX_TIMEOUT
    """The longest life a client may give a sandbox (create, connect, set_timeout)."""
    execution_timeout: float | None = None
    max_upload_bytes: int = MAX_UPLOAD
    """The largest file upload (``files.write``, ``upload_url``) the server takes."""

    def check(self) -> None:
        if self.debug and not is_loopback(self.host):
            raise InvalidArgument(
                f"refusing debug mode on {self.host}: its sandbox needs no token, so it only "
                "listens on loopback (127.0.0.1, ::1, localhost)"
            )
        if self.api_key is None and not is_loopback(self.host):
            raise InvalidArgument(
                f"refusing to listen on {self.host} without an API key: set E2B_API_KEY"
            )


class E2BServer:
    """The sandboxes, the app that serves them, and its listening sockets."""

    def __init__(self, config: E2BConfig) -> None:
        config.check()
        self.config = config
        self.api_key = config.api_key
        self.execution_timeout = config.execution_timeout
        self.allowed_hosts = LOOPBACK_NAMES if is_loopback(config.host) else None
        kernel_options = sandbox_options(config.session_options)
        self.manager = AsyncSessionManager(
            root_dir=str(config.root_dir),
            pool_size=config.pool_size,
            max_sessions=config.max_sessions,
            **config.zygote,
            session_defaults={"timeout": None, **kernel_options},
        )
        self.sandboxes = Sandboxes(
            self.manager,
            api_key=config.api_key,
            debug=config.debug,
            session_options=kernel_options,
            default_timeout=config.sandbox_timeout,
            max_timeout=config.max_sandbox_timeout,
        )
        self.watchers = Watchers()
        """The folder watchers clients made (``files.watch_dir``, :mod:`jupyter_exec.e2b.watch`)."""
        self._servers: list[HTTPServer] = []
        self._reaper: asyncio.Task[None] | None = None
        self.ports: list[int] = []

    def make_app(self) -> Application:
        """The app: every route of :data:`ROUTES`, each with the credentials it declares."""
        upload = self.config.max_upload_bytes
        handlers: list[Any] = []
        for pattern, handler, auth in ROUTES:
            if handler is envd.FilesHandler:
                auth = RouteAuth(auth.opens_with, upload)
            handlers.append((pattern, handler, {"auth": auth}))
        for written, _ in NOT_SERVED:  # after ROUTES: a route served wins
            handlers.append((pattern_of(written), NotServedHandler, {"auth": UNSERVED_AUTH}))
        return Application(
            handlers,
            e2b_server=self,
            xsrf_cookies=False,
            log_function=log_request,
            default_handler_class=NotFoundHandler,
            default_handler_args={"auth": UNSERVED_AUTH},
        )

    @staticmethod
    def routes_served() -> list[str]:
        """Every route served, as a person reads it (what a 404 lists)."""
        return [shown(pattern) for pattern, _, _ in ROUTES]

    async def start(self) -> E2BServer:
        """Listen on every port (0: a free one, see :attr:`ports`), then start the engine.

        The ports are bound first, so a taken one is told at once, in one line
        naming it and the option that moves it, before any kernel starts.
        """
        bound: list[list[socket.socket]] = []
        try:
            for index, port in enumerate(self.config.ports):
                bound.append(self._bind(index, port))
            await self.manager.start()
            self.sandboxes.load()  # the sandboxes from before a restart (no kernel yet)
        except BaseException:
            for sock in (s for sockets in bound for s in sockets):
                sock.close()
            raise
        app = self.make_app()
        for sockets in bound:
            # The ceiling before a route has decided; each route sets its own after the
            # credential (jupyter_exec.e2b.web), so no body is read before that.
            server = HTTPServer(app, max_body_size=SMALL_BODY, idle_connection_timeout=3600)
            server.add_sockets(sockets)
            self._servers.append(server)
            self.ports.append(sockets[0].getsockname()[1])
        self._reaper = asyncio.create_task(self._reap_loop(), name="jupyter-exec e2b reaper")
        log.info("E2B server on %s ports %s; sandboxes in %s", self.config.host, self.ports,
                 self.manager.root)  # fmt: skip
        return self

    def _bind(self, index: int, port: int) -> list[socket.socket]:
        """The listening sockets of ``port``; a port that cannot be had is InvalidArgument."""
        host = self.config.host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            return bind_sockets(port, host, family=family)
        except OSError as exc:
            flag = "--port" if index == 0 else "--envd-port"
            why = "is taken by another program" if exc.errno == errno.EADDRINUSE else (
                f"cannot be listened on ({exc.strerror or exc})")  # fmt: skip
            raise InvalidArgument(
                f"port {port} on {host} {why}: choose another with {flag} N (0: any free port)"
            ) from None

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL)
            try:
                await self.sandboxes.reap()
            except Exception:
                log.exception("ending sandboxes past their timeout failed")

    async def stop(self) -> None:
        """Stop listening, kill every sandbox, stop the engine."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for server in self._servers:
            server.stop()
        await asyncio.gather(*(s.close_all_connections() for s in self._servers))
        self._servers.clear()
        await self.watchers.close()
        await self.sandboxes.close_all()
        await self.manager.shutdown()

    async def __aenter__(self) -> E2BServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
