"""Redaction of a network policy's secrets from what a cell recorded: the second line of defence.

The first line is that secrets never enter the kernel (the proxy adds them on the host). But an
allowed host may echo a header back (a debugging endpoint, an error page quoting the request),
and then the kernel holds the secret and may print it. So before a cell's outputs reach the
notebook, the Execution or saved files, every secret value is replaced by :data:`REDACTED`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["REDACTED", "redact", "secret_needles"]

REDACTED = "[secret redacted]"
MIN_TOKEN = 8
"""A credential's token part (after ``Bearer``) is redacted on its own when at least this long."""


def secret_needles(values: Iterable[str]) -> tuple[str, ...]:
    """The strings to look for: each header value, and its last word (the token of
    ``Bearer <token>``) when that is long enough not to be an ordinary word; longest first."""
    needles: set[str] = set()
    for value in values:
        if value:
            needles.add(value)
        token = value.rsplit(" ", 1)[-1]
        if len(token) >= MIN_TOKEN:
            needles.add(token)
    return tuple(sorted(needles, key=len, reverse=True))


def redact(value: Any, needles: tuple[str, ...]) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with every needle replaced; shares nothing
    that changed with the original."""
    if not needles:
        return value
    if isinstance(value, str):
        for needle in needles:
            if needle in value:
                value = value.replace(needle, REDACTED)
        return value
    if isinstance(value, dict):
        return {k: redact(v, needles) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(v, needles) for v in value)
    return value
