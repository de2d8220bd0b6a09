"""One websocket to one remote kernel, kept open across network drops.

Why reconnecting loses nothing on a Jupyter server: the websocket URL carries
our client ``session_id``; when the last websocket of a kernel closes, the
server keeps its ZMQ channels open and *buffers* the kernel's messages under
that session id, and replays them when a websocket with the same id comes back
(``buffer_offline_messages``, on by default in jupyter_server, Kernel Gateway
and Enterprise Gateway). So an execution in flight when the connection drops
finishes normally: its outputs arrive after the reconnect.

Requests sent while disconnected wait in an outbox and go out, in order, once
the socket is back. A request whose write failed is re-sent; one the socket
accepted is never re-sent, so a cell is never executed twice (a write lost
in a dying TCP connection shows up as a timeout instead).

Latency: tornado switches Nagle's algorithm back on once the HTTP upgrade is
done; with Nagle and delayed ACKs every small message can wait ~40 ms, so the
socket gets ``TCP_NODELAY`` after every (re)connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import socket
import time
import uuid
from typing import Any

from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, WebSocketClosedError, websocket_connect

from jupyter_exec.boundary.replies import printable
from jupyter_exec.exceptions import BackendError
from jupyter_exec.remote.rest import NotFound, RestClient, url_join
from jupyter_exec.remote.wire import PROTOCOL_V1, decode, encode

__all__ = ["CHANNELS", "KernelConnection"]

log = logging.getLogger("jupyter_exec.remote")

CHANNELS = ("shell", "iopub", "stdin", "control")
MAX_MESSAGE_SIZE = 1 << 30
"""Largest websocket message accepted (tornado's default, 10 MiB, is smaller than a big plot)."""


class KernelConnection:
    """The kernel's four channels over one websocket, as four message queues."""

    def __init__(
        self,
        rest: RestClient,
        kernel_id: str,
        *,
        session_id: str | None = None,
        connect_timeout: float = 30.0,
        reconnect_timeout: float = 60.0,
        ping_interval: float | None = 15.0,
    ) -> None:
        self.rest = rest
        self.kernel_id = kernel_id
        self.session_id = session_id or uuid.uuid4().hex
        self.connect_timeout = connect_timeout
        self.reconnect_timeout = reconnect_timeout
        self.ping_interval = ping_interval
        self.queues: dict[str, asyncio.Queue[dict[str, Any]]] = {
            c: asyncio.Queue() for c in CHANNELS
        }
        self.reconnects = 0
        """How many times the websocket was re-established."""
        self.server_restarts = 0
        """``restarting`` notices the server sent (its restarter saw the kernel die and
        starts it again, possibly on another host and other ports)."""
        self.server_gave_up = 0
        """``dead`` notices the server sent (its restarter could not bring the kernel back)."""
        self.dead_reason: str | None = None
        """Why the server declared the kernel dead, when its ``dead`` notice said so."""
        self.failure: str | None = None
        """Why the connection was given up for good (``None`` while usable)."""
        self.v1 = False
        self._ws: WebSocketClientConnection | None = None
        self._outbox: list[tuple[str, dict[str, Any]]] = []
        self._reader: asyncio.Task[None] | None = None
        self._closing = False
        self._socket: socket.socket | None = None

    @property
    def connected(self) -> bool:
        return self._ws is not None

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect (raising :class:`BackendError` if that fails) and start reading.

        Also revives a connection that gave up (after a restart brought the kernel back).
        """
        if self._reader is not None and not self._reader.done():
            return
        self._closing = False
        self.failure = None
        await self._connect()
        self._reader = asyncio.create_task(self._read_loop(), name=f"kernel-ws-{self.kernel_id}")

    async def close(self) -> None:
        """Close for good; messages still queued stay readable."""
        self._closing = True
        ws, self._ws = self._ws, None
        if ws is not None:
            ws.close()
        reader, self._reader = self._reader, None
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def reopen(self) -> None:
        """Close the websocket and open a new one, keeping the session id.

        After a restart the kernel may run on another host, on other ports; the
        server's end of a websocket opened before still reads the old ports, and
        only a new connection makes it connect to the new ones (it compares the
        ports when the same session id comes back). Raises :class:`BackendError`
        (or :class:`NotFound`) if the server cannot be reached.
        """
        await self.close()
        await self.open()

    def drop(self) -> None:
        """Close the websocket as a network failure would: the connection comes back by itself."""
        if self._ws is not None:
            self._ws.close()

    async def _connect(self) -> None:
        url = url_join(self.rest.ws_base_url, "api/kernels", self.kernel_id, "channels")
        request = HTTPRequest(
            f"{url}?session_id={self.session_id}",
            headers=self.rest.headers,
            connect_timeout=self.connect_timeout,
            request_timeout=self.connect_timeout,
            validate_cert=self.rest.validate_cert,
        )
        try:
            ws = await websocket_connect(
                request,
                subprotocols=[PROTOCOL_V1],
                max_message_size=MAX_MESSAGE_SIZE,
                ping_interval=self.ping_interval,
            )
        except HTTPClientError as exc:
            if exc.code == 404:
                raise NotFound(
                    f"kernel {self.kernel_id} does not exist on {self.rest.describe()}"
                ) from None
            raise self.rest.refusal(f"the kernel websocket of {self.kernel_id}", exc) from None
        except OSError as exc:
            raise BackendError(
                f"cannot open the kernel websocket at {self.rest.describe()}: {exc}"
            ) from exc
        if ws.protocol is not None:
            ws.protocol.set_nodelay(True)
        self._socket = _socket_of(ws)
        self.v1 = ws.selected_subprotocol == PROTOCOL_V1
        self._ws = ws
        pending, self._outbox = self._outbox, []
        for channel, msg in pending:
            self.send(channel, msg)

    # -- sending -----------------------------------------------------------------------------

    def send(self, channel: str, msg: dict[str, Any]) -> None:
        """Send ``msg`` now, or as soon as the websocket is (re)connected."""
        ws = self._ws
        if ws is None:
            if not self._closing:
                self._outbox.append((channel, msg))
            return
        frame = encode(msg, channel, v1=self.v1)
        try:
            written = ws.write_message(frame, binary=isinstance(frame, bytes))
        except WebSocketClosedError:
            self._outbox.append((channel, msg))
            return
        written.add_done_callback(lambda f: self._after_write(f, channel, msg))

    def _after_write(self, future: asyncio.Future[None], channel: str, msg: dict[str, Any]) -> None:
        # A write that failed never reached the server whole: send it again after reconnecting.
        failed = future.cancelled() or future.exception() is not None
        if failed and not self._closing:
            self._outbox.append((channel, msg))

    # -- receiving ---------------------------------------------------------------------------

    async def get(self, channel: str, timeout: float | None) -> dict[str, Any]:
        """The next message on ``channel``; ``queue.Empty`` after ``timeout`` seconds."""
        q = self.queues[channel]
        try:
            return q.get_nowait()
        except asyncio.QueueEmpty:
            if timeout is not None and timeout <= 0:
                raise queue.Empty from None
        try:
            return await asyncio.wait_for(q.get(), timeout)
        except asyncio.TimeoutError:
            raise queue.Empty from None

    async def _read_loop(self) -> None:
        while not self._closing:
            ws = self._ws
            frame = await ws.read_message() if ws is not None else None
            if self._socket is not None:
                _quick_ack(self._socket)
            if frame is None:
                if self._closing:
                    return
                if ws is not None:
                    ws.close()  # already down; this releases what tornado still holds
                self._ws = None
                if not await self._reconnect():
                    return
                continue
            try:
                channel, msg = decode(frame, v1=self.v1)
            except ValueError as exc:
                log.warning("kernel %s: dropped a malformed message: %s", self.kernel_id, exc)
                continue
            notice = _restart_notice(channel, msg)
            if notice == "restarting":
                self.server_restarts += 1
            elif notice == "dead":
                self.server_gave_up += 1
                reason = msg["content"].get("reason")
                if isinstance(reason, str) and reason:
                    self.dead_reason = printable(reason, 500)
            target = self.queues.get(channel)
            if target is not None:
                target.put_nowait(msg)

    async def _reconnect(self) -> bool:
        """Reconnect with backoff until ``reconnect_timeout``; ``False`` if it gave up."""
        log.warning("kernel %s: websocket lost; reconnecting", self.kernel_id)
        deadline = time.monotonic() + self.reconnect_timeout
        delay = 0.05
        while not self._closing:
            try:
                await self._connect()
            except NotFound:
                self.failure = f"kernel {self.kernel_id} no longer exists on {self.rest.describe()}"
                return False
            except BackendError as exc:
                if time.monotonic() + delay > deadline:
                    self.failure = (
                        f"lost the websocket to kernel {self.kernel_id} and could not reconnect "
                        f"within {self.reconnect_timeout:g} s: {exc}"
                    )
                    log.error("%s", self.failure)
                    return False
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            self.reconnects += 1
            log.info("kernel %s: websocket re-established", self.kernel_id)
            return True
        return False


def _restart_notice(channel: str, msg: dict[str, Any]) -> str | None:
    """``restarting`` or ``dead`` for the server's own status message saying its restarter
    saw the kernel die (and restarts it, or gave up); None for any other message."""
    if channel != "iopub" or msg["parent_header"] or msg["msg_type"] != "status":
        return None
    state = msg["content"].get("execution_state")
    return state if state in ("restarting", "dead") else None


def _socket_of(ws: WebSocketClientConnection) -> socket.socket | None:
    stream = getattr(ws.protocol, "stream", None)
    sock = getattr(stream, "socket", None)
    return sock if isinstance(sock, socket.socket) else None


def _quick_ack(sock: socket.socket) -> None:
    """ACK what we received at once (Linux), instead of up to 40 ms later.

    The server side of the websocket keeps Nagle's algorithm on, so it holds
    each small message until the previous one is acknowledged; a delayed ACK
    here would stall every reply. Linux resets the flag by itself, hence
    after every read.
    """
    option = getattr(socket, "TCP_QUICKACK", None)
    if option is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, option, 1)
