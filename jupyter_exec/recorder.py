"""The session notebook: a valid nbformat v4 file, rewritten atomically after every cell.

Each save writes the whole notebook to a temporary file beside it and renames
it over the old one, so a reader (JupyterLab, a crash-recovery) only ever sees
a complete notebook, and a crash of this process loses at most the cell in
flight. To keep the cost of a save flat as the notebook grows, each cell is
serialised and encoded once, when it is added or changed; a save hands the
cached bytes to one ``writev`` (no multi-megabyte temporary strings), so what
grows with the notebook is only the kernel's copy into the page cache. The
layout matches what ``nbformat.write`` produces (sorted keys, one-space
indent, multi-line strings split into lines), so recordings diff well in git.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import uuid
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.exceptions import NotebookError

if TYPE_CHECKING:
    import nbformat

__all__ = ["NotebookRecorder", "new_cell_id", "read_notebook"]

NBFORMAT_MINOR = 5


def new_cell_id() -> str:
    return uuid.uuid4().hex[:12]


_SPLIT_NON_TEXT_MIMES = frozenset({"application/javascript", "image/svg+xml"})


def _is_split_mime(mime: str) -> bool:
    """Whether nbformat stores ``mime`` as a list of lines (text formats; never base64 or JSON)."""
    return mime.startswith("text/") or mime in _SPLIT_NON_TEXT_MIMES


def _lines(text: Any) -> Any:
    return text.splitlines(keepends=True) if isinstance(text, str) else text


def split_lines(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``cell`` with multi-line strings as lists of lines, as Jupyter stores them."""
    out = copy.deepcopy(dict(cell))
    out["source"] = _lines(out.get("source", ""))
    for output in out.get("outputs", ()):
        if "text" in output:
            output["text"] = _lines(output["text"])
        data = output.get("data")
        if data:
            for mime, value in data.items():
                if _is_split_mime(mime):
                    data[mime] = _lines(value)
    return out


_CELL_SEPARATOR = b",\n  "
_IOV_MAX = 1024  # the POSIX minimum for writev's vector length


def _write_all(fd: int, chunks: list[bytes]) -> None:
    """Write every chunk with ``os.writev``, a vector at a time, resuming after short writes."""
    pending = deque(memoryview(c) for c in chunks if c)
    while pending:
        batch = [pending[i] for i in range(min(_IOV_MAX, len(pending)))]
        written = os.writev(fd, batch)
        while written:
            head = pending[0]
            if written >= len(head):
                written -= len(head)
                pending.popleft()
            else:
                pending[0] = head[written:]
                written = 0


def _dumps(obj: Any, indent: str) -> str:
    text = json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False, separators=(",", ": "))
    return text.replace("\n", "\n" + indent)


class NotebookRecorder:
    """Holds a notebook in memory as cached JSON and keeps its file in step."""

    def __init__(
        self,
        path: Path,
        metadata: Mapping[str, Any],
        cells: list[dict[str, Any]] | None = None,
        *,
        fsync: bool = False,
    ) -> None:
        self.path = path
        self.fsync = fsync
        self._metadata: dict[str, Any] = dict(metadata)
        self._cells: list[dict[str, Any]] = []
        self._json: list[str] = []
        self._encoded: list[bytes] = []
        for cell in cells or ():
            self._add(cell)

    # -- building ----------------------------------------------------------------

    def _add(self, cell: dict[str, Any]) -> int:
        text = _dumps(split_lines(cell), "  ")
        self._cells.append(cell)
        self._json.append(text)
        self._encoded.append(text.encode("utf-8"))
        return len(self._cells) - 1

    def append(self, cell: dict[str, Any], *, save: bool = True) -> int:
        """Add a cell at the end (and save); returns its index."""
        index = self._add(cell)
        if save:
            self.save()
        return index

    def replace(self, index: int, cell: dict[str, Any], *, save: bool = True) -> None:
        text = _dumps(split_lines(cell), "  ")
        self._cells[index] = cell
        self._json[index] = text
        self._encoded[index] = text.encode("utf-8")
        if save:
            self.save()

    def refresh(self, index: int, *, save: bool = True) -> None:
        """Re-serialise cell ``index`` after its dict was changed in place."""
        self.replace(index, self._cells[index], save=save)

    def set_metadata(self, key: str, value: Any) -> None:
        self._metadata[key] = value

    @property
    def metadata(self) -> dict[str, Any]:
        return self._metadata

    @property
    def cells(self) -> list[dict[str, Any]]:
        return self._cells

    def __len__(self) -> int:
        return len(self._cells)

    # -- disk --------------------------------------------------------------------

    def _chunks(self) -> list[bytes]:
        """The file's bytes as a list of pieces, mostly the cached cells (what ``save`` writes)."""
        tail = (
            b' "metadata": '
            + _dumps(self._metadata, " ").encode("utf-8")
            + f',\n "nbformat": 4,\n "nbformat_minor": {NBFORMAT_MINOR}\n}}\n'.encode()
        )
        if not self._encoded:
            return [b'{\n "cells": [],\n', tail]
        chunks = [b'{\n "cells": [\n  ']
        for index, cell in enumerate(self._encoded):
            if index:
                chunks.append(_CELL_SEPARATOR)
            chunks.append(cell)
        chunks.append(b"\n ],\n")
        chunks.append(tail)
        return chunks

    def render(self) -> str:
        """The whole file as text (what ``save`` writes)."""
        return b"".join(self._chunks()).decode("utf-8")

    def save(self) -> None:
        """Write the notebook atomically (temp file + rename in the same folder).

        On failure (a full disk, a vanished folder) the previous file is left
        intact and :class:`~jupyter_exec.NotebookError` says why; the cells stay
        in memory, so the next successful save records them too.
        """
        tmp = self.path.with_name(f".{self.path.name}.jx-tmp")
        try:
            chunks = self._chunks()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, chunks)
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise NotebookError(
                f"could not save the session notebook {self.path}: {exc.strerror or exc}; "
                f"the file on disk still holds its previous {self._saved_cells} cell(s), "
                "and the unsaved cells are kept in memory for the next save"
            ) from exc
        self._saved_cells = len(self._cells)

    _saved_cells = 0

    def notebook(self) -> nbformat.NotebookNode:
        """The notebook as an ``nbformat`` node (a copy)."""
        import nbformat  # imported when needed: it is slow to import

        node: nbformat.NotebookNode = nbformat.from_dict(
            {
                "cells": copy.deepcopy(self._cells),
                "metadata": copy.deepcopy(self._metadata),
                "nbformat": 4,
                "nbformat_minor": NBFORMAT_MINOR,
            }
        )
        return node


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read any notebook as v4, with errors that say what is wrong.

    Older notebooks (v3) are upgraded as nbformat can; a file that is not
    JSON, not a notebook, or fails validation raises
    :class:`~jupyter_exec.NotebookError`.
    """
    import nbformat  # imported when needed: it is slow to import

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotebookError(f"no notebook at {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise NotebookError(f"cannot read {path}: {exc}") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotebookError(f"{path} is not valid JSON (line {exc.lineno}): {exc.msg}") from None
    if not isinstance(raw, dict) or "nbformat" not in raw:
        raise NotebookError(f"{path} is JSON but not a notebook (no 'nbformat' field)")
    major = raw.get("nbformat")
    if not isinstance(major, int) or major < 3 or major > 4:
        raise NotebookError(f"{path} is nbformat {major!r}; only versions 3 and 4 can be read")
    try:
        nb: nbformat.NotebookNode = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        raise NotebookError(f"{path} is not a valid notebook: {exc.message}") from None
    except Exception as exc:  # nbformat's converters raise assorted types
        raise NotebookError(f"{path} could not be read as a v4 notebook: {exc}") from exc
    return nb
