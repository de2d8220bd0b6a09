"""Request bodies of the REST API: a JSON object, checked field by field before anything runs.

Every mistake is an :class:`InvalidRequest` (a 400) whose message names the
field and says what to send instead, so a client, or a model writing the
request, can fix it in one go. What is refused, and why:

* a body that is not UTF-8 (JSON on the wire is UTF-8), not JSON, nested
  deeper than the decoder goes, or not an object (values nested at all are
  of the wrong type, except in the one object field, ``network``, whose
  shape :mod:`~jupyter_exec.server.network` checks);
* unknown fields (a typo such as ``"timout"`` is an error, not ignored),
  missing required fields, and values of the wrong type (``true`` is not a number);
* text with a lone surrogate anywhere (valid JSON, but not text: it cannot
  be encoded, so no kernel, file name or notebook could take it);
* a timeout that is not a positive, finite number of seconds up to :data:`MAX_TIMEOUT`.

Names and paths are checked further where they are used (the session's name
rules, :class:`~jupyter_exec.server.paths.ServerRoot`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_exec.exceptions import InvalidArgument

__all__ = [
    "ANSWER",
    "CHECKPOINT",
    "CREATE",
    "EXECUTE",
    "FORK",
    "MAX_TIMEOUT",
    "NO_FIELDS",
    "REPLAY",
    "UNDO",
    "Field",
    "InvalidRequest",
    "parse_body",
]

MAX_TIMEOUT = 31_536_000.0
"""Longest timeout accepted, in seconds (a year); longer is a mistake, not a wish."""


class InvalidRequest(InvalidArgument):
    """A request the extension cannot act on as given (a bad field, an unknown kernelspec)."""


@dataclass(frozen=True)
class Field:
    """One field of a request body: its JSON type and whether it must be there."""

    kind: str
    """``"string"``, ``"integer"``, ``"number"``, ``"boolean"`` or ``"object"``."""
    required: bool = False
    nullable: bool = False
    """Whether ``null`` is accepted (as if the field were left out)."""

    def accepts(self, value: Any) -> bool:
        if self.kind == "boolean":
            return isinstance(value, bool)
        if isinstance(value, bool):
            return False
        if self.kind == "object":
            return isinstance(value, dict)
        if self.kind == "string":
            return isinstance(value, str)
        if self.kind == "integer":
            return isinstance(value, int)
        return isinstance(value, (int, float))


Fields = Mapping[str, Field]

CREATE: Fields = {
    "name": Field("string"),
    "work_dir": Field("string"),
    "backend": Field("string"),
    "kernel_name": Field("string"),
    "timeout": Field("number"),
    "undo_steps": Field("integer"),
    "network": Field("object"),
    "kernel_id": Field("string"),
    "language": Field("string"),
}
EXECUTE: Fields = {"code": Field("string", required=True), "timeout": Field("number")}
REPLAY: Fields = {
    "notebook": Field("string", required=True),
    "until": Field("integer"),
    "timeout": Field("number"),
    "kernel_name": Field("string"),
    "save_state": Field("boolean"),
}
FORK: Fields = {"n": Field("integer"), "name": Field("string", nullable=True)}
UNDO: Fields = {"n": Field("integer")}
CHECKPOINT: Fields = {"name": Field("string", nullable=True)}
ANSWER: Fields = {"allow": Field("boolean", required=True)}
NO_FIELDS: Fields = {}


def _json_type(value: Any) -> str:
    """How JSON names the type of ``value`` (for messages that quote no client data)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _lone_surrogate(value: Any) -> int | None:
    """Position of the first lone surrogate in a string, else ``None`` (at the codec's speed)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # only surrogates cannot be encoded as UTF-8
            return exc.start
    return None


def _decode(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"the request body is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "send JSON encoded as UTF-8"
        ) from None
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidRequest(
            f"the request body is not valid JSON ({exc}); send one JSON object"
        ) from None
    except RecursionError:  # the decoder's own guard, at C speed, before any stack is at risk
        raise InvalidRequest(
            "the request body nests arrays or objects too deep to read; send one flat JSON object"
        ) from None


def parse_body(raw: bytes, fields: Fields) -> dict[str, Any]:
    """The request's JSON object, checked against ``fields``; raises :class:`InvalidRequest`."""
    body = _decode(raw)
    if not isinstance(body, dict):
        raise InvalidRequest(f"the request body must be a JSON object, not {_json_type(body)}")
    accepted = ", ".join(sorted(fields)) or "none"
    for key in body:
        if _lone_surrogate(key) is not None:
            raise InvalidRequest(
                f"a field name holds a lone surrogate, which is not text; accepted: {accepted}"
            )
    unknown = sorted(set(body) - set(fields))
    if unknown:
        shown = ", ".join(repr(k[:40]) for k in unknown[:5])
        raise InvalidRequest(f"unknown field(s) {shown}; accepted: {accepted}")
    for key, field in fields.items():
        if key not in body:
            if field.required:
                raise InvalidRequest(f"the field {key!r} is required ({field.kind})")
            continue
        value = body[key]
        if value is None and field.nullable:
            del body[key]
            continue
        if not field.accepts(value):
            raise InvalidRequest(f"{key!r} must be {_article(field.kind)}, not {_json_type(value)}")
        position = _lone_surrogate(value)
        if position is not None:
            raise InvalidRequest(
                f"{key!r} holds a lone surrogate at position {position}, which is not text: "
                "send valid Unicode (a surrogate pair, or the character itself)"
            )
    _check_timeout(body.get("timeout"))
    return body


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _check_timeout(timeout: Any) -> None:
    if timeout is None:
        return
    try:
        seconds = float(timeout)
    except OverflowError:  # an integer too large for a float
        seconds = math.inf
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT):
        raise InvalidRequest(
            f"'timeout' must be a number of seconds above 0 and at most {MAX_TIMEOUT:.0f} "
            f"(a year), not {_shown_number(timeout)}; leave it out for the default"
        )


def _shown_number(value: float) -> str:
    text = repr(value) if isinstance(value, float) else str(value) if value < 10**20 else ""
    return text or f"an integer of {len(str(abs(value))):,} digits"
