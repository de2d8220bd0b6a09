"""Reading the files people give us to run: scripts, markdown and notebooks, or a clear refusal.

Every way a file can be wrong ends here as one of our errors with a message
that says what to fix, never a ``UnicodeDecodeError``, ``RecursionError`` or
``IsADirectoryError`` from deep inside:

* a missing path, a folder, an unreadable file -> :class:`InvalidArgument`;
* bytes that are not in the file's encoding -> :class:`InvalidArgument` naming
  the byte, its offset, line and column. A Python script's own encoding
  declaration (PEP 263, ``# -*- coding: latin-1 -*-``) and a UTF-8 BOM are
  honoured, as Python itself honours them; everything else is UTF-8;
* text holding lone surrogates (a JSON ``"\\ud800"`` escape), which no kernel
  can be sent -> :class:`InvalidArgument` naming where;
* a notebook that is not JSON, nested deeper than any notebook is, not a
  notebook, or invalid -> :class:`NotebookError`.

The command line, the agent runner and replay all read through here.
"""

from __future__ import annotations

import io
import json
import os
import re
import tokenize
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.boundary.paths import read_regular
from jupyter_exec.exceptions import InvalidArgument, NotebookError, StorageError

if TYPE_CHECKING:
    import nbformat

__all__ = [
    "MAX_JSON_DEPTH",
    "check_text",
    "decode",
    "read_bytes",
    "read_notebook",
    "read_source",
]

MAX_JSON_DEPTH = 64
"""Deepest nesting of lists and objects a notebook may have (real ones stay under 15)."""

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def read_bytes(path: str | os.PathLike[str], what: str = "file", *, follow: bool = True) -> bytes:
    """The bytes of ``path``; a missing path, a folder or an unreadable file is refused.

    Read through :func:`jupyter_exec.boundary.paths.read_regular`: a FIFO or a device is refused
    before it is opened (never blocks), a file over the read limit before it is read, and
    without ``follow`` a final link too.
    """
    target = Path(path)
    try:
        return read_regular(target, follow=follow)
    except StorageError as exc:
        raise InvalidArgument(f"{exc} (reading the {what})") from None
    except FileNotFoundError:
        raise InvalidArgument(f"no {what} at {target} (check the path)") from None
    except IsADirectoryError:
        raise InvalidArgument(f"{target} is a folder; give the path of a {what}") from None
    except PermissionError:
        raise InvalidArgument(f"cannot read {target}: permission denied") from None
    except OSError as exc:
        if target.is_dir():
            raise InvalidArgument(f"{target} is a folder; give the path of a {what}") from None
        raise InvalidArgument(f"cannot read {target}: {exc.strerror or exc}") from None


def _position(data: bytes, offset: int) -> str:
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return f"line {line}, column {column}"


def decode(data: bytes, name: str, encoding: str = "utf-8") -> str:
    """``data`` decoded; a bad byte is refused with its value, offset, line and column."""
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1]
        raise InvalidArgument(
            f"{name} is not valid {encoding}: byte 0x{bad.hex()} at offset {exc.start} "
            f"({_position(data, exc.start)}). Save the file as UTF-8"
            + (
                ", or declare its encoding on the first or second line (# -*- coding: latin-1 -*-)"
                if name.endswith(".py")
                else ""
            )
        ) from None
    except LookupError:
        raise InvalidArgument(f"{name} declares an unknown encoding {encoding!r}") from None
    check_text(text, name)
    return text


def check_text(text: str, name: str) -> str:
    """``text`` itself, unless it holds a lone surrogate (no kernel can be sent one)."""
    match = _SURROGATE_RE.search(text)
    if match is not None:
        line = text.count("\n", 0, match.start()) + 1
        raise InvalidArgument(
            f"{name} holds a lone surrogate U+{ord(match.group()):04X} at character "
            f"{match.start()} (line {line}): it is not a character; remove it or write the "
            "pair it belongs to"
        )
    return text


def _python_encoding(data: bytes, name: str) -> str:
    """The encoding a Python script declares (PEP 263), or UTF-8 (with its BOM) when none."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        if "unknown encoding" in str(exc.msg) or "encoding problem" in str(exc.msg):
            raise InvalidArgument(f"{name}: {exc.msg}; fix the coding declaration") from None
        return "utf-8"  # no declaration and not UTF-8: decode() names the bad byte
    return encoding


def read_source(path: str | os.PathLike[str]) -> str:
    """The text of a script or markdown file to run; ``.py`` files honour PEP 263."""
    target = Path(path)
    data = read_bytes(target)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise InvalidArgument(
            f"{target.name} holds a NUL byte at offset {nul} ({_position(data, nul)}): it is "
            "not a text file, or it is UTF-16; save it as UTF-8"
        )
    if target.suffix.lower() in (".py", ".pyw"):
        encoding = _python_encoding(data, target.name)
        if encoding == "utf-8-sig":
            data, encoding = data[3:], "utf-8"
        return decode(data, target.name, encoding)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return decode(data, target.name)


def _depth(value: Any, limit: int) -> int:
    """How deeply ``value`` nests lists and dicts, stopping once past ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def _load_json(text: str, name: str) -> Any:
    too_deep = (
        f"{name} nests lists and objects more than {MAX_JSON_DEPTH} deep; "
        "no notebook does, so this file is not one"
    )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotebookError(
            f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}"
        ) from None
    except RecursionError:  # the decoder guards its own recursion and says so
        raise NotebookError(too_deep) from None
    if _depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:  # before anything walks it recursively
        raise NotebookError(too_deep)
    return value


def _strings(value: Any) -> Any:
    """Every string inside ``value`` (for the surrogate check)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _give_cells_ids(raw: dict[str, Any]) -> None:
    """Cells of an nbformat 4.5+ notebook without an ``id`` get one, as nbformat itself does."""
    minor = raw.get("nbformat_minor")
    cells = raw.get("cells")
    if not isinstance(minor, int) or minor < 5 or not isinstance(cells, list):
        return
    for cell in cells:
        if isinstance(cell, dict) and "id" not in cell:
            cell["id"] = uuid.uuid4().hex[:8]


def read_notebook(path: str | os.PathLike[str]) -> nbformat.NotebookNode:
    """Any notebook as v4 (v3 upgraded), or :class:`NotebookError` saying what is wrong."""
    import nbformat  # imported when needed: it is slow to import

    target = Path(path)
    try:
        data = read_bytes(target, "notebook", follow=False)  # it may sit where a kernel writes
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        text = decode(data, target.name)
    except InvalidArgument as exc:
        raise NotebookError(str(exc)) from None
    raw = _load_json(text, target.name)
    if not isinstance(raw, dict) or "nbformat" not in raw:
        raise NotebookError(f"{target} is JSON but not a notebook (no 'nbformat' field)")
    major = raw.get("nbformat")
    if not isinstance(major, int) or isinstance(major, bool) or major < 3 or major > 4:
        raise NotebookError(f"{target} is nbformat {major!r}; only versions 3 and 4 can be read")
    if major == 4:  # validated as written first: a converter's crash would say less
        _give_cells_ids(raw)
        try:
            nbformat.validate(raw, version=4)
        except nbformat.ValidationError as exc:
            raise NotebookError(f"{target} is not a valid notebook: {exc.message}") from None
        except Exception as exc:  # nbformat's validator trips over some shapes itself
            raise NotebookError(
                f"{target} is not a valid notebook ({type(exc).__name__}: {exc}); "
                "its 'cells' must be a list of cell objects"
            ) from None
    for string in _strings(raw):
        try:
            check_text(string, target.name)
        except InvalidArgument as exc:
            raise NotebookError(str(exc)) from None
    if major == 4:  # already parsed and validated: no second pass over a large file
        from nbformat.v4.nbjson import JSONReader  # lines joined, transient fields dropped

        same: nbformat.NotebookNode = JSONReader().to_notebook(raw)
        return same
    try:
        nb: nbformat.NotebookNode = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        raise NotebookError(f"{target} is not a valid notebook: {exc.message}") from None
    except Exception as exc:  # nbformat's converters raise assorted types
        raise NotebookError(f"{target} could not be read as a v4 notebook: {exc}") from None
    return nb
