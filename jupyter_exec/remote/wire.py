"""Kernel messages on a Jupyter server's kernel websocket, both ways, in both framings.

A Jupyter server forwards the kernel protocol over ``/api/kernels/<id>/channels``
in one of two framings, chosen by websocket subprotocol negotiation:

* ``v1.kernel.websocket.jupyter.org`` (jupyter_server >= 2): a binary frame of
  little-endian 64-bit offsets, the channel name, then the message parts
  (header, parent header, metadata, content, buffers) exactly as the kernel
  sent them. The server relays these without parsing them, so it is the
  cheaper framing for the server and for us.
* no subprotocol (older servers, gateways that pin the legacy framing): a JSON
  text frame of the whole message with a ``"channel"`` key; messages carrying
  binary buffers come as a binary frame of big-endian 32-bit offsets, the JSON,
  then the buffers.

The messages produced here look like jupyter_client's (``header``,
``parent_header``, ``metadata``, ``content``, ``buffers``, plus top-level
``msg_id`` / ``msg_type``), so the session code cannot tell them apart.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from typing import Any

__all__ = ["PROTOCOL_V1", "decode", "encode", "new_message"]

PROTOCOL_V1 = "v1.kernel.websocket.jupyter.org"
PROTOCOL_VERSION = "5.3"


def new_message(
    msg_type: str, content: dict[str, Any], *, session: str, username: str
) -> dict[str, Any]:
    """A request as a kernel expects it (unsigned: the server signs what it forwards)."""
    header = {
        "msg_id": uuid.uuid4().hex,
        "msg_type": msg_type,
        "username": username,
        "session": session,
        "date": datetime.now(timezone.utc).isoformat(),
        "version": PROTOCOL_VERSION,
    }
    return {
        "header": header,
        "msg_id": header["msg_id"],
        "msg_type": msg_type,
        "parent_header": {},
        "metadata": {},
        "content": content,
        "buffers": [],
    }


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode(msg: dict[str, Any], channel: str, *, v1: bool) -> str | bytes:
    """One websocket frame for ``msg`` on ``channel`` (text for JSON, bytes for v1)."""
    if not v1:
        return json.dumps(
            {
                "channel": channel,
                "header": msg["header"],
                "parent_header": msg["parent_header"],
                "metadata": msg["metadata"],
                "content": msg["content"],
            },
            ensure_ascii=False,
        )
    parts = [_dumps(msg[k]) for k in ("header", "parent_header", "metadata", "content")]
    parts.extend(bytes(b) for b in msg.get("buffers", ()))
    name = channel.encode("ascii")
    # Offsets: where the channel name starts, then where each of it and the parts end.
    count = 2 + len(parts)
    offsets = [8 * (1 + count)]
    for chunk in (name, *parts):
        offsets.append(offsets[-1] + len(chunk))
    head = b"".join(n.to_bytes(8, "little") for n in (count, *offsets))
    return b"".join((head, name, *parts))


def _message(
    header: Any, parent: Any, metadata: Any, content: Any, buffers: list[memoryview]
) -> dict[str, Any]:
    header = header if isinstance(header, dict) else {}
    return {
        "header": header,
        "msg_id": header.get("msg_id", ""),
        "msg_type": header.get("msg_type", ""),
        "parent_header": parent if isinstance(parent, dict) else {},
        "metadata": metadata if isinstance(metadata, dict) else {},
        "content": content if isinstance(content, dict) else {},
        "buffers": buffers,
    }


def _decode_v1(frame: bytes) -> tuple[str, dict[str, Any]]:
    view = memoryview(frame)
    count = int.from_bytes(view[:8], "little")
    offsets = [int.from_bytes(view[8 * (i + 1) : 8 * (i + 2)], "little") for i in range(count)]
    channel = bytes(view[offsets[0] : offsets[1]]).decode("ascii")
    parts = [view[offsets[i] : offsets[i + 1]] for i in range(1, count - 1)]
    if len(parts) < 4:
        raise ValueError(f"a v1 kernel message needs 4 parts, got {len(parts)}")
    header, parent, metadata, content = (json.loads(bytes(p)) for p in parts[:4])
    return channel, _message(header, parent, metadata, content, parts[4:])


def _decode_json(data: dict[str, Any], buffers: list[memoryview]) -> tuple[str, dict[str, Any]]:
    msg = _message(
        data.get("header"),
        data.get("parent_header"),
        data.get("metadata"),
        data.get("content"),
        buffers,
    )
    return str(data.get("channel") or "shell"), msg


def decode(frame: str | bytes, *, v1: bool) -> tuple[str, dict[str, Any]]:
    """``(channel, message)`` from one websocket frame. Raises ``ValueError`` if malformed."""
    try:
        if isinstance(frame, str):
            return _decode_json(json.loads(frame), [])
        if v1:
            return _decode_v1(frame)
        # Legacy binary frame: JSON plus buffers, big-endian 32-bit offsets.
        view = memoryview(frame)
        count = int.from_bytes(view[:4], "big")
        offsets = [int.from_bytes(view[4 * (i + 1) : 4 * (i + 2)], "big") for i in range(count)]
        offsets.append(len(frame))
        chunks = [view[offsets[i] : offsets[i + 1]] for i in range(count)]
        return _decode_json(json.loads(bytes(chunks[0])), chunks[1:])
    except (UnicodeDecodeError, json.JSONDecodeError, IndexError, TypeError) as exc:
        raise ValueError(f"malformed kernel message frame: {exc}") from exc
