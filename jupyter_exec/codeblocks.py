"""Code to run, from the files and messages people give us.

* ``extract_code_blocks(markdown)``: fenced blocks in order, with a normalised
  language (``python`` or ``sh``); untagged blocks are inferred.
* ``cells_from_file(path)``: the cells of a ``.py`` script (split on ``# %%``
  markers, as VS Code, Spyder and jupytext do), a ``.md`` file, or an
  ``.ipynb`` notebook's code cells.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from jupyter_exec.exceptions import NotebookError

__all__ = ["CodeBlock", "cells_from_file", "extract_code_blocks", "normalise_language"]

_PYTHON = frozenset({"python", "py", "python3", "ipython", "ipython3", "pycon"})
_SHELL = frozenset({"sh", "bash", "shell", "console", "zsh", "shell-session"})
_FENCE_RE = re.compile(
    r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n"
    r"(?P<body>.*?)"
    r"^(?P=indent)(?P=fence)[ \t]*$",
    re.DOTALL | re.MULTILINE,
)
_SHELL_HINT_RE = re.compile(
    r"^\s*(\$ |pip |apt(-get)? |ls\b|cd |echo |cat |mkdir |curl |wget |git )"
)
_CELL_MARK_RE = re.compile(r"^# ?%%.*$", re.MULTILINE)


@dataclass(frozen=True)
class CodeBlock:
    """A piece of code and the language it is in (``python``, ``sh`` or as written)."""

    code: str
    language: str = "python"


def normalise_language(tag: str, code: str = "") -> str:
    """``python`` / ``sh`` for the names people use for them; inferred when ``tag`` is empty."""
    word = tag.strip().split()[0].lower() if tag.strip() else ""
    word = word.lstrip("{.").rstrip("}")
    if word in _PYTHON:
        return "python"
    if word in _SHELL:
        return "sh"
    if word:
        return word
    first = next((line for line in code.splitlines() if line.strip()), "")
    return "sh" if _SHELL_HINT_RE.match(first) or first.startswith("#!/bin/") else "python"


def extract_code_blocks(markdown: str) -> list[CodeBlock]:
    """Fenced code blocks of ``markdown`` in order (``` and ~~~ fences, any length)."""
    blocks = []
    for match in _FENCE_RE.finditer(markdown):
        code = match.group("body")
        language = normalise_language(match.group("info"), code)
        if language == "sh":
            code = "\n".join(
                line[2:] if line.startswith("$ ") else line for line in code.splitlines()
            )
            code += "\n" if code and not code.endswith("\n") else ""
        blocks.append(CodeBlock(code=code, language=language))
    return blocks


def _python_cells(source: str) -> list[CodeBlock]:
    if not _CELL_MARK_RE.search(source):
        return [CodeBlock(source)]
    parts = _CELL_MARK_RE.split(source)
    return [CodeBlock(p.strip("\n") + "\n") for p in parts if p.strip()]


def cells_from_file(path: Path) -> list[CodeBlock]:
    """The code to run from a ``.py``, ``.md`` or ``.ipynb`` file, in order."""
    suffix = path.suffix.lower()
    text = path.read_text(encoding="utf-8")
    if suffix == ".ipynb":
        try:
            nb = nbformat.reads(text, as_version=4)
        except Exception as exc:  # nbformat raises several unrelated types
            raise NotebookError(f"{path} is not a readable notebook: {exc}") from exc
        language = normalise_language(nb.metadata.get("kernelspec", {}).get("language", "python"))
        return [
            CodeBlock(c.source, language)
            for c in nb.cells
            if c.cell_type == "code" and c.source.strip()
        ]
    if suffix in (".md", ".markdown"):
        return extract_code_blocks(text)
    if suffix in (".sh", ".bash"):
        return [CodeBlock(text, "sh")]
    return _python_cells(text)


def cell_source(block: CodeBlock) -> str:
    """Source for an IPython kernel: shell blocks become ``%%bash`` cells.

    The ``%%bash`` magic runs in the kernel's own environment (its PATH, its
    cwd, its container), so ``pip install x`` in a shell block makes ``import
    x`` work in the next Python block, and the recorded notebook replays as is.
    """
    if block.language == "sh":
        return "%%bash\n" + block.code
    return block.code
