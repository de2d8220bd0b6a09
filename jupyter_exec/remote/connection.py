"""One websocket to one remote kernel, kept open across network drops.

Why reconnecting loses nothing on a Jupyter server: the websocket URL carries
our client ``session_id``; when the last websocket of a kernel closes, the
server keeps its ZMQ channels open and *buffers* the kernel's messages under
that session id, and replays them when a websocket with the same id comes back
(``buffer_offline_messages``, on by default in jupyter_server, Kernel Gateway
and Enterprise Gateway). So an execution in flight when the connection drops
finishes normally: its outputs arrive after the reconnect.

Requests sent while disconnected wait in an outbox and go out, in order, once
the socket is back and the server reads it: every websocket's first frame is a
ping, and its pong (which a server sends only from its reading loop) opens the
way, so no frame of ours ever waits unread on the server's end of a websocket
that is about to be replaced (:class:`_Link`, :meth:`KernelConnection.reopen`).
Each websocket is encoded in the framing its own handshake chose. A request
whose write failed is re-sent; one the socket accepted is never re-sent, so a
cell is never executed twice (a write lost in a dying TCP connection shows up
as a timeout instead).

Latency: tornado switches Nagle's algorithm back on once the HTTP upgrade is
done; with Nagle and delayed ACKs every small message can wait ~40 ms, so the
socket gets ``TCP_NODELAY`` after every (re)connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import socket
import time
import uuid
from asyncio import FIRST_COMPLETED
from dataclasses import dataclass
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


@dataclass(eq=False)
class _Link:
    """One websocket of a :class:`KernelConnection`, with all that belongs to it alone.

    A reconnect makes a new link and never carries anything of the old one over:
    a frame is always encoded in the framing its own websocket negotiated, read
    from the websocket it came on, and written only once ``reading`` is done.
    """

    ws: WebSocketClientConnection
    v1: bool
    """The framing the server chose in this websocket's handshake."""
    sock: socket.socket | None
    token: bytes
    """The payload of the ping whose pong says the server reads this websocket."""
    reading: asyncio.Future[None]
    """Done once the server answered that ping: it reads what we write here, in order."""


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
        self._link: _Link | None = None
        self._outbox: list[tuple[str, dict[str, Any]]] = []
        self._reader: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def connected(self) -> bool:
        return self._link is not None

    @property
    def v1(self) -> bool:
        """Whether the current websocket uses the v1 framing (``False`` when there is none)."""
        return self._link is not None and self._link.v1

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and start reading; returns once the server reads what we send.

        Raises :class:`BackendError` if that fails, or if the server accepted the
        websocket but did not start reading it within ``connect_timeout``. Also
        revives a connection that gave up (after a restart brought the kernel back).
        """
        if self._reader is not None and not self._reader.done():
            return
        self._closing = False
        self.failure = None
        self._link = await self._connect()
        self._reader = asyncio.create_task(self._read_loop(), name=f"kernel-ws-{self.kernel_id}")
        try:
            await self._until_read()
        except BaseException:
            await self.close()
            raise

    async def _until_read(self) -> None:
        """Wait until the current websocket is read by the server (see :class:`_Link`)."""
        deadline = time.monotonic() + self.connect_timeout
        while True:
            link, reader = self._link, self._reader
            if reader is None or reader.done():
                raise BackendError(
                    self.failure or f"the kernel websocket of {self.kernel_id} closed at once"
                )
            if link is not None and link.reading.done():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BackendError(
                    f"{self.rest.describe()} accepted the kernel websocket of {self.kernel_id} "
                    f"but did not read it within {self.connect_timeout:g} s"
                )
            waits: set[asyncio.Future[Any]] = {reader}
            if link is not None:
                waits.add(link.reading)
            await asyncio.wait(waits, timeout=min(remaining, 0.5), return_when=FIRST_COMPLETED)

    async def close(self) -> None:
        """Close for good; messages still queued stay readable."""
        self._closing = True
        link, self._link = self._link, None
        if link is not None:
            link.ws.close()
        reader, self._reader = self._reader, None
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def reopen(self) -> None:
        """Close the websocket and open a new one, under a new client session id.

        After a restart the kernel may run on another host, on other ports; the
        server's end of a websocket opened before still reads the old ports, and
        only a new connection makes it connect to the new ones. The new session
        id is what makes this deterministic: a Jupyter server treats a websocket
        that comes with the session id of one it still holds as a reconnect and
        closes the old one ("Replacing stale connection"), and a handler it has
        closed decodes any frame it still reads in the legacy framing (its
        negotiated subprotocol is gone with the close), which for a v1 frame
        raises, or stalls the server for minutes building a 100-million-item
        ``struct`` format. A restart has nothing buffered worth replaying, so
        it needs no old id. Raises :class:`BackendError` (or :class:`NotFound`)
        if the server cannot be reached.
        """
        await self.close()
        self.session_id = uuid.uuid4().hex
        await self.open()

    def drop(self) -> None:
        """Close the websocket as a network failure would: the connection comes back by itself."""
        if self._link is not None:
            self._link.ws.close()

    async def _connect(self) -> _Link:
        """A new websocket to the kernel; its frames go out only once the server reads it.

        Tornado's server starts reading a websocket only after its ``open()``
        returns, which for a kernel websocket waits until the kernel answered the
        server (seconds, on a loaded machine). A frame written before sits unread
        in the socket, and if the connection is replaced meanwhile it is read by
        the replaced handler in the wrong framing. So every link sends a ping
        first: its pong comes from the server's reading loop, after it read
        everything sent before, and until it comes requests wait in the outbox.
        """
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
        chosen = ws.selected_subprotocol
        if chosen not in (PROTOCOL_V1, None):
            ws.close()
            raise BackendError(
                f"{self.rest.describe()} chose the websocket subprotocol {chosen!r}; "
                f"only {PROTOCOL_V1!r} (or none, for the legacy framing) was offered"
            )
        if ws.protocol is not None:
            ws.protocol.set_nodelay(True)
        link = _Link(
            ws,
            v1=chosen == PROTOCOL_V1,
            sock=_socket_of(ws),
            token=uuid.uuid4().hex.encode("ascii"),
            reading=asyncio.get_running_loop().create_future(),
        )
        # tornado calls the connection's on_pong, a no-op meant to be replaced.
        ws.on_pong = functools.partial(self._pong, link)  # type: ignore[method-assign]
        with contextlib.suppress(WebSocketClosedError):  # the read loop sees the close
            ws.ping(link.token)
        return link

    def _pong(self, link: _Link, data: bytes) -> None:
        """The server read everything written before our ping: send what waited, in order."""
        if data != link.token or link.reading.done():
            return
        link.reading.set_result(None)
        if link is self._link:
            pending, self._outbox = self._outbox, []
            for channel, msg in pending:
                self.send(channel, msg)

    # -- sending -----------------------------------------------------------------------------

    def send(self, channel: str, msg: dict[str, Any]) -> None:
        """Send ``msg`` now, or as soon as the server reads a (re)connected websocket."""
        link = self._link
        if link is None or not link.reading.done():
            if not self._closing:
                self._outbox.append((channel, msg))
            return
        frame = encode(msg, channel, v1=link.v1)
        try:
            written = link.ws.write_message(frame, binary=isinstance(frame, bytes))
        except WebSocketClosedError:
            self._outbox.append((channel, msg))
            return
        written.add_done_callback(lambda f: self._after_write(f, link, channel, msg))

    def _after_write(
        self, future: asyncio.Future[None], link: _Link, channel: str, msg: dict[str, Any]
    ) -> None:
        # A write that failed never reached the server whole: send it again, on the
        # websocket that replaced this one, or after the reconnect if none did yet.
        failed = future.cancelled() or future.exception() is not None
        if not failed or self._closing:
            return
        if link is self._link:
            self._outbox.append((channel, msg))
        else:
            self.send(channel, msg)

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
            link = self._link
            if link is None:
                return
            frame = await link.ws.read_message()
            if link.sock is not None:
                _quick_ack(link.sock)
            if frame is None:
                if self._closing:
                    return
                link.ws.close()  # already down; this releases what tornado still holds
                if self._link is link:
                    self._link = None
                if not await self._reconnect():
                    return
                continue
            try:
                channel, msg = decode(frame, v1=link.v1)
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
        """Reconnect with backoff until ``reconnect_timeout``; ``False`` if it gave up.

        The session id is kept: the server buffered the kernel's messages under it
        since the drop and replays them now. Requests wait until the server reads
        the new websocket (:meth:`_connect`), so the old one, which the server
        replaces, had nothing of ours left to read that was written after its own
        reading began.
        """
        log.warning("kernel %s: websocket lost; reconnecting", self.kernel_id)
        deadline = time.monotonic() + self.reconnect_timeout
        delay = 0.05
        while not self._closing:
            try:
                link = await self._connect()
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
            if self._closing:
                link.ws.close()
                return False
            self._link = link
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
