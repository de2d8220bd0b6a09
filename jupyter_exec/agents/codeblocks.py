"""Code to run, from the files and messages people (and models) give us.

* ``extract_code_blocks(message)``: fenced blocks of a markdown message, or of a
  chat message's list of content parts, in order, with a normalised language
  (``python`` or ``sh``; untagged blocks are inferred) and the target of a
  ``# filename: <name>`` first-line directive.
* ``cells_from_file(path)``: the cells of a ``.py`` script (split on ``# %%``
  markers, as VS Code, Spyder and jupytext do), a ``.md`` file, or an
  ``.ipynb`` notebook's code cells.
* ``prepare_block(block, work_dir)``: what to send to an IPython kernel for a
  block: its file written first (confined to the work dir), shell as ``%%bash``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_exec.boundary.paths import write_bytes
from jupyter_exec.engine.language_records import record_of_tag
from jupyter_exec.engine.languages import normalise_language
from jupyter_exec.engine.sources import read_notebook, read_source
from jupyter_exec.engine.store import confined_path, writable_path
from jupyter_exec.exceptions import WorkDirError

__all__ = [
    "RUNNABLE_LANGUAGES",
    "CodeBlock",
    "cell_source",
    "cells_from_file",
    "extract_code_blocks",
    "message_text",
    "normalise_language",
    "prepare_block",
    "save_block",
]

RUNNABLE_LANGUAGES = frozenset({"python", "sh"})
"""Languages an IPython kernel runs: Python itself, and shell through ``%%bash``."""

# Any indentation: a block inside a list item or a quote-less nested paragraph is
# indented, and models write them so; the body loses the opening fence's indent.
_FENCE_RE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n"
    r"(?P<body>.*?)"
    r"^[ \t]*(?P=fence)[ \t]*$",
    re.DOTALL | re.MULTILINE,
)
_CELL_MARK_RE = re.compile(r"^# ?%%.*$", re.MULTILINE)
# AG2's convention, which models are prompted to follow: the block's first line
# is a comment naming the file the block should be saved as, in the comment
# syntax of its language, either "filename: <name>" or just a file name.
_SHORT_EXT = (  # the short form (a bare name) must end like a source or data file
    "py|pyw|sh|bash|js|mjs|ts|html?|css|json|md|txt|csv|tsv|sql|ya?ml|toml|ini|cfg|r|R|jl|"
    "xml|svg|c|h|cc|cpp|hpp|java|go|rs|rb|php|lua|pl|ipynb"
)
_FILENAME_RE = re.compile(
    r"^[ \t]*(?:#|//|/\*|<!--|--)[ \t]*"
    r"(?:filename:[ \t]*(?P<name>\S(?:.*?\S)?)|(?P<short>[\w.\-/]*\w\.(?:" + _SHORT_EXT + r")))"
    r"[ \t]*(?:\*/|-->)?[ \t]*$"
)


@dataclass(frozen=True)
class CodeBlock:
    """A piece of code and the language it is in (``python``, ``sh`` or as written).

    ``filename`` is the work-dir-relative file a ``# filename: <name>`` first
    line asked for, or ``None``.
    """

    code: str
    language: str = "python"
    filename: str | None = None

    @classmethod
    def from_code(cls, code: str, language: str = "python") -> CodeBlock:
        """A block of ``code``, with the file its ``# filename:`` first line names, if any."""
        return cls(code=code, language=language, filename=filename_directive(code))

    @property
    def runnable(self) -> bool:
        """Whether an IPython kernel can run this block (Python or shell)."""
        return self.language in RUNNABLE_LANGUAGES


def filename_directive(code: str) -> str | None:
    """The file a block's first line names (blank lines before it allowed).

    ``# filename: app.py``, the short ``# app.py``, and the same in other
    languages' comments: ``// filename: main.js``, ``/* style.css */``,
    ``<!-- filename: index.html -->``, ``-- query.sql``.
    """
    first = next((line for line in code.splitlines() if line.strip()), "")
    match = _FILENAME_RE.match(first)
    if match is None:
        return None
    return (match.group("name") or match.group("short")).strip("`'\"")


def message_text(message: str | Iterable[Any] | None) -> str:
    """The text of a chat message: a string, or the ``text`` parts of a list of content parts.

    Image and other non-text parts are skipped (they hold no code); text parts
    are joined with blank lines so a fence never straddles two parts by accident.
    """
    if message is None:
        return ""
    if isinstance(message, str):
        return message
    texts: list[str] = []
    for part in message:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping) and part.get("type", "text") == "text":
            text = part.get("text")
            if isinstance(text, str):
                texts.append(text)
    return "\n\n".join(texts)


def extract_code_blocks(message: str | Iterable[Any] | None) -> list[CodeBlock]:
    """Fenced code blocks of ``message`` in order (``` and ~~~ fences, any length).

    ``message`` is markdown text or a list of content parts as chat APIs send
    them (``{"type": "text", "text": ...}``; other parts are ignored).
    """
    blocks = []
    for match in _FENCE_RE.finditer(message_text(message)):
        code = _dedent(match.group("body"), len(match.group("indent")))
        language = normalise_language(match.group("info"), code)
        if language == "sh":
            code = "\n".join(
                line[2:] if line.startswith("$ ") else line for line in code.splitlines()
            )
            code += "\n" if code and not code.endswith("\n") else ""
        blocks.append(CodeBlock.from_code(code, language))
    return blocks


def _dedent(body: str, width: int) -> str:
    """``body`` without the opening fence's indentation (at most ``width`` blanks a line)."""
    if not width:
        return body
    lines = body.split("\n")
    return "\n".join(line[min(width, len(line) - len(line.lstrip(" \t"))) :] for line in lines)


def _python_cells(source: str) -> list[CodeBlock]:
    if not _CELL_MARK_RE.search(source):
        return [CodeBlock(source)] if source.strip() else []
    parts = _CELL_MARK_RE.split(source)
    return [CodeBlock(p.strip("\n") + "\n") for p in parts if p.strip()]


def cells_from_file(path: str | os.PathLike[str]) -> list[CodeBlock]:
    """The code to run from a ``.py``, ``.md`` or ``.ipynb`` file, in order.

    Unreadable, mis-encoded or malformed files raise
    :class:`~jupyter_exec.InvalidArgument` or :class:`~jupyter_exec.NotebookError`
    saying what to fix (see :mod:`jupyter_exec.engine.sources`).
    """
    suffix = Path(path).suffix.lower()
    if suffix == ".ipynb":
        nb = read_notebook(path)
        kernelspec = nb.metadata.get("kernelspec") or {}
        language = normalise_language(str(kernelspec.get("language") or "python"))
        return [
            CodeBlock(c.source, language)
            for c in nb.cells
            if c.cell_type == "code" and c.source.strip()
        ]
    text = read_source(path)
    if suffix in (".md", ".markdown"):
        return extract_code_blocks(text)
    if suffix in (".sh", ".bash"):
        return [CodeBlock(text, "sh")] if text.strip() else []
    return _python_cells(text)


def cell_source(block: CodeBlock) -> str:
    """Source for an IPython kernel: shell blocks become ``%%bash`` cells.

    The ``%%bash`` magic runs in the kernel's own environment (its PATH, its
    cwd, its container), so ``pip install x`` in a shell block makes ``import
    x`` work in the next Python block, and the recorded notebook replays as is.
    """
    record = record_of_tag(block.language)
    magic = record.ipython_magic if record is not None else ""
    return f"{magic}\n{block.code}" if magic else block.code


def save_block(block: CodeBlock, work_dir: str | os.PathLike[str]) -> Path | None:
    """Write ``block`` to the file its ``# filename:`` directive names; return the path.

    The path is taken relative to ``work_dir`` and may not leave it (``..``,
    absolute paths and symlinks pointing out are refused with
    :class:`~jupyter_exec.WorkDirError`); missing folders are created. Returns
    ``None`` for a block without a directive.
    """
    if block.filename is None:
        return None
    root = Path(work_dir)
    if Path(block.filename).is_absolute():
        raise WorkDirError(
            f"# filename: {block.filename} is absolute; name a file inside the work dir"
        )
    path = confined_path(root, block.filename)
    if path == root.absolute() or path.is_dir():
        raise WorkDirError(f"# filename: {block.filename} names a folder, not a file")
    path = writable_path(root, block.filename)
    text = block.code if block.code.endswith("\n") or not block.code else block.code + "\n"
    write_bytes(root.absolute(), path.relative_to(root.absolute()), text.encode("utf-8"))
    return path


def prepare_block(block: CodeBlock, work_dir: str | os.PathLike[str]) -> str:
    """The cell to run for ``block``: its ``# filename:`` file written first, then the source.

    The block still runs in the kernel (so its definitions join the session's
    state) rather than as a separate script; the file is there for the code to
    import, for the user to keep, and for later blocks that run it.
    """
    save_block(block, work_dir)
    return cell_source(block)
