"""Files in the work dir: rich outputs saved by the session, files written by the code.

:class:`OutputStore` writes each rich output of a cell to
``<work_dir>/<session>_files/cell-<NNN>-<k>.<ext>``, where NNN is the cell's
1-based number in the notebook and k the output's number in the cell (the ``<notebook>_files``
folder is nbconvert's convention for extracted outputs), and a stream that
overflowed its budget to ``cell-<NNN>-<stream>.txt``. The work dir is writable
by the kernel, so every write goes through :mod:`jupyter_exec.boundary.paths`: no link
planted there is ever followed, and a write that fails (a full disk) raises
:class:`~jupyter_exec.StorageError` with the operating system's ``errno``.

:class:`WorkDirTracker` finds the files the *code* wrote (``plt.savefig``,
``df.to_csv``) by comparing (mtime, size) snapshots of the work dir taken
after each execution; the scan skips hidden and bulky folders and is capped.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jupyter_exec.boundary.naming import output_file_name
from jupyter_exec.boundary.paths import Folder, inside, storage_error
from jupyter_exec.engine import mime
from jupyter_exec.exceptions import WorkDirError
from jupyter_exec.inkernel.remote import scan

__all__ = ["OutputStore", "WorkDirTracker", "confined_path", "writable_path"]


def confined_path(root: Path, relative: str | os.PathLike[str]) -> Path:
    """``root / relative``, refusing anything outside ``root`` or reached through a link.

    :func:`jupyter_exec.boundary.paths.inside` decides: ``..`` or an absolute path is a
    :class:`~jupyter_exec.WorkDirError`, a link on the way (or at the end) a
    :class:`~jupyter_exec.StorageError` (``ELOOP``). Nothing is resolved.
    """
    return inside(root, _under(root, relative))


def writable_path(root: Path, relative: str | os.PathLike[str]) -> Path:
    """``root / relative`` ready to write: confined, its folders made without following links."""
    return inside(root, _under(root, relative), create=True)


def _under(root: Path, path: str | os.PathLike[str]) -> str:
    """``path`` relative to ``root``, normalised as written (``a/../b`` is ``b``).

    An absolute path lexically under ``root`` is made relative; one that is not, or a path
    whose ``..`` climbs above the root, is a :class:`~jupyter_exec.WorkDirError`. No link is
    looked at here: :func:`~jupyter_exec.boundary.paths.inside` refuses them all.
    """
    text = os.fspath(path)
    if os.path.isabs(text):
        try:
            text = os.fspath(Path(text).relative_to(root.absolute()))
        except ValueError:
            raise WorkDirError(f"path {text!r} is outside the work dir {root}") from None
    normal = os.path.normpath(text) if text else "."
    if normal == ".." or normal.startswith("../"):
        raise WorkDirError(f"path {os.fspath(path)!r} is outside the work dir {root}")
    return "" if normal == "." else normal


def _payload(mime_type: str, value: Any) -> bytes:
    value = mime.joined(value)
    if mime_type in mime.BINARY:
        return base64.b64decode(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, indent=1, ensure_ascii=False).encode("utf-8")


class OutputStore:
    """Writes a session's rich outputs into its work dir, never through a link the kernel made."""

    def __init__(self, work_dir: Path, folder: str) -> None:
        self.work_dir = work_dir.absolute()
        self.folder = folder

    def path_for(self, cell_index: int, stem: str, ext: str) -> Path:
        """Path for cell ``cell_index`` (0-based, as in ``nb.cells``), named by its number."""
        return self.work_dir / self.folder / self.name_for(cell_index, stem, ext)

    @staticmethod
    def name_for(cell_index: int, stem: str, ext: str) -> str:
        return output_file_name(cell_index, stem, ext)

    def open_folder(self) -> Folder:
        """The ``<session>_files`` folder, made if missing, reached without following links."""
        return Folder.open(self.work_dir, self.folder, create=True)

    def save_bundle(self, cell_index: int, number: int, data: Mapping[str, Any]) -> dict[str, Path]:
        """Save every savable format of one output; returns ``{mime: path}``.

        ``number`` is the output's 1-based position among the cell's rich
        outputs, so ``cell-003-2.png`` and ``cell-003-2.html`` are the same output.
        Raises :class:`~jupyter_exec.StorageError` (``ENOSPC`` for a full disk,
        ``ELOOP`` for a link where a file or folder goes).
        """
        saved: dict[str, Path] = {}
        used: set[str] = set()
        folder: Folder | None = None
        try:
            for mime_type, value in data.items():
                ext = mime.extension(mime_type)
                if ext is None or ext in used:
                    continue
                used.add(ext)
                if folder is None:
                    folder = self.open_folder()
                name = self.name_for(cell_index, str(number), ext)
                folder.write_atomic(name, [_payload(mime_type, value)])
                saved[mime_type] = folder.path / name
        finally:
            if folder is not None:
                folder.close()
        return saved

    def stream_path(self, cell_index: int, name: str) -> Path:
        return self.path_for(cell_index, name, ".txt")


class FileSpill:
    """A :class:`~jupyter_exec.engine.outputs.Spill` writing overflowing streams to files.

    Each file is created afresh (``O_EXCL``, never through a link). A failed
    write raises :class:`~jupyter_exec.StorageError` naming the file.
    """

    def __init__(self, store: OutputStore, cell_index: int) -> None:
        self._store = store
        self._cell_index = cell_index
        self._files: dict[str, Any] = {}
        self.paths: dict[str, Path] = {}

    def write(self, name: str, text: str) -> None:
        handle = self._files.get(name)
        if handle is None:
            file_name = self._store.name_for(self._cell_index, name, ".txt")
            with self._store.open_folder() as folder:
                fd = folder.create(file_name)
                path = folder.path / file_name
            handle = open(fd, "w", encoding="utf-8", errors="replace")  # noqa: SIM115
            self._files[name] = handle
            self.paths[name] = path
        try:
            handle.write(text)
        except OSError as exc:
            raise storage_error(exc, self.paths[name], "write") from exc

    def location(self, name: str) -> str | None:
        path = self.paths.get(name)
        return os.path.relpath(path, self._store.work_dir) if path else None

    def close(self) -> None:
        """Close every file; the first failure to flush raises :class:`StorageError`."""
        failure: OSError | None = None
        for name, handle in self._files.items():
            try:
                handle.close()
            except OSError as exc:
                failure = failure or storage_error(exc, self.paths[name], "write")
        self._files.clear()
        if failure is not None:
            raise failure


Snapshot = dict[str, tuple[int, int]]


class WorkDirTracker:
    """Tells which files in the work dir changed since the previous look.

    Each ``changes()`` call scans once and compares with the previous scan, so
    a session pays one scan per execution. Hidden files, the session's own
    notebook and bulky folders are ignored, and ``skip_dirs`` are not entered
    (the session's own ``<name>_files``: it knows what it wrote there, and
    that folder grows with every cell); the scan stops after ``max_entries``
    files so a huge data folder cannot slow every cell.
    """

    def __init__(
        self,
        root: Path,
        ignore: Iterable[Path] = (),
        max_entries: int = 20_000,
        skip_dirs: Iterable[Path] = (),
    ) -> None:
        self.root = root.absolute()
        self.ignore = {p.absolute() for p in ignore}
        self.skip_dirs = {str(p.absolute()) for p in skip_dirs}
        self.max_entries = max_entries
        self._last: Snapshot = self.scan()
        self.initial: frozenset[str] = frozenset(self._last)
        """The files there when the session started (a replay copies those, not the rest)."""

    def scan(self) -> Snapshot:
        return scan(str(self.root), self.max_entries, self.skip_dirs)

    def changes(self) -> list[Path]:
        """Files created or modified since the last call, sorted by path."""
        current = self.scan()
        previous = self._last
        self._last = current
        changed = [
            Path(p)
            for p, sig in current.items()
            if previous.get(p) != sig and Path(p) not in self.ignore
        ]
        return sorted(changed)
