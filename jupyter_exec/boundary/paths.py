"""Every host-side write, rename, chown and read inside a folder a kernel can write.

A Docker kernel writes the work dir (and its socket folder) as another user,
while jupyter-exec on the host often runs as root. Any name the host opens
there may have just been replaced by the kernel with a symbolic link to
``/etc/shadow`` or to another user's home; a plain ``open(path, "w")`` would
then write, truncate or chown the link's target. So nothing here resolves a
path through the kernel's folders:

* :meth:`Folder.open` starts from a *trusted root* (a directory the host
  chose, itself reached by :func:`pin_dir`: a link on its way is followed only if root or
  this process's user made it in a folder no one else can write, so another session's
  folder that a kernel swapped for a link is never a root) and opens each further
  component with ``O_DIRECTORY | O_NOFOLLOW``,
  relative to the previous one's descriptor: a link on the way is refused, and
  swapping a component afterwards changes nothing, since the descriptor still
  names the directory that was checked.
* Files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a fresh
  name, filled, then renamed over the final name (``renameat``: renames move
  directory entries and never follow links). A final name that holds a link
  is refused rather than replaced, so the person learns what the kernel did.
* Existing files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked to be
  regular files on the descriptor (a FIFO would block, a device would lie).
* Ownership is changed with ``fchown`` on a descriptor, or ``fchownat`` with
  ``AT_SYMLINK_NOFOLLOW``: never through a link.

Errors are :class:`~jupyter_exec.StorageError` (an ``OSError``) naming the path, so a
caller that keeps a cell despite a full disk keeps it despite a planted link too: ``errno``
is ``ELOOP`` for a link where we would write or read (what ``O_NOFOLLOW`` itself answers),
``ENOTDIR``/``EISDIR``/``EINVAL`` for an entry of the wrong kind, and the operating system's
own for anything else (``ENOSPC`` for a full disk). A missing folder or file, when not asked
to create it, is the plain ``FileNotFoundError``. A path that leaves the root (``..``, an
absolute path) is a :class:`~jupyter_exec.WorkDirError`.

This module is *the* path resolver of jupyter-exec: every path that a client, a notebook or a
kernel-writable folder supplies is reached through it, and nothing else in the package
resolves such a path (``tests/attacks/test_paths.py`` scans the source for ``.resolve()`` and
``realpath`` outside it). Besides :class:`Folder`:

* :func:`inside` gives ``root/relative`` once every folder on the way was opened without
  following a link and the final entry is not a link (for a path handed to another library);
* :func:`pin_dir` opens an *absolute* folder (a kernel's working directory, a Docker mount
  source) component by component, following only links that no kernel can have planted, and
  returns it open with its canonical path and identity (device, inode);
* :func:`open_regular` and :func:`read_regular` read a file bounded by size *before* the read
  starts (``fstat`` on the open descriptor), and never open a FIFO or a device;
* :func:`lend_folder` marks a folder a kernel writes (a Docker kernel's work dir): from then
  on, for the life of this process, :func:`pin_dir` follows no link at or below it, whoever
  owns the link. On a non-root or rootless host the kernel runs as our own uid, so a link it
  plants there looks like one the person made; ownership cannot tell them apart, the loan can.
  A person's own link *above* the lent folder (``~/project -> /data/project``) still works.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import secrets
import stat
import sys
from collections import deque
from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import Any

from jupyter_exec.exceptions import StorageError, WorkDirError

__all__ = [
    "MAX_READ_BYTES",
    "Folder",
    "inside",
    "is_lent",
    "lend_folder",
    "open_regular",
    "pin_dir",
    "read_limit",
    "read_open",
    "read_regular",
    "storage_error",
    "too_large",
    "write_bytes",
]

MAX_READ_BYTES = 256 * 1024 * 1024
"""Largest file read into memory at once (a notebook, a file an MCP tool reads), by default."""

READ_LIMIT_ENV = "JUPYTER_EXEC_MAX_READ_MB"
"""Environment variable that raises (or lowers) :data:`MAX_READ_BYTES`, in MiB."""

_MAX_LINKS = 40  # as the kernel's own limit on links followed while resolving one path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_IOV_MAX = 1024  # the POSIX minimum for writev's vector length
_RENAME_EXCHANGE = 2


def storage_error(exc: OSError, path: str | os.PathLike[str], doing: str) -> StorageError:
    """Our :class:`StorageError` for ``exc``, raised while ``doing`` ("writing") ``path``."""
    if isinstance(exc, StorageError):
        return exc
    reason = exc.strerror or str(exc)
    hint = ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "; free some space (or raise the quota) and the session carries on"
    elif exc.errno == errno.EFBIG:
        hint = "; the file is larger than this process may write (ulimit -f)"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = "; make the folder writable by this user"
    error = StorageError(f"could not {doing} {os.fspath(path)}: {reason}{hint}", exc.errno)
    error.__cause__ = exc
    return error


def _link_error(path: str, what: str) -> StorageError:
    return StorageError(
        f"refusing to {what} {path}: it is a symbolic link (planted by the kernel?), and "
        "following it could reach files outside the work dir; remove it and try again",
        errno.ELOOP,
    )


def _kind_error(path: str | os.PathLike[str], what: str, code: int) -> StorageError:
    return StorageError(f"refusing to use {os.fspath(path)}: it is {what}", code)


def _missing_folder(path: Path, why: str) -> StorageError:
    """A folder the caller asked to be made (``create``) that is not there: a storage error,
    never the ``FileNotFoundError`` a caller without ``create`` gets."""
    return storage_error(OSError(errno.ENOENT, why), path, "open the folder")


def _check_name(name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise WorkDirError(f"{name!r} is not a plain file name inside the work dir")
    return name


def _relative_parts(relative: str | os.PathLike[str]) -> list[str]:
    pure = PurePath(relative)
    if pure.is_absolute() or ".." in pure.parts:
        raise WorkDirError(f"path {os.fspath(relative)!r} is outside the work dir")
    return [p for p in pure.parts if p not in ("", ".")]


def write_all(fd: int, chunks: Iterable[bytes]) -> None:
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


@functools.cache
def _renameat2() -> Any:
    """glibc's ``renameat2`` (looked up once; None off Linux or with an older libc)."""
    if sys.platform != "linux":
        return None
    return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)


class Folder(contextlib.AbstractContextManager["Folder"]):
    """An open directory reached from a trusted root without following links.

    Use it as a context manager (``with Folder.open(root, "a/b") as folder:``);
    every method takes a plain name inside it.
    """

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        relative: str | os.PathLike[str] = "",
        *,
        create: bool = False,
        mode: int = 0o755,
    ) -> Folder:
        """The folder ``root/relative``; ``root`` itself is trusted, nothing below it is.

        With ``create``, missing folders on the way are made (``mode``).
        """
        parts = _relative_parts(relative)
        path = Path(root)
        try:  # the root too is reached without a link anyone but root or we could plant
            fd = pin_dir(path, trust_own=True).detach()
        except FileNotFoundError:
            if not create:
                raise
            raise _missing_folder(path, "the folder does not exist") from None
        except StorageError:
            raise
        except OSError as exc:
            if exc.errno == errno.ENOTDIR:
                raise _kind_error(path, "not a folder", errno.ENOTDIR) from None
            raise storage_error(exc, path, "open the folder") from exc
        for part in parts:
            path = path / part
            fd = cls._step(fd, part, path, create, mode)  # closes the parent, also on failure
        return cls(fd, path)

    @staticmethod
    def _step(parent: int, name: str, path: Path, create: bool, mode: int) -> int:
        """Open ``name`` in ``parent`` as a directory (closing ``parent``); never a link."""
        try:
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
            except FileNotFoundError:
                if not create:
                    raise FileNotFoundError(errno.ENOENT, "no such folder", str(path)) from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, mode, dir_fd=parent)
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
            raise _missing_folder(path, "it vanished while being made") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                st = _lstat_or_none(name, parent)
                if st is not None and stat.S_ISLNK(st.st_mode):
                    raise _link_error(str(path), "enter") from None
                raise _kind_error(path, "not a folder", errno.ENOTDIR) from None
            raise storage_error(exc, path, "open the folder") from exc
        finally:
            os.close(parent)
        return fd

    def detach(self) -> int:
        """The descriptor, now the caller's to close (this object no longer holds it)."""
        fd, self.fd = self.fd, -1
        return fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def sub(self, name: str, *, create: bool = False, mode: int = 0o755) -> Folder:
        """The folder ``name`` inside this one (a new descriptor; this one stays open)."""
        _check_name(name)
        return Folder(
            self._step(os.dup(self.fd), name, self.path / name, create, mode), self.path / name
        )

    # -- looking -----------------------------------------------------------------------

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry ``name`` itself (a link is not followed), or None if there is none."""
        try:
            return os.stat(_check_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise storage_error(exc, self.path / name, "look at") from exc

    def _refuse_unless_file(self, name: str, what: str) -> None:
        """Raise unless ``name`` is missing or a regular file (the thing we may replace)."""
        st = self.lstat(name)
        if st is None or stat.S_ISREG(st.st_mode):
            return
        if stat.S_ISLNK(st.st_mode):
            raise _link_error(str(self.path / name), what)
        if stat.S_ISDIR(st.st_mode):
            raise _kind_error(self.path / name, "a folder", errno.EISDIR)
        raise _kind_error(self.path / name, "not a regular file", errno.EINVAL)

    # -- writing -----------------------------------------------------------------------

    def _open_new(self, name: str, mode: int) -> int:
        return os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            mode,
            dir_fd=self.fd,
        )

    def create(self, name: str, mode: int = 0o644) -> int:
        """A new, empty file ``name`` open for writing (a descriptor the caller closes).

        A regular file already there is replaced (unlinked first: we never write
        into an inode someone else may hold); a link there is refused.
        """
        _check_name(name)
        self._refuse_unless_file(name, "write")
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.fd)
            return self._open_new(name, mode)
        except FileExistsError:  # something appeared between the unlink and the open
            raise StorageError(
                f"refusing to write {self.path / name}: something else created it meanwhile",
                errno.EEXIST,
            ) from None
        except OSError as exc:
            raise storage_error(exc, self.path / name, "create") from exc

    def write_atomic(
        self,
        name: str,
        chunks: Iterable[bytes],
        *,
        mode: int = 0o644,
        fsync: bool = False,
        owner: tuple[int, int] | None = None,
    ) -> None:
        """Replace ``name`` atomically with ``chunks``: a fresh temp file, then a rename.

        ``owner`` (uid, gid) is set with ``fchown`` on the temp file before it
        takes the final name. A link at ``name`` is refused.
        """
        _check_name(name)
        self._refuse_unless_file(name, "write")
        temp = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
        try:
            fd = self._open_new(temp, mode)
            try:
                write_all(fd, chunks)
                if owner is not None:
                    os.fchown(fd, *owner)
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=self.fd)
            if exc.errno == errno.EISDIR:
                raise _kind_error(self.path / name, "a folder", errno.EISDIR) from None
            raise storage_error(exc, self.path / name, "write") from exc

    def open_file(self, name: str, flags: int) -> int:
        """Open the existing regular file ``name`` (``os.O_RDONLY`` / ``os.O_WRONLY`` ...).

        Refuses a link or anything but a regular file; the descriptor is blocking.
        """
        _check_name(name)
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _link_error(str(self.path / name), "open") from None
            if exc.errno == errno.ENXIO:  # a FIFO with no reader
                raise _kind_error(self.path / name, "not a regular file", errno.EINVAL) from None
            if isinstance(exc, FileNotFoundError):
                raise
            raise storage_error(exc, self.path / name, "open") from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise _kind_error(self.path / name, "not a regular file", errno.EINVAL)
        os.set_blocking(fd, True)
        return fd

    def read_bytes(self, name: str, *, limit: int | None = None) -> bytes:
        """The content of the regular file ``name`` (FileNotFoundError if there is none).

        A file over ``limit`` bytes (default :func:`read_limit`) is refused before reading.
        """
        fd = self.open_file(name, os.O_RDONLY)
        try:
            return read_open(fd, self.path / name, limit)
        finally:
            os.close(fd)

    def identity(self) -> tuple[int, int]:
        """(device, inode) of this folder, read from its descriptor."""
        st = os.fstat(self.fd)
        return st.st_dev, st.st_ino

    # -- moving, removing, owning ------------------------------------------------------

    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` in this folder (entries move; no link is followed)."""
        try:
            os.rename(_check_name(src), _check_name(dst), src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError as exc:
            raise storage_error(exc, self.path / dst, "rename into") from exc

    def exchange(self, a: str, b: str) -> bool:
        """Swap entries ``a`` and ``b`` atomically (``renameat2``); False where unsupported."""
        renameat2 = _renameat2()
        if renameat2 is None:
            return False
        result = renameat2(
            self.fd, os.fsencode(_check_name(a)), self.fd, os.fsencode(_check_name(b)),
            _RENAME_EXCHANGE,
        )  # fmt: skip
        if result == 0:
            return True
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOENT):
            return False  # unsupported here, or no old file yet to swap with
        raise storage_error(OSError(err, os.strerror(err)), self.path / b, "replace")

    def unlink(self, name: str) -> None:
        """Remove the entry ``name`` (a link itself, never its target); missing is fine."""
        try:
            os.unlink(_check_name(name), dir_fd=self.fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise storage_error(exc, self.path / name, "remove") from exc

    def chown(self, uid: int, gid: int) -> None:
        """Give this folder itself to ``uid:gid`` (``fchown`` on its descriptor)."""
        try:
            os.fchown(self.fd, uid, gid)
        except OSError as exc:
            raise storage_error(exc, self.path, "change the owner of") from exc


def _lstat_or_none(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def write_bytes(
    root: str | os.PathLike[str], relative: str | os.PathLike[str], data: bytes
) -> Path:
    """Atomically write ``data`` to ``root/relative``, making its folders; returns the path."""
    parts = _relative_parts(relative)
    if not parts:
        raise WorkDirError(f"{os.fspath(relative)!r} names no file")
    *folders, name = parts
    with Folder.open(root, os.path.join(*folders) if folders else "", create=True) as folder:
        folder.write_atomic(name, [data])
    return Path(root).joinpath(*parts)


# -- bounded reads -------------------------------------------------------------------------


def read_limit() -> int:
    """The largest file read whole: ``$JUPYTER_EXEC_MAX_READ_MB`` MiB, else MAX_READ_BYTES."""
    raw = os.environ.get(READ_LIMIT_ENV, "").strip()
    try:
        megabytes = float(raw) if raw else 0.0
    except ValueError:
        megabytes = 0.0
    if not 0 < megabytes < float(1 << 40):
        return MAX_READ_BYTES
    return int(megabytes * 1024 * 1024)


def too_large(path: str | os.PathLike[str], size: int, limit: int) -> StorageError:
    """The refusal of a read over ``limit``: it names the limit and how to raise it."""
    return StorageError(
        f"refusing to read {os.fspath(path)}: it is {size:,} bytes, over the {limit:,}-byte "
        f"limit for reading a file whole; set {READ_LIMIT_ENV} (in MiB) to raise it",
        errno.EFBIG,
    )


def read_open(fd: int, path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """Read the open regular file ``fd`` whole, refusing it before the read if over ``limit``."""
    limit = read_limit() if limit is None else limit
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise too_large(path, size, limit)
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while being read
                raise too_large(path, total, limit)
        return b"".join(chunks)
    except StorageError:
        raise
    except OSError as exc:
        raise storage_error(exc, path, "read") from exc


def open_regular(path: str | os.PathLike[str], *, follow: bool = False) -> int:
    """Open the regular file ``path`` for reading (a blocking descriptor the caller closes).

    A FIFO or a device is refused before it is opened, and again on the descriptor (it never
    blocks: ``O_NONBLOCK``). A final link is refused unless ``follow`` (a path a person typed,
    outside any kernel's folders). A missing file is the plain ``FileNotFoundError``.
    """
    shown = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        st = os.stat(path, follow_symlinks=follow)
        if stat.S_ISLNK(st.st_mode):
            raise StorageError(
                f"refusing to read {shown}: it is a symbolic link, and this file is read "
                "without following links (a kernel may have planted it); give the path of "
                "the file itself",
                errno.ELOOP,
            )
        if stat.S_ISDIR(st.st_mode):
            raise _kind_error(shown, "a folder", errno.EISDIR)
        if not stat.S_ISREG(st.st_mode):
            raise _kind_error(
                shown, "not a regular file (a FIFO, a socket or a device)", errno.EINVAL
            )
        fd = os.open(path, flags)
    except StorageError:
        raise
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_error(shown, "read") from None
        raise storage_error(exc, shown, "open") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _kind_error(shown, "not a regular file (a FIFO, a socket or a device)", errno.EINVAL)
    os.set_blocking(fd, True)
    return fd


def read_regular(
    path: str | os.PathLike[str], *, limit: int | None = None, follow: bool = False
) -> bytes:
    """The bytes of the regular file ``path``, refused over ``limit`` (see :func:`open_regular`)."""
    fd = open_regular(path, follow=follow)
    try:
        return read_open(fd, path, limit)
    finally:
        os.close(fd)


# -- resolving -----------------------------------------------------------------------------


def inside(
    root: str | os.PathLike[str], relative: str | os.PathLike[str] = "", *, create: bool = False
) -> Path:
    """``root/relative``, checked: no folder on the way and not the final entry is a link.

    ``root`` is trusted (the host chose it); ``..`` or an absolute ``relative`` is a
    :class:`WorkDirError`, a link a :class:`StorageError` (``ELOOP``), a file where a folder
    is named one too (``ENOTDIR``). What does not exist yet is fine (nothing there to follow);
    with ``create`` the folders on the way are made. Use it for a path that another library
    opens; open through :class:`Folder` where you can, which holds what was checked.
    """
    parts = _relative_parts(relative)
    base = Path(root).absolute()
    if create and len(parts) > 1:
        Folder.open(base, os.path.join(*parts[:-1]), create=True).close()
    folder = Folder.open(base)
    try:
        for i, part in enumerate(parts):
            st = folder.lstat(part)
            if st is None:
                break  # not there (yet): nothing below it to follow
            if stat.S_ISLNK(st.st_mode):
                raise _link_error(str(folder.path / part), "use")
            if i == len(parts) - 1:
                break
            if not stat.S_ISDIR(st.st_mode):
                raise _kind_error(folder.path / part, "not a folder", errno.ENOTDIR)
            child = folder.sub(part)
            folder.close()
            folder = child
    finally:
        folder.close()
    return base.joinpath(*parts)


def _planted_by_no_kernel(
    link: os.stat_result, parent: os.stat_result, trusted: tuple[int, ...] = (0,)
) -> bool:
    """A link only a ``trusted`` uid could have made: theirs, in a folder only they can write.

    Group or other write bits on the folder (which is also how a POSIX ACL's mask shows,
    e.g. the loan of a work dir to a kernel's uid) make any link in it untrusted.
    """
    return link.st_uid in trusted and parent.st_uid in trusted and not parent.st_mode & 0o022


_LENT: set[tuple[int, int]] = set()
"""(device, inode) of every folder lent to a kernel in this process (see :func:`lend_folder`)."""


def lend_folder(folder: Folder) -> None:
    """Mark ``folder`` (open) as written by a kernel: no link at or below it is followed again.

    Called where a folder is handed to a kernel that is not this process's own code (the
    Docker provisioner, for the work dir it mounts). The mark is kept for the life of the
    process, also after the kernel stopped: the links it planted outlive it. It is keyed by
    identity, not by path, so renaming the folder or reaching it another way changes nothing.
    """
    _LENT.add(folder.identity())


def is_lent(identity: tuple[int, int]) -> bool:
    """True when the folder with this (device, inode) was lent to a kernel (:func:`lend_folder`)."""
    return identity in _LENT


def _lent_fd(fd: int) -> bool:
    if not _LENT:
        return False  # nothing lent yet: no fstat on the way (the common local case)
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino) in _LENT


def _own_uids() -> tuple[int, ...]:
    """Root and this process's user: a root a person or the host chose may pass their links."""
    return (0, os.geteuid())


def pin_dir(path: str | os.PathLike[str], *, trust_own: bool = False) -> Folder:
    """The folder at the absolute ``path``, open, with its canonical path (no link in it).

    Each component is opened with ``O_NOFOLLOW`` relative to the one before. A link on the
    way is followed only when no kernel can have planted it (owned by root, in a folder only
    root can write: ``/var -> /private/var``, ``/home -> /data/home``); any other link is a
    :class:`StorageError` (``ELOOP``) naming it. With ``trust_own``, a link this process's
    own user made in a folder only that user can write is followed too (how the trusted root
    of a :class:`Folder` is reached: ``~/project -> /data/project`` works). No link at or below
    a folder lent to a kernel (:func:`lend_folder`) is ever followed, whoever owns it: on a
    non-root host the kernel runs as our uid, and a link it planted in its work dir would
    otherwise pass as ours. This is how a kernel's working
    directory and a Docker mount source are reached (strictly): the caller holds the
    descriptor, compares the identity (:meth:`Folder.identity`) after handing the canonical
    path to another program, and never resolves the path again.
    """
    given = os.fspath(path)
    if not os.path.isabs(given):
        given = os.path.join(os.getcwd(), given)
    pending = [p for p in given.split("/") if p not in ("", ".")]
    canonical: list[str] = []
    lent: list[bool] = []  # per canonical component: it, or a folder above it, was lent
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    hops = 0
    try:
        while pending:
            part = pending.pop(0)
            if part == "..":
                canonical = canonical[:-1]
                lent = lent[:-1]
                os.close(fd)
                fd = -1
                folder = Folder.open("/", "/".join(canonical))
                fd, folder.fd = folder.fd, -1
                continue
            shown = "/" + "/".join([*canonical, part])
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), shown) from None
            except OSError as exc:
                st = _lstat_or_none(part, fd)
                if st is None or not stat.S_ISLNK(st.st_mode):
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise _kind_error(shown, "not a folder", errno.ENOTDIR) from None
                    raise storage_error(exc, shown, "open the folder") from exc
                if lent and lent[-1]:  # a kernel writes this folder: no link in it is ours
                    raise _link_error(shown, "enter") from None
                trusted = _own_uids() if trust_own else (0,)
                if not _planted_by_no_kernel(st, os.fstat(fd), trusted):
                    raise _link_error(shown, "enter") from None
                hops += 1
                if hops > _MAX_LINKS:
                    message = f"too many links while resolving {given}"
                    raise StorageError(message, errno.ELOOP) from None
                target = os.readlink(part, dir_fd=fd)
                pending = [p for p in target.split("/") if p not in ("", ".")] + pending
                if target.startswith("/"):
                    canonical = []
                    lent = []
                    os.close(fd)
                    fd = -1
                    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                continue
            os.close(fd)
            fd = child
            canonical.append(part)
            lent.append(bool(lent and lent[-1]) or _lent_fd(fd))
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return Folder(fd, Path("/", *canonical))
