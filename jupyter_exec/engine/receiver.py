"""Reading a kernel's messages off its sockets: the hot path of every execution.

Kept apart from the kernel's lifecycle because it is a different concern with
a different reason to change: how fast and how safely one message is taken
from a zmq socket (signature checked, replays refused, no date parsing),
against how a kernel is started and stopped. Gateway kernels, which have no
zmq socket, are read through their channel's own ``get_msg``.

A kernel's message is bounded before it is parsed: content longer than the read limit
(``$JUPYTER_EXEC_MAX_READ_MB``, 256 MiB by default) or holding more than
:data:`MAX_CONTAINERS` JSON arrays and objects becomes a note naming the limit, as a
content nested too deep does. Parsing costs the host about three times a message's bytes,
and up to 33 times for one made of empty containers (``[[],[],...]``): the count keeps
that under 100 MB whatever a Docker kernel sends. The other frames (header, parent,
metadata) are a few hundred bytes; past :data:`MAX_HEADER_BYTES` the message is malformed.
"""

from __future__ import annotations

import hmac
import queue
from typing import Any

import zmq
from jupyter_client.adapter import adapt

from jupyter_exec.boundary.paths import read_limit
from jupyter_exec.engine.outputs import placeholder_content

__all__ = ["MAX_CONTAINERS", "MAX_HEADER_BYTES", "Receiver"]

MAX_CONTAINERS = 1 << 20
"""JSON arrays and objects one message's content may hold (each costs ~80 bytes parsed)."""
MAX_HEADER_BYTES = 1 << 20
"""Bytes of a message's header, parent header or metadata frame."""


class Receiver:
    """Reads one channel's messages with as little event-loop work as possible.

    jupyter_client's async ``get_msg`` always awaits a poll future before
    receiving. Here a message that is already queued is taken at once through
    a blocking shadow of the same socket (``NOBLOCK``); only an empty socket
    costs an awaited poll. This is the hot path of every execution.
    """

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        socket: Any = getattr(channel, "socket", None)
        # Gateway kernels (jupyter_server --gateway-url) have websocket-fed
        # channels with no zmq socket: those are read through get_msg().
        self._zmq = isinstance(socket, zmq.Socket)
        self._async_socket: Any = socket
        if self._zmq:
            self._socket: zmq.Socket[bytes] = zmq.Socket.shadow(socket.underlying)
            self._session = channel.session
            self._limit = read_limit()

    def _take(self) -> dict[str, Any]:
        frames = self._socket.recv_multipart(zmq.NOBLOCK, copy=True)
        _, parts = self._session.feed_identities(frames)
        return _deserialize(self._session, parts, self._limit)

    async def get(self, timeout: float) -> dict[str, Any]:
        """The next message; raises ``queue.Empty`` after ``timeout`` seconds."""
        if not self._zmq:
            msg: dict[str, Any] = await self._channel.get_msg(timeout=timeout)
            return msg
        try:
            return self._take()
        except zmq.Again:
            pass
        if await self._async_socket.poll(max(0, int(timeout * 1000)), zmq.POLLIN):
            try:
                return self._take()
            except zmq.Again:
                pass
        raise queue.Empty


def _deserialize(session: Any, parts: list[bytes], limit: int | None = None) -> dict[str, Any]:
    """``Session.deserialize`` without turning header dates into datetimes.

    The signature is checked (and remembered against replays) exactly as
    jupyter_client does. Content nested too deep for the JSON parser (a kernel
    can send any bytes), longer than ``limit`` (default: the read limit) or made of
    too many containers becomes a note naming the limit instead of an error
    that would end the cell (see :func:`jupyter_exec.engine.outputs.placeholder_content`).
    Only the date parsing, a third of the client's work per message and never
    needed here (timings are kept as the ISO text the kernel sent), is left out.
    """
    if len(parts) < 5:
        raise ValueError(f"malformed message: {len(parts)} parts, at least 5 expected")
    if session.auth is not None:
        signature = parts[0]
        if not signature:
            raise ValueError("unsigned message")
        if signature in session.digest_history:
            raise ValueError(f"duplicate signature: {signature!r}")
        session._add_digest(signature)
        if not hmac.compare_digest(signature, session.sign(parts[1:5])):
            raise ValueError(f"invalid signature: {signature!r}")
    unpack = session.unpack
    if len(parts[1]) > MAX_HEADER_BYTES or len(parts[2]) > MAX_HEADER_BYTES:
        raise ValueError("malformed message: its header is larger than any kernel sends")
    try:
        header = unpack(parts[1])
        parent = unpack(parts[2])
    except RecursionError:
        raise ValueError("malformed message: its header is nested too deep") from None
    try:
        metadata = unpack(parts[3]) if len(parts[3]) <= MAX_HEADER_BYTES else {}
    except RecursionError:
        metadata = {}
    body = parts[4]
    limit = read_limit() if limit is None else limit
    kind = str(header.get("msg_type"))
    if len(body) > limit or (  # "[]" is two bytes: a shorter body cannot hold too many
        len(body) > 2 * MAX_CONTAINERS and body.count(b"[") + body.count(b"{") > MAX_CONTAINERS
    ):
        content = placeholder_content(kind, _too_large(len(body), limit))
    else:
        try:
            content = unpack(body)
        except RecursionError:  # a kernel's JSON nested past what can be parsed: a note
            content = placeholder_content(kind)
    message = {
        "header": header,
        "msg_id": header["msg_id"],
        "msg_type": header["msg_type"],
        "parent_header": parent,
        "metadata": metadata,
        "content": content,
        "buffers": [memoryview(b) for b in parts[5:]],
    }
    if not str(header.get("version", "5")).startswith("5"):  # another protocol: adapt it
        return dict(adapt(message))
    return message


def _too_large(size: int, limit: int) -> str:
    return (
        f"[output removed: the kernel sent a message of {size:,} bytes; the limit is "
        f"{limit:,} bytes (JUPYTER_EXEC_MAX_READ_MB) and {MAX_CONTAINERS:,} JSON arrays "
        "and objects]"
    )
