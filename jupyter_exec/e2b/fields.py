"""Fields of an envd request message, checked: the wrong type is a 400 that names the field.

Connect's JSON codec follows protobuf's JSON mapping, so a message field may be
left out or ``null`` (its default), an integer may come as a number or a
string of digits, and anything else (an array where an object belongs, a
string where a number does, NaN) is the client's mistake, never the server's.
"""

from __future__ import annotations

import json
from typing import Any

from jupyter_exec.exceptions import InvalidArgument

__all__ = ["MAX_DEPTH", "integer", "loads", "obj", "seconds_from_ms", "text"]

MAX_DEPTH = 1_000
"""Deepest ``ListDir`` walk asked for (deeper folders than that do not exist in practice)."""


def text(message: dict[str, Any], name: str) -> str:
    """A string field ('' when absent)."""
    value = message.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidArgument(f"{name!r} must be a string")
    return value


def obj(message: dict[str, Any], name: str) -> dict[str, Any]:
    """A message field ({} when absent)."""
    value = message.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"{name!r} must be an object")
    return value


def integer(message: dict[str, Any], name: str, *, default: int, most: int) -> int:
    """An integer field from 1 to ``most`` (``default`` when absent or 0, as protobuf's zero)."""
    value = message.get(name)
    if isinstance(value, str) and value.isdigit() and len(value) <= 18:
        value = int(value)
    if value is None or value == 0:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise InvalidArgument(f"{name!r} must be a whole number from 1 to {most}")
    return value


def seconds_from_ms(header: str) -> float | None:
    """Seconds of a ``Connect-Timeout-Ms`` header (None: none, or not a sane number)."""
    if not header.isdigit() or len(header) > 12:  # more than 30 years: no deadline
        return None
    return int(header) / 1000


def _reject_constant(name: str) -> Any:
    raise InvalidArgument(f"the request body holds {name}, which is not a JSON number")


def loads(raw: bytes) -> Any:
    """JSON from a client: not NaN or Infinity, not nested past the decoder's depth."""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise InvalidArgument("the request body nests too deep to read") from None
    except ValueError as exc:  # includes UnicodeDecodeError and over-long integers
        if isinstance(exc, InvalidArgument):
            raise
        raise InvalidArgument(f"the request body is not JSON: {exc}") from None
