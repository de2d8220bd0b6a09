"""Reading a kernel's messages off its sockets: the hot path of every execution.

Kept apart from the kernel's lifecycle because it is a different concern with
a different reason to change: how fast and how safely one message is taken
from a zmq socket (signature checked, replays refused, no date parsing),
against how a kernel is started and stopped. Gateway kernels, which have no
zmq socket, are read through their channel's own ``get_msg``.
"""

from __future__ import annotations

import hmac
import queue
from typing import Any

import zmq
from jupyter_client.adapter import adapt

from jupyter_exec.engine.outputs import placeholder_content

__all__ = ["Receiver"]


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

    def _take(self) -> dict[str, Any]:
        frames = self._socket.recv_multipart(zmq.NOBLOCK, copy=True)
        _, parts = self._session.feed_identities(frames)
        return _deserialize(self._session, parts)

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


def _deserialize(session: Any, parts: list[bytes]) -> dict[str, Any]:
    """``Session.deserialize`` without turning header dates into datetimes.

    The signature is checked (and remembered against replays) exactly as
    jupyter_client does. Content nested too deep for the JSON parser (a kernel
    can send any bytes) becomes a note naming the limit instead of an error
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
    try:
        header = unpack(parts[1])
        parent = unpack(parts[2])
    except RecursionError:
        raise ValueError("malformed message: its header is nested too deep") from None
    try:
        metadata = unpack(parts[3])
    except RecursionError:
        metadata = {}
    try:
        content = unpack(parts[4])
    except RecursionError:  # a kernel's JSON nested past what can be parsed: a note instead
        content = placeholder_content(str(header.get("msg_type")))
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
