"""Redaction of a network policy's secrets from what a kernel sends out: the second line of defence.

The first line is that secrets never enter the kernel (the proxy adds them on the host). But an
allowed host may echo a header back (a debugging endpoint, an error page quoting the request),
and then the kernel holds the secret and may print it. So every output of a cell is redacted
*as it arrives* from the kernel (:class:`Redactor`, applied by
:class:`~jupyter_exec.engine.outputs.CellOutputs`), before anything else sees it: the ``on_output``
events (REST SSE, the E2B ``/execute`` stream, live cells in a shared notebook), the
Execution, the notebook, the saved and spilled files, MCP and agent tool results.

What is looked for (:func:`secret_needles`): each secret header value, its token (the last word,
``Bearer <token>``) and, when that token is base64 of readable text (``Basic`` credentials), the
decoded text; and each of those in the encodings a kernel may well print it in: base64 (standard
and URL-safe, at each of the three byte alignments, so also inside a longer encoded text),
percent-encoding (``quote``, ``quote_plus``, lower-case escapes), hex and a JSON string escape.
Encoded forms shorter than :data:`MIN_TOKEN` are not used (they would match ordinary text).

Stream text arrives in chunks the kernel chose: a secret may straddle two chunks or come one
character per flush. :meth:`Redactor.stream` therefore holds back the longest end of the text
that could still grow into a needle (never more than the longest needle less one character)
until the next chunk of that stream (whatever else comes between), a ``clear_output``, or the
end of the cell; text whose end cannot begin a needle (a line ending in ``\\n``, say) passes
at once. A held-back end that turns out harmless is shown after what came meanwhile.

Not covered, and not coverable by matching: a kernel that *means* to leak the secret (it can
reverse, split or encrypt it), a secret split by a ``clear_output`` between its parts, and one
assembled only on screen by ``\\r`` / ``\\b`` overwrites (the recorded text, with those applied,
is redacted again). Redaction is a last line; the boundary is that the kernel never holds one.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = ["REDACTED", "Redactor", "redact", "secret_needles"]

REDACTED = "[secret redacted]"
MIN_TOKEN = 8
"""A credential's token part (after ``Bearer``), and an encoded form of a secret, is redacted on
its own only when at least this long."""

_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def _base64_forms(data: bytes) -> set[str]:
    """The base64 text that encodes ``data`` wherever it sits in a longer input: for each of
    the three byte offsets, the characters whose six bits all come from ``data``."""
    forms: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data).decode("ascii")
        start = -(-8 * offset // 6)  # the first character free of the padding bytes
        end = 8 * (offset + len(data)) // 6  # past the last one free of what follows
        inner = encoded[start:end]
        forms.update((inner, inner.replace("+", "-").replace("/", "_")))
    return forms


def _encodings(text: str) -> set[str]:
    """``text`` as a kernel might print it encoded (see the module docstring)."""
    raw = text.encode("utf-8")
    forms = _base64_forms(raw)
    for escaped in (quote(text, safe=""), quote(text), quote_plus(text)):
        forms.update((escaped, _ESCAPE.sub(lambda m: m.group().lower(), escaped)))
    forms.update((raw.hex(), raw.hex().upper(), json.dumps(text)[1:-1]))
    forms.discard(text)
    return {form for form in forms if len(form) >= MIN_TOKEN}


def _decoded(token: str) -> str | None:
    """The readable text a base64 token stands for (``Basic`` credentials), if it is one."""
    try:
        text = base64.b64decode(token, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return text if len(text) >= MIN_TOKEN and text.isprintable() else None


def secret_needles(values: Iterable[str]) -> tuple[str, ...]:
    """The strings to look for: each header value, its last word (the token of
    ``Bearer <token>``) when that is long enough not to be an ordinary word, the text a
    base64 token decodes to, and their encodings; longest first."""
    forms: set[str] = set()
    for value in values:
        if not value:
            continue
        forms.add(value)
        token = value.rsplit(" ", 1)[-1]
        if len(token) >= MIN_TOKEN:
            forms.add(token)
            decoded = _decoded(token)
            if decoded is not None:
                forms.add(decoded)
    needles = set(forms)
    for form in forms:
        needles |= _encodings(form)
    return tuple(sorted(needles, key=lambda n: (-len(n), n)))


def _redact_text(text: str, needles: tuple[str, ...], shortest: int) -> str:
    if len(text) < shortest:
        return text
    for needle in needles:
        if needle in text:
            text = text.replace(needle, REDACTED)
    return text


def redact(value: Any, needles: tuple[str, ...]) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with every needle replaced, in keys too;
    shares nothing that changed with the original. Nesting is bounded by the caller
    (:func:`jupyter_exec.engine.outputs.bounded`)."""
    if not needles:
        return value
    return _redact(value, needles, min(len(n) for n in needles))


def _redact(value: Any, needles: tuple[str, ...], shortest: int) -> Any:
    if isinstance(value, str):
        return _redact_text(value, needles, shortest)
    if isinstance(value, dict):
        return {
            _redact_text(k, needles, shortest) if isinstance(k, str) else k: _redact(
                v, needles, shortest
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(_redact(v, needles, shortest) for v in value)
    return value


_Tables = tuple[tuple[str, ...], int, frozenset[str], dict[str, tuple[int, ...]]]


@functools.lru_cache(maxsize=32)
def _tables(secrets: tuple[str, ...], latin1: bool) -> _Tables:
    """What a :class:`Redactor` looks for, made once per policy (a new one per cell is free):
    the needles, the shortest one's length, every proper prefix of a needle, and for each
    character the lengths of the prefixes it ends, longest first. A character no prefix ends
    with (a newline) holds nothing back."""
    needles = secret_needles(secrets)
    if latin1:  # for raw bytes seen as latin-1 text: a chunk may end inside a character
        needles = tuple(n.encode("utf-8").decode("latin-1") for n in needles)
    prefixes: set[str] = set()
    ends: dict[str, set[int]] = {}
    for needle in needles:
        for length in range(1, len(needle)):
            prefixes.add(needle[:length])
            ends.setdefault(needle[length - 1], set()).add(length)
    shortest = min((len(n) for n in needles), default=0)
    lengths = {c: tuple(sorted(found, reverse=True)) for c, found in ends.items()}
    return needles, shortest, frozenset(prefixes), lengths


class Redactor:
    """Redacts one cell's outputs as they arrive; holds back what may be the start of a secret.

    :meth:`stream` takes each stream chunk and returns the text that may be shown now (the
    held-back end comes with a later chunk of the same stream); :meth:`release` returns what
    is held (before a ``clear_output``, and at the end of the cell); :meth:`value` redacts a
    whole output at once. With ``latin1=True`` it redacts raw output bytes (a process's),
    given as ``bytes.decode("latin-1")``: one character per byte, so nothing is lost where a
    chunk splits a character, and the needles are their UTF-8 bytes seen the same way.
    """

    __slots__ = ("_ends", "_held", "_prefixes", "_shortest", "needles")

    def __init__(self, secrets: Iterable[str], *, latin1: bool = False) -> None:
        self.needles, self._shortest, self._prefixes, self._ends = _tables(tuple(secrets), latin1)
        self._held: dict[str, str] = {}  # stream name -> the text it holds back

    def __bool__(self) -> bool:
        return bool(self.needles)

    def value(self, value: Any) -> Any:
        """An output (or any JSON-like value) with every needle replaced."""
        return _redact(value, self.needles, self._shortest) if self.needles else value

    def text(self, text: str) -> str:
        """A whole text with every needle replaced."""
        return _redact_text(text, self.needles, self._shortest) if self.needles else text

    def stream(self, name: str, chunk: str) -> str:
        """The part of ``chunk`` of stream ``name`` that may be shown now, redacted.

        Each stream holds back its own end, whatever comes between its chunks (the other
        stream, a display): a kernel's stdout and stderr interleave as it flushes them.
        """
        if not self.needles:
            return chunk
        held = self._held.pop(name, None)
        if held is not None:
            chunk = held + chunk
        text = _redact_text(chunk, self.needles, self._shortest)
        lengths = self._ends.get(text[-1]) if text else None
        if lengths:
            size = len(text)
            for length in lengths:
                if length <= size and text[size - length :] in self._prefixes:
                    self._held[name] = text[size - length :]
                    return text[: size - length]
        return text

    def holding(self) -> bool:
        """Whether any stream's text is held back."""
        return bool(self._held)

    def release(self) -> list[tuple[str, str]]:
        """The held-back text as (stream name, text): it did not grow into a secret."""
        held, self._held = self._held, {}
        return list(held.items())
