"""A generator of malformed requests for every endpoint of the REST API, read from its spec.

The routes, their methods and the fields of their bodies come from
``server_extension/openapi.yaml`` (which ``test_authz`` pins to the routes the
server serves), so a new endpoint or field is probed without editing this
file. Every request made here is a client's mistake: the API must refuse
each one with a 4xx and a JSON body whose message says what to fix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from server_helpers import SPEC

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


@dataclass(frozen=True)
class Probe:
    """One malformed request: ``path`` is below ``/api/exec/``, already URL-encoded."""

    what: str
    method: str
    path: str
    body: bytes | None = None

    def __str__(self) -> str:
        return f"{self.method} {self.path[:60]} [{self.what}]"


def _spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    return spec


def _body_schema(spec: dict[str, Any], operation: dict[str, Any]) -> dict[str, Any] | None:
    ref = (
        operation.get("requestBody", {})
        .get("content", {})
        .get("application/json", {})
        .get("schema", {})
        .get("$ref")
    )
    if ref is None:
        return None
    schema: dict[str, Any] = spec["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return schema


def _dumps(value: Any) -> bytes:
    """JSON as a client sends it; lone surrogates stay escaped (``\\ud800``), as JSON allows."""
    return json.dumps(value, allow_nan=True).encode()


# Values of each JSON type, to send where another type belongs.
_ANY_TYPE: list[tuple[str, Any]] = [
    ("null", None),
    ("true", True),
    ("false", False),
    ("0", 0),
    ("1.5", 1.5),
    ("a string", "text"),
    ("an empty array", []),
    ("an array", ["a", 1]),
    ("an object", {"a": 1}),
]


def _wrong_types(kind: str, nullable: bool = False) -> list[tuple[str, Any]]:
    def fits(value: Any) -> bool:
        if value is None:
            return nullable
        if kind == "boolean":
            return isinstance(value, bool)
        if isinstance(value, bool):
            return False
        if kind == "string":
            return isinstance(value, str)
        if kind == "object":
            return isinstance(value, dict)
        if kind == "integer":
            return isinstance(value, int)
        return isinstance(value, (int, float))

    return [(name, value) for name, value in _ANY_TYPE if not fits(value)]


_CONTROL = ["\x00", "\x01", "\t", "\n", "\r", "\x1b[31m", "\x7f", "\x85"]
_BIDI = ["\u202e", "\u202d", "\u2066", "\u2067", "\u2069", "\u200f", "\u200e"]
_SURROGATES = ["\ud800", "\udfff", "\udc80"]


def _bad_texts(field: str) -> list[tuple[str, str]]:
    """Strings no name, path, kernelspec or backend may be (code takes any valid text)."""
    if field == "code":
        return [(f"a lone surrogate {s!r}", f"print(1)\n{s}") for s in _SURROGATES] + [
            ("a lone surrogate after long code", "x = 1\n" * 20_000 + "\ud83d")
        ]
    found: list[tuple[str, str]] = []
    for char in _CONTROL:
        found.append((f"control {char!r} inside", f"ok{char}name"))
    found.append(("only a control character", "\x1b"))
    found.append(("a trailing newline", "name\n"))
    for char in _BIDI:
        found.append((f"bidi {char!r} inside", f"evil{char}gpj.py"))
    for char in _SURROGATES:
        found.append((f"lone surrogate {char!r} inside", f"ok{char}name"))
    if field == "name":
        found.append(("over-long (101)", "n" * 101))
    found += [
        ("over-long (300)", "n" * 300),
        ("over-long (5,000)", "n" * 5_000),
        ("over-long (300,000)", "n" * 300_000),
        ("only spaces", "   "),
    ]
    if field in ("work_dir", "notebook"):
        found += [
            ("a 300-byte component", "a/" + "c" * 300),
            ("5,000 levels", "d/" * 5_000),
            ("a NUL inside a component", "a/b\x00c"),
        ]
    return found


_BAD_NUMBERS: list[tuple[str, bytes]] = [
    ("negative", b"-1"),
    ("zero", b"0"),
    ("negative zero", b"-0.0"),
    ("NaN", b"NaN"),
    ("Infinity", b"Infinity"),
    ("-Infinity", b"-Infinity"),
    ("1e999 (overflows to inf)", b"1e999"),
    ("an integer of 400 digits", b"1" + b"0" * 400),
    ("1e308 seconds", b"1e308"),
    ("a million years", b"31536000000000"),
    ("an integer of 5,000 digits", b"9" * 5_000),
]
_BAD_INTEGERS: list[tuple[str, bytes]] = [
    ("negative", b"-1"),
    ("hugely negative", b"-" + b"9" * 300),
    ("1e999", b"1e999"),
    ("NaN", b"NaN"),
    ("an integer of 5,000 digits", b"9" * 5_000),
]


def _bad_objects(schema: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """Objects of the wrong shape for an object field: unknown keys, members of wrong types."""
    yield "an object with an unknown key", {"zzz-unknown": 1}
    yield "an object with a lone surrogate key", {"\ud800": 1}
    deep: Any = "x"
    for _ in range(500):
        deep = {"a": deep}
    yield "an object nested 500 deep", deep
    for member, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type", "string")
        for name, value in _wrong_types(kind):
            yield f"member {member!r} is {name}", {member: value}
        if kind == "array":
            yield f"member {member!r} holds a number", {member: [1]}
            yield f"member {member!r} holds a lone surrogate", {member: ["a\ud800.test"]}
            yield f"member {member!r} holds a URL", {member: ["https://a.test/"]}
            yield f"member {member!r} holds a 5,000-label host", {member: ["a." * 5_000 + "a"]}
        if kind == "object":
            yield f"member {member!r} maps to a string", {member: {"a.test": "text"}}
            yield f"member {member!r} maps to a number", {member: {"a.test": {"X-Key": 1}}}
            yield f"member {member!r} with a newline", {member: {"a.test": {"X-Key": "a\nb"}}}


def _with(valid: dict[str, Any], key: str, raw: bytes) -> bytes:
    """``valid`` with ``key`` set to the raw JSON text ``raw`` (which json.dumps cannot make)."""
    rest = {k: v for k, v in valid.items() if k != key}
    head = _dumps(rest)[:-1]
    sep = b", " if rest else b""
    return head + sep + _dumps(key) + b": " + raw + b"}"


def bad_bodies(schema: dict[str, Any], valid: dict[str, Any]) -> Iterator[tuple[str, bytes]]:
    """(what, body) for every way a body for ``schema`` can be wrong; ``valid`` is a good one."""
    good = _dumps(valid)
    yield from [
        ("not JSON: a lone brace", b"{"),
        ("not JSON: a word", b"nope"),
        ("not JSON: form-encoded", b"code=1&timeout=2"),
        ("not JSON: XML", b"<request><code>1</code></request>"),
        ("not JSON: single quotes", good.replace(b'"', b"'") if valid else b"{'a': 1}"),
        ("not JSON: trailing comma", good[:-1] + b", }" if valid else b"{,}"),
        ("not JSON: two objects", good + good),
        ("not UTF-8: a latin-1 byte", b'{"x": "caf\xe9"}'),
        ("not UTF-8: UTF-16 with BOM", json.dumps(valid).encode("utf-16")),
        ("not UTF-8: encoded surrogate", b'{"x": "\xed\xa0\x80"}'),
        ("not UTF-8: lone 0xff", b"\xff"),
        ("a JSON array", b"[]"),
        ("JSON null", b"null"),
        ("a JSON number", b"1"),
        ("a JSON string", b'"text"'),
        ("JSON true", b"true"),
        ("bare NaN", b"NaN"),
        ("nested arrays 100,000 deep", b"[" * 100_000 + b"]" * 100_000),
        ("nested objects 50,000 deep", b'{"a":' * 50_000 + b"1" + b"}" * 50_000),
        ("unclosed nesting 200,000 deep", b"[" * 200_000),
        ("an unknown field (typo)", _with(valid, "timout", b"3")),
        ("an empty field name", _with(valid, "", b"1")),
        ("a lone surrogate as field name", _with(valid, "\ud800", b"1")),
        ("a 100,000-character field name", _with(valid, "k" * 100_000, b"1")),
        ("10,000 unknown fields", _dumps({**valid, **{f"f{i}": i for i in range(10_000)}})),
    ]
    fields: dict[str, Any] = schema.get("properties", {})
    required = schema.get("required", [])
    for key in required:
        yield f"missing required {key!r}", _dumps({k: v for k, v in valid.items() if k != key})
    if required:
        yield "no body at all", b""
    for key, prop in fields.items():
        kind = prop.get("type", "string")
        for name, value in _wrong_types(kind, bool(prop.get("nullable"))):
            yield f"{key!r} is {name}", _dumps({**valid, key: value})
        nested: Any = "x"
        for _ in range(500):
            nested = [nested]
        yield f"{key!r} nested 500 deep", _dumps({**valid, key: nested})
        if kind == "number":
            for name, raw in _BAD_NUMBERS:
                yield f"{key!r} {name}", _with(valid, key, raw)
        elif kind == "integer":
            for name, raw in _BAD_INTEGERS:
                yield f"{key!r} {name}", _with(valid, key, raw)
        elif kind == "object":
            for name, value in _bad_objects(prop):
                yield f"{key!r} {name}", _dumps({**valid, key: value})
        elif kind == "string":
            for name, text in _bad_texts(key):
                yield f"{key!r} {name}", _dumps({**valid, key: text})


BAD_IDS: list[tuple[str, str]] = [
    ("unknown", "nope"),
    ("32 zeros", "0" * 32),
    ("5,000 characters", "i" * 5_000),
    ("percent-encoded NUL", "%00"),
    ("invalid UTF-8", "%ff%fe"),
    ("an encoded surrogate", "%ed%a0%80"),
    ("a bidi override", "%E2%80%AEdi"),
    ("dot-dot", ".."),
    ("encoded dot-dot", "%2e%2e"),
    ("an encoded slash", "a%2Fb"),
    ("a newline", "a%0Ab"),
    ("markup", "%3Cscript%3E"),
    ("a truncated escape", "%e2%80"),
]


PLACEHOLDERS = {"name": "probe-checkpoint", "approval_id": "probe-approval"}
"""What the path parameters other than ``session_id`` are filled with: none that exists."""


def probes(session_id: str, valid_bodies: dict[str, dict[str, Any]]) -> Iterator[Probe]:
    """Every malformed request for every route of the spec.

    ``valid_bodies`` maps a spec path (``/api/exec/replay``) to a body that
    would be accepted, which the probes spoil one way at a time; routes with
    ``{session_id}`` are probed on ``session_id`` (a live session) and on bad ids,
    other path parameters on :data:`PLACEHOLDERS` and on the same bad ids.
    """
    spec = _spec()
    for spec_path, item in spec["paths"].items():
        served = {m.upper(): op for m, op in item.items() if m.upper() in METHODS}
        path = spec_path.removeprefix("/api/exec/")
        live = path.replace("{session_id}", session_id)
        for key, value in PLACEHOLDERS.items():
            live = live.replace(f"{{{key}}}", value)
        for method in METHODS:
            if method not in served:
                body = b"{}" if method in ("POST", "PUT", "PATCH") else None
                yield Probe(f"{method} is not served", method, live, body)
        for method, operation in served.items():
            schema = _body_schema(spec, operation)
            valid = valid_bodies.get(spec_path, {})
            if schema is not None:
                for what, body in bad_bodies(schema, valid):
                    yield Probe(what, method, live, body)
            elif method == "POST":
                yield Probe("a field where none is taken", method, live, b'{"force": true}')
                yield Probe("not JSON", method, live, b"{")
                yield Probe("a JSON array", method, live, b"[1]")
            body = _dumps(valid) if method == "POST" else None
            for key in ("session_id", *PLACEHOLDERS):
                if f"{{{key}}}" not in path:
                    continue
                for what, bad in BAD_IDS:
                    spoilt = live.replace(
                        session_id if key == "session_id" else PLACEHOLDERS[key], bad, 1
                    )
                    yield Probe(f"{key}: {what}", method, spoilt, body)


def bad_notebooks() -> list[tuple[str, str, bytes]]:
    """(what, file name, content) of files that are no notebook to replay."""
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "source": "1", "execution_count": 1}
    good = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return [
        ("an empty file", "empty.ipynb", b""),
        ("not JSON", "not-json.ipynb", b"{ nope"),
        ("JSON but not a notebook", "not-a-notebook.ipynb", b'{"a": 1}'),
        ("a JSON array", "array.ipynb", b"[]"),
        (
            "latin-1 bytes",
            "latin1.ipynb",
            json.dumps(good).replace('"1"', '"caf\xe9"').encode("latin-1"),
        ),
        ("arrays nested 100,000 deep", "deep.ipynb", b"[" * 100_000 + b"]" * 100_000),
        (
            "a cell nested 50,000 deep",
            "deep-cell.ipynb",
            json.dumps(good)
            .replace('"outputs": []', '"outputs": ' + "[" * 50_000 + "]" * 50_000)
            .encode(),
        ),
        ("nbformat 99", "future.ipynb", json.dumps({**good, "nbformat": 99}).encode()),
        (
            "cells that are not a list",
            "cells.ipynb",
            json.dumps({**good, "cells": {"a": 1}}).encode(),
        ),
        ("a NUL byte", "nul.ipynb", b"\x00" * 64),
        ("a PNG", "picture.ipynb", b"\x89PNG\r\n\x1a\n" + b"\x00" * 32),
    ]
