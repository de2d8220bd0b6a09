"""Checks that the examples in the documentation are at least well formed.

Python examples must compile (top-level ``await`` allowed, as in an async notebook or an
``asyncio.run`` sketch); ``jupyter-exec`` command lines in shell examples must parse with the
real CLI parser (``jupyter_exec.cli.build_parser``); JSON examples must load. Running every
example would need kernels, Docker and servers; the test suite does that. This catches the
drift that happens when an option is renamed or a snippet is edited by hand.

Used by the Sphinx extension :mod:`jx_examples` (every page) and by ``readme_check.py``
(the README), so both apply the same rules. No Sphinx import here.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

PYTHON_LANGUAGES = frozenset({"python", "py", "python3", "ipython", "ipython3"})
SHELL_LANGUAGES = frozenset({"bash", "sh", "shell", "console", "shell-session", "zsh"})
JSON_LANGUAGES = frozenset({"json"})
COMMAND = "jupyter-exec"


@dataclass(frozen=True)
class Problem:
    """One example that does not hold: where in the block, and what is wrong."""

    line: int  # 1-based, within the block
    message: str


def kind_of(language: str | None) -> str | None:
    """``"python"``, ``"shell"``, ``"json"`` or None (not checked) for a code block language."""
    lang = (language or "").strip().lower()
    if lang in PYTHON_LANGUAGES:
        return "python"
    if lang in SHELL_LANGUAGES:
        return "shell"
    if lang in JSON_LANGUAGES:
        return "json"
    return None


def check_python(code: str) -> list[Problem]:
    """The code compiles (as a module; top-level ``await`` allowed)."""
    try:
        compile(code, "<example>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except SyntaxError as exc:
        return [Problem(exc.lineno or 1, f"Python example does not compile: {exc.msg}")]
    return []


def check_json(code: str) -> list[Problem]:
    """The block is one JSON document."""
    try:
        json.loads(code)
    except json.JSONDecodeError as exc:
        return [Problem(exc.lineno, f"JSON example does not load: {exc.msg}")]
    return []


def command_lines(code: str) -> Iterator[tuple[int, str]]:
    """``(line number, command line)`` for each ``jupyter-exec`` invocation in a shell block.

    A ``$ `` prompt is dropped, backslash continuations are joined; lines that are output
    (in a ``console`` block) or other commands are skipped.
    """
    lines = code.splitlines()
    i = 0
    while i < len(lines):
        start = i
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        i += 1
        text = line.strip()
        if text.startswith("$ "):
            text = text[2:].lstrip()
        if text == COMMAND or text.startswith(COMMAND + " "):
            yield start + 1, text


@lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    from jupyter_exec.cli import build_parser  # the real one: new options appear by themselves

    parser: argparse.ArgumentParser = build_parser()
    return parser


def check_command(text: str) -> str | None:
    """None if ``text`` (a ``jupyter-exec ...`` line) parses, else argparse's complaint."""
    try:
        argv = shlex.split(text, comments=True)
    except ValueError as exc:
        return f"cannot split the command line: {exc}"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            _parser().parse_args(argv[1:])
    except SystemExit as exc:
        if exc.code not in (0, None):  # --help and --version exit 0
            lines = err.getvalue().strip().splitlines()
            return lines[-1] if lines else f"argparse exited with {exc.code}"
    return None


def check_shell(code: str) -> tuple[list[Problem], int]:
    """Problems of the ``jupyter-exec`` lines in a shell block, and how many were checked."""
    problems = []
    checked = 0
    for number, text in command_lines(code):
        checked += 1
        complaint = check_command(text)
        if complaint is not None:
            problems.append(Problem(number, f"CLI example does not parse: {text!r}: {complaint}"))
    return problems, checked


def check_block(language: str | None, code: str) -> tuple[str | None, list[Problem], int]:
    """Check one code block: ``(kind, problems, examples checked)``; kind None = not checked."""
    kind = kind_of(language)
    if kind == "python":
        return kind, check_python(code), 1
    if kind == "json":
        return kind, check_json(code), 1
    if kind == "shell":
        problems, checked = check_shell(code)
        return kind, problems, checked
    return None, [], 0
