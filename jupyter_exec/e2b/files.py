"""Every file operation of envd (stat, list, make_dir, remove, move, read, write) on a work dir.

Each one starts from the sandbox's work dir (a folder the server chose, so
trusted) and walks down with :class:`jupyter_exec.boundary.paths.Folder`: no folder
on the way is a link, a final name that is a link is never followed (``stat``
reports it as a link; ``read`` and ``write`` refuse it), and ``..`` or an
absolute path outside ``/home/user`` never gets this far
(:class:`~jupyter_exec.e2b.paths.SandboxPaths`). So code in the sandbox that
plants ``ln -s /etc/passwd x`` cannot make the server read or replace what
``x`` points at, and one sandbox's paths never reach another's folder.

Entries come back as envd's ``EntryInfo`` in protobuf's JSON form.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import stat
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from jupyter_exec.boundary.paths import Folder, read_open, storage_error
from jupyter_exec.e2b.paths import SandboxPaths
from jupyter_exec.exceptions import StorageError, WorkDirError

__all__ = ["CHUNK", "SandboxFiles"]

CHUNK = 1 << 20
"""Bytes a download sends at a time (its memory, whatever the file's size)."""


def _split(relative: str) -> tuple[str, str]:
    parent, _, name = relative.rpartition("/")
    return parent, name


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "FILE_TYPE_DIRECTORY"
    if stat.S_ISREG(mode):
        return "FILE_TYPE_FILE"
    if stat.S_ISLNK(mode):
        return "FILE_TYPE_SYMLINK"
    return "FILE_TYPE_UNSPECIFIED"


class SandboxFiles:
    """The files of one sandbox, reached only through its :class:`SandboxPaths`."""

    def __init__(self, paths: SandboxPaths) -> None:
        self.paths = paths

    def _folder(self, relative: str, *, create: bool = False) -> Folder:
        return self.paths.open(relative, create=create)  # from the held work dir, no link

    def _entry(self, folder: Folder, name: str, relative: str) -> dict[str, Any] | None:
        st = folder.lstat(name) if name else os.fstat(folder.fd)
        if st is None:
            return None
        entry: dict[str, Any] = {
            "name": name or os.path.basename(self.paths.shown(relative)),
            "type": _kind(st.st_mode),
            "path": self.paths.shown(relative),
            "size": str(st.st_size),
            "mode": stat.S_IMODE(st.st_mode),
            "permissions": stat.filemode(st.st_mode),
            "owner": _owner(st.st_uid),
            "group": _group(st.st_gid),
            "modifiedTime": datetime.fromtimestamp(st.st_mtime, timezone.utc)
            .isoformat()
            .replace("+00:00", "Z"),
        }
        if stat.S_ISLNK(st.st_mode):
            entry["isSymlink"] = True
            with contextlib.suppress(OSError):
                entry["symlinkTarget"] = os.readlink(name, dir_fd=folder.fd)
        return entry

    def stat(self, path: str) -> dict[str, Any]:
        """The entry at ``path`` (a link itself, never its target)."""
        relative = self.paths.relative(path)
        parent, name = _split(relative)
        with self._folder(parent) as folder:
            entry = self._entry(folder, name, relative)
        if entry is None:
            raise FileNotFoundError(errno.ENOENT, "no such file or folder", path)
        return entry

    def list(self, path: str, depth: int = 1) -> list[dict[str, Any]]:
        """The entries of the folder ``path``, ``depth`` levels down (links not entered)."""
        relative = self.paths.relative(path)
        with self._folder(relative) as folder:
            return list(self._walk(folder, relative, max(depth, 1)))

    def _walk(self, folder: Folder, relative: str, depth: int) -> Iterator[dict[str, Any]]:
        for name in sorted(os.listdir(folder.fd)):
            child = f"{relative}/{name}" if relative else name
            entry = self._entry(folder, name, child)
            if entry is None:
                continue
            yield entry
            if depth > 1 and entry["type"] == "FILE_TYPE_DIRECTORY":
                with folder.sub(name) as sub:
                    yield from self._walk(sub, child, depth - 1)

    def make_dir(self, path: str) -> dict[str, Any]:
        """Make the folder ``path`` and its parents; FileExistsError if it is there."""
        relative = self.paths.relative(path)
        if not relative:
            raise FileExistsError(errno.EEXIST, "the folder exists", path)
        parent, name = _split(relative)
        with self._folder(parent, create=True) as folder:
            try:
                os.mkdir(name, 0o755, dir_fd=folder.fd)
            except FileExistsError:
                raise FileExistsError(errno.EEXIST, "it already exists", path) from None
            except OSError as exc:
                raise storage_error(exc, self.paths.shown(relative), "make the folder") from exc
            entry = self._entry(folder, name, relative)
        assert entry is not None
        return entry

    def remove(self, path: str) -> None:
        """Remove the file, link or folder (with its content) at ``path``."""
        relative = self.paths.relative(path)
        if not relative:
            raise WorkDirError("refusing to remove the sandbox's home folder itself")
        parent, name = _split(relative)
        with self._folder(parent) as folder:
            st = folder.lstat(name)
            if st is None:
                raise FileNotFoundError(errno.ENOENT, "no such file or folder", path)
            _remove(folder, name, st, self.paths.shown(relative))

    def move(self, source: str, destination: str) -> dict[str, Any]:
        """Rename ``source`` to ``destination`` (folders of the destination made as needed)."""
        src = self.paths.relative(source)
        dst = self.paths.relative(destination)
        if not src or not dst:
            raise WorkDirError("the sandbox's home folder itself cannot be moved or replaced")
        (src_parent, src_name), (dst_parent, dst_name) = _split(src), _split(dst)
        with self._folder(src_parent) as a, self._folder(dst_parent, create=True) as b:
            if a.lstat(src_name) is None:
                raise FileNotFoundError(errno.ENOENT, "no such file or folder", source)
            try:
                os.rename(src_name, dst_name, src_dir_fd=a.fd, dst_dir_fd=b.fd)
            except OSError as exc:
                raise storage_error(exc, destination, "move into") from exc
            entry = self._entry(b, dst_name, dst)
        assert entry is not None
        return entry

    def open_read(self, path: str) -> int:
        """The regular file ``path`` open for reading (a descriptor the caller closes).

        A link, a folder, a FIFO or a device is refused before anything is read; the caller
        streams the content in chunks of :data:`CHUNK`, so a sparse 1 TB file costs no memory.
        """
        relative = self.paths.relative(path)
        parent, name = _split(relative)
        if not name:
            raise StorageError(f"{path} is a folder, not a file", errno.EISDIR)
        with self._folder(parent) as folder:
            st = folder.lstat(name)
            if st is None:
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            if stat.S_ISDIR(st.st_mode):
                raise StorageError(f"{path} is a folder, not a file", errno.EISDIR)
            return folder.open_file(name, os.O_RDONLY)

    def read(self, path: str) -> bytes:
        """The content of the regular file ``path``, bounded (``safefs.read_limit``)."""
        fd = self.open_read(path)
        try:
            return read_open(fd, self.paths.shown(self.paths.relative(path)))
        finally:
            os.close(fd)

    def write(self, path: str, data: bytes) -> dict[str, Any]:
        """Replace ``path`` with ``data`` atomically, making its folders."""
        relative = self.paths.relative(path)
        if not relative:
            raise StorageError(f"{path} is a folder, not a file", errno.EISDIR)
        folders, name = _split(relative)
        with self.paths.open(folders, create=True) as folder:
            folder.write_atomic(name, [data])
        return {"name": _split(relative)[1], "type": "file", "path": self.paths.shown(relative)}


def _remove(folder: Folder, name: str, st: os.stat_result, shown: str | os.PathLike[str]) -> None:
    """Remove the entry ``name`` of ``folder``: a folder with its content, a link as itself."""
    if not stat.S_ISDIR(st.st_mode):
        folder.unlink(name)
        return
    with folder.sub(name) as sub:
        for inner in os.listdir(sub.fd):
            inner_st = sub.lstat(inner)
            if inner_st is not None:
                _remove(sub, inner, inner_st, sub.path / inner)
    try:
        os.rmdir(name, dir_fd=folder.fd)
    except OSError as exc:
        raise storage_error(exc, shown, "remove") from exc
