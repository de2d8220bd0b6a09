"""Session names and the file names derived from them, in one place.

A session's name is a file name: it names the notebook ``<name>.ipynb`` and
the folder of saved outputs ``<name>_files`` (nbconvert's convention), and
every front end (Python, CLI, REST, MCP) accepts names from people or models.
So a name is checked here, once, and refused with
:class:`~jupyter_exec.InvalidArgument` when it could not be a plain, visible,
portable file name: no path separators, no control characters, no
bidirectional overrides or isolates (which make ``evil‮gpj.py`` read as
``evilyp.jpg``), no lone surrogates (which cannot be encoded).

The same text checks (:func:`check_text`) serve folder names given to the
server and code sent to a kernel.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from jupyter_exec.exceptions import InvalidArgument

__all__ = [
    "MAX_NAME_LENGTH",
    "backup_notebook_name",
    "check_encodable",
    "check_text",
    "checkpoints_folder",
    "default_session_name",
    "files_folder",
    "held_back_file_name",
    "large_output_prefix",
    "notebook_name",
    "output_file_name",
    "replayed_notebook_name",
    "safe_name",
    "script_file_name",
    "unsafe_character",
    "validate_name",
]

MAX_NAME_LENGTH = 100
"""Longest session name (it is a file name, with ``.ipynb`` or ``_files`` after it)."""

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

_BIDI = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Marks and embedding / override / isolate controls that reorder how text is shown."""


def unsafe_character(text: str, *, allow_newlines: bool = False) -> tuple[int, str] | None:
    """The first character of ``text`` a name or path must not hold, as (position, why).

    Control characters (tabs and newlines too, unless ``allow_newlines``),
    bidirectional controls, and lone surrogates (text that cannot be encoded
    as UTF-8). ``None`` when there is none.
    """
    for index, char in enumerate(text):
        if allow_newlines and char in "\n\r\t":
            continue
        code = ord(char)
        if 0xD800 <= code <= 0xDFFF:
            return index, f"a lone surrogate (U+{code:04X}), which is not valid Unicode text"
        if char in _BIDI:
            return index, f"a bidirectional control character (U+{code:04X})"
        if unicodedata.category(char) == "Cc":
            return index, f"a control character (U+{code:04X})"
    return None


def check_text(text: str, what: str, *, allow_newlines: bool = False) -> str:
    """``text`` unless it holds a character :func:`unsafe_character` refuses.

    Raises :class:`~jupyter_exec.InvalidArgument` naming ``what`` and the
    position, so the caller knows what to fix.
    """
    found = unsafe_character(text, allow_newlines=allow_newlines)
    if found is not None:
        index, why = found
        raise InvalidArgument(f"{what} has {why} at position {index}; remove it")
    return text


def check_encodable(text: str, what: str) -> str:
    """``text`` unless it holds lone surrogates (text no kernel or file can receive).

    Cheaper than :func:`check_text` (one encode), for code of any size.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"{what} has a lone surrogate (U+{ord(text[exc.start]):04X}) at position "
            f"{exc.start}, which is not valid Unicode text; remove it, or pass binary data "
            "another way (a file, base64)"
        ) from None
    return text


def validate_name(name: str) -> str:
    """``name`` if it can name a session (and so its files); else :class:`InvalidArgument`."""
    if not isinstance(name, str):
        raise InvalidArgument(f"a session name must be a str, not {type(name).__name__}")
    if not name:
        raise InvalidArgument("the session name is empty; give letters, digits, '.', '_' or '-'")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidArgument(
            f"the session name is {len(name)} characters long; use at most {MAX_NAME_LENGTH}"
        )
    if "/" in name or "\\" in name or name in (".", ".."):
        raise InvalidArgument(
            f"the session name {name!r} is a path; give a plain name (the work dir says where)"
        )
    check_text(name, f"the session name {name!r}")
    if not _NAME_RE.fullmatch(name):
        raise InvalidArgument(
            f"invalid session name {name!r}: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return name


def safe_name(text: str) -> str:
    """A valid session name made from ``text`` (e.g. a file's stem)."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in text)
    return (cleaned.strip("-._") or "session")[:MAX_NAME_LENGTH]


def files_folder(name: str) -> str:
    """The work-dir folder of a session's saved outputs (nbconvert's ``<notebook>_files``)."""
    return f"{name}_files"


def checkpoints_folder(name: str) -> str:
    """``.<name>_checkpoints``: the work-dir folder of a session's durable checkpoints.

    Hidden, as Jupyter's own ``.ipynb_checkpoints`` is: it is the session's
    machinery, not its results, and every automatic checkpoint adds a file per
    variable to it. A dot name keeps it out of ``ls``, JupyterLab's file
    browser, the MCP ``list_files`` tool and the scan for the files a cell made
    (all of which skip hidden names), and out of code globbing ``*``, for every
    front end at once.
    """
    return f".{name}_checkpoints"


def notebook_name(name: str) -> str:
    """The file name of a session's notebook."""
    return f"{name}.ipynb"


def default_session_name(
    work_dir: str | os.PathLike[str],
    *,
    taken: Callable[[str], bool] | None = None,
    now: datetime | None = None,
) -> str:
    """``session-<date>-<time>``, numbered on while its notebook or files folder exists
    in ``work_dir`` (or ``taken(name)`` says it is reserved elsewhere)."""
    folder = Path(work_dir)
    base = (now or datetime.now()).strftime("session-%Y%m%d-%H%M%S")
    name, n = base, 1
    while (
        (folder / notebook_name(name)).exists()
        or (folder / files_folder(name)).exists()
        or (taken is not None and taken(name))
    ):
        n += 1
        name = f"{base}-{n}"
    return name


def output_file_name(cell_index: int, stem: str, ext: str) -> str:
    """``cell-<NNN>-<stem><ext>``: a file saved for cell ``cell_index`` (0-based)."""
    return f"cell-{cell_index + 1:03d}-{stem}{ext}"


def held_back_file_name(cell_index: int, stream: str, tag: str) -> str:
    """The hidden file where the kernel's output guard puts stream text past the budget."""
    return f".{output_file_name(cell_index, stream, '')}-{tag}.rest"


def large_output_prefix(cell_index: int, tag: str) -> str:
    """The start of the names the kernel's output guard saves too-large rich outputs under."""
    return output_file_name(cell_index, f"large-{tag}", "")


def script_file_name(number: int, ext: str) -> str:
    """``script-<NNN><ext>``: the ``number``-th script a session ran."""
    return f"script-{number:03d}{ext}"


def replayed_notebook_name(stem: str) -> str:
    """Where a replay of ``<stem>.ipynb`` is recorded (never the original)."""
    return f"{stem}.replayed.ipynb"


def backup_notebook_name(stem: str, now: datetime | None = None) -> str:
    """Where a notebook is copied before a resume cuts it short."""
    return f"{stem}.before-resume-{(now or datetime.now()).strftime('%Y%m%d-%H%M%S')}.ipynb"
