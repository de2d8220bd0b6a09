"""The session notebook: a valid nbformat v4 file, replaced atomically after every cell.

A reader (JupyterLab, a crash recovery) only ever sees a complete notebook,
and a crash of this process loses at most the cell in flight: a new version
is written to a hidden *spare* file beside the notebook and then swapped in
atomically. Saving must not cost more as the notebook grows, so no save
rewrites the whole file:

* each cell is serialised and encoded once, when it is added or changed;
* the spare file holds the previous version, whose bytes equal the new
  version's up to the last cell both share - so a save writes only the new
  cells and the metadata after them into the spare, then *exchanges* the two
  files (``renameat2(RENAME_EXCHANGE)``, one atomic step); the notebook's old
  version becomes the spare for the next save.

Where the exchange is not available (not Linux, a filesystem without it) or
an earlier cell changed (a display update), the whole notebook is written to
the spare and renamed over the old one: still atomic, only no longer O(cell).
The layout matches what ``nbformat.write`` produces (sorted keys, one-space
indent, multi-line strings split into lines), so recordings diff well in git.

The notebook usually sits in the work dir, which a Docker kernel can write: all
file operations go through :mod:`jupyter_exec.boundary.paths` relative to the
notebook's folder, so a link the kernel plants at the notebook or its spare is
refused (never written through), and a spare the kernel swapped for another
file is rewritten whole instead of patched.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import json
import os
import stat
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.boundary.paths import Folder, write_all
from jupyter_exec.engine.mime import is_split
from jupyter_exec.engine.runorder import max_seq
from jupyter_exec.exceptions import NotebookError, StorageError, WorkDirError

if TYPE_CHECKING:
    import nbformat

__all__ = ["FileStamp", "NotebookRecorder", "file_stamp", "new_cell_id", "read_notebook"]

NBFORMAT_MINOR = 5


def new_cell_id() -> str:
    return uuid.uuid4().hex[:12]


def _lines(text: Any) -> Any:
    return text.splitlines(keepends=True) if isinstance(text, str) else text


def split_lines(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``cell`` with multi-line strings as lists of lines, as Jupyter stores them.

    Copies only the containers it changes (the cell, its outputs and their
    ``data``): the rest is shared with ``cell``, which stays untouched.
    """
    out = dict(cell)
    out["source"] = _lines(out.get("source", ""))
    if "outputs" in out:
        out["outputs"] = [
            {**o, "data": dict(o["data"])} if "data" in o else dict(o) for o in out["outputs"]
        ]
    for output in out.get("outputs", ()):
        if "text" in output:
            output["text"] = _lines(output["text"])
        data = output.get("data")
        if data:
            for mime, value in data.items():
                if is_split(mime):
                    data[mime] = _lines(value)
    return out


_CELL_SEPARATOR = b",\n  "
_HEADER = b'{\n "cells": [\n  '
_CELLS_END = b"\n ],\n"
FileStamp = tuple[int, int, int]


def file_stamp(path: Path) -> FileStamp | None:
    """(inode, size, mtime) of ``path`` itself (a link is not followed), or None.

    Tells whether someone else wrote the file since we did.
    """
    try:
        st = path.lstat()
    except OSError:
        return None
    return _stamp_of(st)


def _stamp_of(st: os.stat_result) -> FileStamp:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


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
        root: Path | None = None,
    ) -> None:
        self.path = path
        self.fsync = fsync
        # The trusted folder the notebook's folder is reached from without following
        # links (the work dir when the notebook is inside it); default: its own folder.
        self.root = root if root is not None else path.parent
        self._spare_stamp: FileStamp | None = None  # the spare as our last save left it
        self._metadata: dict[str, Any] = dict(metadata)
        self._metadata_bytes: bytes | None = None  # cached; set_metadata() clears it
        self._cells: list[dict[str, Any]] = []
        self._json: list[str] = []
        self._encoded: list[bytes] = []
        self._ends: list[int] = []  # byte offset just past each cell in the file
        # How many leading cells of each file are byte-identical to the cache (None: unknown).
        self._in_file: int | None = None
        self._in_spare: int | None = None
        self._can_exchange = True
        self._stamp: FileStamp | None = None  # the notebook file as we last wrote it
        for cell in cells or ():
            self._add(cell)
        self._run_seq = max_seq(self._cells)
        self.next_cell_id: str | None = None
        """The id the next executed cell takes (the server shows the cell while it runs)."""

    def next_run_seq(self, execution_count: int | None = None) -> int:
        """The place in the run order (``jupyter_exec.run.seq``) of a cell that just ran.

        ``execution_count`` is the kernel's number for it: the server's recorder
        uses it to place a person's cell that ran just before it (see
        :mod:`jupyter_exec.engine.runorder`).
        """
        self._run_seq += 1
        return self._run_seq

    # -- building ----------------------------------------------------------------

    def _add(self, cell: dict[str, Any]) -> int:
        text = _dumps(split_lines(cell), "  ")
        encoded = text.encode("utf-8")
        start = self._ends[-1] + len(_CELL_SEPARATOR) if self._ends else len(_HEADER)
        self._cells.append(cell)
        self._json.append(text)
        self._encoded.append(encoded)
        self._ends.append(start + len(encoded))
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
        # The files now differ from the cache from this cell on.
        self._in_file = None if self._in_file is None else min(self._in_file, index)
        self._in_spare = None if self._in_spare is None else min(self._in_spare, index)
        for i in range(index, len(self._encoded)):
            start = self._ends[i - 1] + len(_CELL_SEPARATOR) if i else len(_HEADER)
            self._ends[i] = start + len(self._encoded[i])
        if save:
            self.save()

    def refresh(self, index: int, *, save: bool = True) -> None:
        """Re-serialise cell ``index`` after its dict was changed in place."""
        self.replace(index, self._cells[index], save=save)

    def set_metadata(self, key: str, value: Any) -> None:
        self._metadata[key] = value
        self._metadata_bytes = None

    @property
    def metadata(self) -> dict[str, Any]:
        """The notebook metadata (read it freely; change it with :meth:`set_metadata`)."""
        return self._metadata

    @property
    def cells(self) -> list[dict[str, Any]]:
        return self._cells

    def __len__(self) -> int:
        return len(self._cells)

    # -- disk --------------------------------------------------------------------

    def _tail(self) -> bytes:
        if self._metadata_bytes is None:
            self._metadata_bytes = (
                b' "metadata": '
                + _dumps(self._metadata, " ").encode("utf-8")
                + f',\n "nbformat": 4,\n "nbformat_minor": {NBFORMAT_MINOR}\n}}\n'.encode()
            )
        return self._metadata_bytes

    def _chunks(self) -> list[bytes]:
        """The file's bytes as a list of pieces, mostly the cached cells (what ``save`` writes)."""
        if not self._encoded:
            return [b'{\n "cells": [],\n', self._tail()]
        return [_HEADER, *self._chunks_from(0)]

    def _chunks_from(self, first: int) -> list[bytes]:
        """The bytes after the header from cell ``first`` on: the cells, then the metadata."""
        chunks: list[bytes] = []
        for index in range(first, len(self._encoded)):
            if index:
                chunks.append(_CELL_SEPARATOR)
            chunks.append(self._encoded[index])
        chunks.append(_CELLS_END)
        chunks.append(self._tail())
        return chunks

    def _incremental(self) -> bool:
        """Whether a save may patch the spare in place: the file is exactly this layout.

        A subclass that writes other bytes (a merged layout) answers for itself.
        """
        return True

    def render(self) -> str:
        """The whole file as text (what ``save`` writes)."""
        return b"".join(self._chunks()).decode("utf-8")

    def _folder(self) -> Folder:
        """The notebook's folder, reached from :attr:`root` without following links."""
        try:
            relative = self.path.parent.relative_to(self.root)
        except ValueError:
            return Folder.open(self.path.parent)
        return Folder.open(self.root, relative)

    def _open_spare(self, folder: Folder, patch: bool) -> tuple[int, bool]:
        """The spare open for writing, and whether it may be patched in place.

        Patching needs the very file our last save left there (same inode, size
        and mtime): anything else (removed, replaced by the kernel) is written whole.
        """
        name = self.spare_path.name
        if patch:
            try:
                fd = folder.open_file(name, os.O_WRONLY)
            except FileNotFoundError:
                fd = -1
            if fd >= 0:
                if _stamp_of(os.fstat(fd)) == self._spare_stamp:
                    return fd, True
                os.close(fd)
        return folder.create(name), False

    def save(self) -> None:
        """Write the notebook atomically (temp file + rename in the same folder).

        On failure (a full disk, a vanished folder, a link planted where the
        notebook or its spare goes) the previous file is left intact and
        :class:`~jupyter_exec.NotebookError` says why; the cells stay in memory,
        so the next successful save records them too.
        """
        spare = self.spare_path.name
        name = self.path.name
        shared = self._in_spare or 0  # leading cells the spare already holds
        patch = self._incremental() and self._can_exchange and 0 < shared <= len(self._encoded)
        try:
            with self._folder() as folder:
                current = folder.lstat(name)
                if current is not None and not stat.S_ISREG(current.st_mode):
                    link = stat.S_ISLNK(current.st_mode)
                    raise StorageError(
                        f"refusing to write the notebook {self.path}: it is "
                        f"{'a symbolic link (planted by the kernel?)' if link else 'not a file'}"
                        "; remove it and the next save writes the notebook",
                        errno.ELOOP if link else errno.EINVAL,
                    )
                fd, patch = self._open_spare(folder, patch)
                try:
                    if patch:
                        os.lseek(fd, self._ends[shared - 1], os.SEEK_SET)
                        write_all(fd, self._chunks_from(shared))
                        os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_CUR))
                    else:
                        write_all(fd, self._chunks())
                    if self.fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                # The file we swap out is our previous version only if nobody replaced or
                # edited it since our last save (a person saving it in JupyterLab, say).
                ours = current is not None and _stamp_of(current) == self._stamp
                if self._can_exchange and folder.exchange(spare, name):
                    self._in_spare = self._in_file if ours else None
                    self._spare_stamp = self._stamp if ours else None
                else:
                    if patch:  # the exchange stopped working: the spare is complete anyway
                        self._can_exchange = False
                    folder.rename(spare, name)
                    self._in_spare = None
                    self._spare_stamp = None
                self._in_file = len(self._encoded)
                written = folder.lstat(name)
                self._stamp = _stamp_of(written) if written is not None else None
        except (OSError, WorkDirError) as exc:
            self._in_spare = None
            self._spare_stamp = None
            with contextlib.suppress(OSError, WorkDirError), self._folder() as folder:
                folder.unlink(spare)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise NotebookError(
                f"could not save the session notebook {self.path}: {reason}; "
                f"the file on disk still holds its previous {self._saved_cells} cell(s), "
                "and the unsaved cells are kept in memory for the next save"
            ) from exc
        self._saved_cells = len(self._cells)

    _saved_cells = 0

    @property
    def spare_path(self) -> Path:
        """The hidden file beside the notebook that holds its previous version."""
        return self.path.with_name(f".{self.path.name}.jx-tmp")

    def close(self) -> None:
        """Remove the spare file (the notebook itself stays)."""
        self._in_spare = None
        self._spare_stamp = None
        with contextlib.suppress(OSError, WorkDirError), self._folder() as folder:
            folder.unlink(self.spare_path.name)

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

    Older notebooks (v3) are upgraded as nbformat can; a file that is missing,
    not UTF-8, not JSON, nested too deep, not a notebook, or invalid raises
    :class:`~jupyter_exec.NotebookError` (see :func:`jupyter_exec.engine.sources.read_notebook`).
    """
    from jupyter_exec.engine.sources import read_notebook as read_checked

    return read_checked(path)
