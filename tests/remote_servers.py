"""Real Jupyter servers for the remote-backend tests: jupyter_server and Kernel Gateway.

Each is a subprocess on 127.0.0.1 with a random token, its own root dir and
its own Jupyter config/runtime dirs (so nothing from the machine's setup leaks
in), every server extension switched off (they only slow the start). A
:class:`Proxy` can sit in front of a server to cut its TCP connections the way
a network failure would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.cli_helpers import stop_process
from tests.ports import free_port

_DISABLE_EXTENSIONS = """
import glob, json, os, sys
names = set()
for folder in [os.path.join(p, "jupyter_server_config.d") for p in
               [os.path.join(sys.prefix, "etc", "jupyter"), "/usr/local/etc/jupyter",
                "/etc/jupyter"]]:
    for f in glob.glob(os.path.join(folder, "*.json")):
        with open(f) as fh:
            names.update(json.load(fh).get("ServerApp", {}).get("jpserver_extensions", {}))
names.add("jupyter_exec")
c.ServerApp.jpserver_extensions = {n: False for n in names}
"""


AWKWARD_WEBSOCKETS = """
import asyncio
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection

class AwkwardConnection(ZMQChannelsWebsocketConnection):
    # A kernel websocket that is slow to start reading, as on a loaded machine: every
    # websocket of a kernel after its first keeps its handler's open() (so tornado reads
    # none of its frames) until another websocket of the same client session replaced it,
    # or HOLD seconds passed. A frame this handler then reads in a framing other than
    # the one its handshake chose is reported (FRAMING MIXED) and dropped: decoded, a
    # v1 frame taken for a legacy one stalls the server for minutes.
    opened = {}

    def connect(self):
        inner = super().connect()
        self.framing = self.subprotocol
        count = AwkwardConnection.opened[self.kernel_id] = (
            AwkwardConnection.opened.get(self.kernel_id, 0) + 1
        )
        if count == 1:
            return inner

        async def hold():
            if inner is not None:
                await inner
            loop = asyncio.get_running_loop()
            until = loop.time() + HOLD
            while loop.time() < until and (
                self._open_sessions.get(self.session_key) is self.websocket_handler
            ):
                await asyncio.sleep(0.05)

        return asyncio.ensure_future(hold())

    def handle_incoming_message(self, incoming_msg):
        if self.subprotocol != getattr(self, "framing", self.subprotocol):
            self.log.error(
                "FRAMING MIXED: a frame of %s read as %r, its websocket chose %r",
                self.session_key, self.subprotocol, self.framing,
            )
            return
        super().handle_incoming_message(incoming_msg)

c.ServerApp.kernel_websocket_connection_class = AwkwardConnection
"""
"""Server config (``run_server(..., config=AWKWARD_WEBSOCKETS.replace("HOLD", "8"))``): a
jupyter_server whose kernel websockets reconnected after the first start reading late, and
which says when it reads a frame in the wrong framing."""


@dataclass
class Server:
    """A running server: where it is, its token, its root dir and process."""

    kind: str
    url: str
    token: str
    root_dir: Path
    process: subprocess.Popen[bytes]
    log: Path


def _wait_up(server: Server, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(
        f"{server.url}/api/kernelspecs", headers={"Authorization": f"token {server.token}"}
    )
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.kind} exited:\n{server.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise RuntimeError(f"{server.kind} did not come up:\n{server.log.read_text()[-3000:]}")


@contextlib.contextmanager
def run_server(
    kind: str, base: Path, config: str = "", env: dict[str, str] | None = None
) -> Iterator[Server]:
    """Start ``kind`` ("jupyter_server" or "kernel_gateway") and stop it afterwards.

    ``config`` is more of a jupyter_server config file (such as :data:`AWKWARD_WEBSOCKETS`);
    ``env``, more environment variables for the server (``JUPYTER_PATH``: more kernelspecs).
    """
    port, token = free_port(), secrets.token_hex(16)
    root = base / "root"
    root.mkdir(parents=True)
    config_dir = base / "config"
    config_dir.mkdir()
    (config_dir / "disable_extensions.py").write_text(_DISABLE_EXTENSIONS + config)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config_dir),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTER_PLATFORM_DIRS": "1",
        **(env or {}),
    }
    if kind == "jupyter_server":
        argv = [
            sys.executable,
            "-m",
            "jupyter_server",
            f"--config={config_dir / 'disable_extensions.py'}",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            "--ServerApp.open_browser=False",
            "--ServerApp.allow_root=True",
            f"--ServerApp.root_dir={root}",
        ]
    elif kind == "kernel_gateway":
        argv = [
            sys.executable,
            "-m",
            "kernel_gateway",
            "--KernelGatewayApp.ip=127.0.0.1",
            f"--KernelGatewayApp.port={port}",
            "--KernelGatewayApp.port_retries=0",
            f"--KernelGatewayApp.auth_token={token}",
            "--JupyterWebsocketPersonality.list_kernels=True",
            "--ServerApp.allow_root=True",
        ]
    else:
        raise ValueError(kind)
    log = base / f"{kind}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(kind, f"http://127.0.0.1:{port}", token, root, process, log)
    try:
        _wait_up(server)
        yield server
    finally:
        stop_process(process)


class Proxy:
    """A TCP relay to a server whose connections the test can cut (``drop_all``)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.dropped = 0

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers.discard(writer)
        self._writers.discard(up_writer)

    def drop_all(self) -> None:
        """Reset every relayed connection (RST, as a broken network would)."""
        for writer in list(self._writers):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            writer.close()
        self.dropped += len(self._writers)
        self._writers.clear()

    async def close(self) -> None:
        self.drop_all()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def kernels_on(server: Server) -> list[str]:
    """Ids of the kernels the server runs now (to check for leaks)."""
    request = urllib.request.Request(
        f"{server.url}/api/kernels", headers={"Authorization": f"token {server.token}"}
    )
    for attempt in range(3):
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return [k["id"] for k in json.load(response)]
        except urllib.error.HTTPError as exc:
            # A server may answer 5xx while a kernel it lists is being shut down: ask again.
            if exc.code < 500 or attempt == 2:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


EG_REASON = (
    "User 'root' is not authorized to start kernel 'python3'. Ensure KERNEL_USERNAME is set "
    "to an appropriate value and retry the request."
)
"""What Enterprise Gateway answers (403, in the status line and the JSON ``reason``)."""

REFUSALS: dict[str, tuple[int, str, bytes, str]] = {
    # name: (status, status-line reason, body, content type)
    "eg-username": (
        403,
        EG_REASON,
        json.dumps({"message": "Forbidden", "reason": EG_REASON}).encode(),
        "application/json",
    ),
    "quota-message": (
        403,
        "Forbidden",
        json.dumps(
            {"message": "Kernel quota reached: 5 of 5 kernels in use", "reason": None}
        ).encode(),
        "application/json",
    ),
    "bare-403": (
        403,
        "Forbidden",
        json.dumps({"message": "Forbidden", "reason": None}).encode(),
        "application/json",
    ),
    "proxy-403-html": (403, "Forbidden", b"<html><body>403 Forbidden</body></html>", "text/html"),
    "bad-token-401": (
        401,
        "Unauthorized",
        json.dumps({"reason": "Unauthorized", "message": "Invalid auth token"}).encode(),
        "application/json",
    ),
    "rate-limited-429": (
        429,
        "Too Many Requests",
        json.dumps({"message": "Too many kernels started; retry in 30 s"}).encode(),
        "application/json",
    ),
    "launch-failed-500": (
        500,
        "Internal Server Error",
        json.dumps({"message": "Kernel died before replying to kernel_info"}).encode(),
        "application/json",
    ),
}


class RefusingServer:
    """A small real tornado server that lists a kernelspec and refuses as told.

    ``refuse_start`` picks how ``POST /api/kernels`` is refused (a key of
    :data:`REFUSALS`), or ``None`` to start a fake kernel whose websocket is then
    refused with ``refuse_websocket``. Runs on the calling event loop.
    """

    def __init__(self, refuse_start: str | None, refuse_websocket: str = "bare-403") -> None:
        self.refuse_start = refuse_start
        self.refuse_websocket = refuse_websocket
        self.url = ""
        self.deleted: list[str] = []
        self._server: object = None

    async def __aenter__(self) -> RefusingServer:
        from tornado.httpserver import HTTPServer
        from tornado.netutil import bind_sockets
        from tornado.web import Application, RequestHandler

        owner = self

        class Base(RequestHandler):
            def refuse(self, name: str) -> None:
                status, reason, body, kind = REFUSALS[name]
                self.set_status(status, reason)
                self.set_header("Content-Type", kind)
                self.finish(body)

        class Specs(Base):
            def get(self) -> None:
                spec = {"display_name": "Python 3", "language": "python", "argv": []}
                self.finish({"default": "python3", "kernelspecs": {"python3": {"spec": spec}}})

        class Kernels(Base):
            def post(self) -> None:
                if owner.refuse_start is not None:
                    self.refuse(owner.refuse_start)
                    return
                self.set_status(201)
                self.finish({"id": "k1", "name": "python3"})

        class Kernel(Base):
            def delete(self, kernel_id: str) -> None:
                owner.deleted.append(kernel_id)
                self.set_status(204)
                self.finish()

        class Channels(Base):
            def get(self, kernel_id: str) -> None:
                self.refuse(owner.refuse_websocket)

        app = Application(
            [
                (r"/api/kernelspecs", Specs),
                (r"/api/kernels", Kernels),
                (r"/api/kernels/([^/]+)", Kernel),
                (r"/api/kernels/([^/]+)/channels", Channels),
            ]
        )
        sockets = bind_sockets(0, "127.0.0.1")
        server = HTTPServer(app)
        server.add_sockets(sockets)
        self._server = server
        self.url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        from tornado.httpserver import HTTPServer

        assert isinstance(self._server, HTTPServer)
        self._server.stop()
        await self._server.close_all_connections()
