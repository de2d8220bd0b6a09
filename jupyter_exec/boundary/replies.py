"""What a kernel or a host answers, read within bounds before anything is parsed.

A Docker or remote kernel, and a cluster host, are on the other side of a trust
line: every byte they send is theirs to choose. The host asks a kernel things
through ``user_expressions`` (the names a cell changed, a generation's commit, a
checkpoint's manifest, the files a remote cell wrote, the environment); each
answer is read here, once, by one rule::

    reply ─► only the key the host asked for ─► its text/plain, length checked raw
          ─► exactly one quoted str literal of printable ASCII (what IPython shows
             for a str) ─► decoded in linear time, no ``literal_eval``
          ─► JSON (bounded nesting, bounded number of containers) ─► the value

The in-kernel side evaluates ``json.dumps(..., ensure_ascii=True)``: its repr is a
quoted literal whose only escapes are ``\\\\`` and ``\\'``, which :func:`quoted_str`
undoes with a handful of C-speed string operations. Anything else (another
literal, a nested repr, non-ASCII, an oversized value) is no answer: the caller's
"nothing was said" case, never a crash and never work out of proportion to the
bytes received. ``ast.literal_eval`` is never used on a kernel's text: it builds a
syntax tree hundreds of times the size of its input and holds the event loop
while it does.

Text a person sees (a host's probe answer, names a kernel sent) goes through
:func:`printable`: control characters, ESC, C1 controls and bidirectional
overrides are shown escaped; ordinary Unicode is kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_CONTAINERS",
    "answer",
    "answer_str",
    "decode_json",
    "printable",
    "quoted_str",
]

MAX_ANSWER_CHARS = 1 << 20
"""Default length of one answer's raw text (1 MiB): past it, no answer."""
MAX_CONTAINERS = 1 << 16
"""At most this many JSON arrays and objects in one answer: each costs the host about 80
bytes however short its text (``[],`` is three characters), so the count bounds what
decoding may allocate (5 MB) whatever the answer's length."""

_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Characters that reorder the text around them on a terminal (Trojan-source style)."""


def quoted_str(text: object, limit: int = MAX_ANSWER_CHARS) -> str | None:
    """The str whose repr is ``text`` (IPython's ``text/plain`` of a str), or None.

    Only what ``repr`` makes of one line of ASCII is accepted: one literal quoted with
    ``'`` (escapes ``\\\\`` and ``\\'``) or with ``"`` (escape ``\\\\`` only, as repr
    does when the text holds a ``'`` and no ``"``). ``limit`` bounds the raw text,
    checked before anything else; the work is linear in it.
    """
    if not isinstance(text, str) or not 2 <= len(text) <= limit:
        return None
    quote = text[0]
    if quote not in "'\"" or text[-1] != quote or not text.isascii():
        return None
    inner = text[1:-1]
    if "\n" in inner or "\r" in inner:
        return None  # not one literal: repr writes a line break as an escape
    if "\\" not in inner:  # the common case (JSON of plain names): two memchr scans
        return None if quote in inner else inner
    escaped_quote = "\\" + quote
    pieces = inner.split("\\\\")  # left to right, as repr's escapes pair up
    for number, piece in enumerate(pieces):
        escapes = piece.count(escaped_quote) if quote == "'" else 0
        if piece.count("\\") != escapes or piece.count(quote) != escapes:
            return None  # a lone backslash, an unescaped quote, or an escape repr never makes
        if escapes:
            pieces[number] = piece.replace(escaped_quote, quote)
    return "\\".join(pieces)


def decode_json(
    text: str, limit: int = MAX_ANSWER_CHARS, containers: int = MAX_CONTAINERS
) -> Any | None:
    """``text`` parsed as JSON, or None when it is longer than ``limit``, holds more than
    ``containers`` arrays and objects, nests too deep or is not JSON."""
    if not text or len(text) > limit:
        return None
    if text.count("[") + text.count("{") > containers:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _ok_text(user_expressions: object, key: str) -> object:
    """The raw ``text/plain`` of the answer to ``key`` (the one key the caller asked for)."""
    if not isinstance(user_expressions, Mapping):
        return None
    found = user_expressions.get(key)
    if not isinstance(found, Mapping) or found.get("status") != "ok":
        return None
    data = found.get("data")
    return data.get("text/plain") if isinstance(data, Mapping) else None


def answer_str(user_expressions: object, key: str, limit: int = MAX_ANSWER_CHARS) -> str | None:
    """The str the expression asked as ``key`` evaluated to (base64, a plain word), or None."""
    return quoted_str(_ok_text(user_expressions, key), limit)


def answer(
    user_expressions: object,
    key: str,
    limit: int = MAX_ANSWER_CHARS,
    containers: int = MAX_CONTAINERS,
) -> Any | None:
    """The value of the expression asked as ``key``: a str of JSON in the kernel, decoded
    here (None: no answer, an empty one, or one that breaks the rule above).

    ``limit`` bounds the raw text and the JSON alike.
    """
    text = answer_str(user_expressions, key, limit)
    return None if text is None else decode_json(text, limit, containers)


def printable(text: object, limit: int = 300) -> str:
    """``text`` safe to show a person on a terminal, at most about ``limit`` characters.

    Control characters (newlines included), ESC, DEL, C1 controls, bidirectional
    overrides and other invisible format characters are shown as ``\\x1b``-style
    escapes, so an answer can neither move the cursor, retitle the terminal, nor
    forge a line of its own; letters, digits and symbols of any script stay as they are.
    """
    shown = str(text)
    cut = len(shown) > limit
    out: list[str] = []
    for char in shown[:limit]:
        if char.isprintable() and char not in _BIDI:
            out.append(char)
        elif ord(char) < 0x100:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return "".join(out) + ("..." if cut else "")
