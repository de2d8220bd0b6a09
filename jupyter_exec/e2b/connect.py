"""Connect RPC framing for envd's JSON endpoints: requests in, messages and errors out.

The SDK's envd clients speak the Connect protocol with a JSON codec over
HTTP/1.1 (plain-text connections never use HTTP/2)::

    unary          POST /svc/Method   application/json        {...}  ->  {...}
    server stream  POST /svc/Method   application/connect+json  [flags u8][len u32][json]
                   answered by enveloped messages, then an end-of-stream envelope
                   (flags 0x02) holding {} or {"error": {"code", "message"}}

An error on a unary call is an HTTP status with ``{"code", "message"}``.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from jupyter_exec.e2b.fields import loads
from jupyter_exec.exceptions import InvalidArgument

__all__ = ["STREAM_TYPE", "end_stream", "envelope", "is_stream", "read_request"]

STREAM_TYPE = "application/connect+json"
END_STREAM = 0x02


def is_stream(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == STREAM_TYPE


def read_request(body: bytes, content_type: str) -> dict[str, Any]:
    """The request message of a unary or a server-streaming call."""
    if is_stream(content_type):
        if len(body) < 5:
            raise InvalidArgument("a Connect stream request needs an enveloped message")
        flags, size = struct.unpack(">BI", body[:5])
        if flags & 0x01:
            raise InvalidArgument("compressed Connect messages are not accepted")
        body = body[5 : 5 + size]
    message = loads(body or b"{}")
    if not isinstance(message, dict):
        raise InvalidArgument("the request must be a JSON object")
    return message


def envelope(message: dict[str, Any], *, flags: int = 0) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


def end_stream(error: dict[str, str] | None = None) -> bytes:
    """The last envelope of a stream: success, or ``{"code", "message"}``."""
    return envelope({"error": error} if error else {}, flags=END_STREAM)
