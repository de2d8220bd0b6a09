"""One owner at a time for a file a run writes, across processes: a claim beside it.

Two replays recording to the same notebook would share its run folder: the second wipes
the first's folder under its running kernel, and both write the notebook. So whoever writes
such a path claims it first, for as long as it works on it::

    claim(path, what, advice)    before anything at ``path`` is made or written
      ├─ free, or left by an owner that ended (even by SIGKILL)  → taken, its record ours
      └─ held by a live owner  → SessionConflict naming it (pid, what, since) + advice
    release()                    on success, error, Ctrl-C, SIGTERM (a ``finally``)

The claim is the file ``.<name>.claim`` beside ``path`` with an exclusive ``flock`` on it
for the owner's life. The operating system drops the lock when the owner's descriptor
closes, however the owner ends, so liveness is the lock itself: no pid is guessed alive, a
dead owner's file is simply taken over, and a record naming a live pid (planted, or a pid
since reused) blocks no one unless that process holds the lock. Two claims in one process
exclude each other too (a ``flock`` belongs to the open file, not the process): two REST
requests in one server. The record (pid, host, what, since; JSON padded to
:data:`RECORD_BYTES`) is only what the refused party is told.

What stands at the claim's name is not trusted (a Docker kernel may have written the
folder). It is reached relative to the folder's descriptor with ``O_NOFOLLOW | O_NONBLOCK``
and looked at before it is opened: a link, a FIFO, a folder or a device is refused
(:class:`~jupyter_exec.StorageError`, never followed, never waited on, never removed), and
so is a regular file with a second name (a hard link to another file, which writing the
record would overwrite). :meth:`Claim.release` removes the file only while it still holds
the lock on it and the name still is that file; a claimant that locked a file released and
removed meanwhile tries again, so two owners never hold one name.

A session recording a notebook makes no claim file (its folder is its kernel's, and a file
there would show in every listing of it); it notes its notebook in this process instead
(:func:`recording`), and a claim on that notebook is refused while the session lives: a
replay never overwrites the notebook of a live session of its own process (the REST server,
a Python program). A session in another process is not seen.

Not covered: a process that forks without ``exec`` while it holds a claim shares the lock
(the descriptor is ``O_CLOEXEC``, so kernels started by ``exec`` do not); ``flock`` on a
network file system is only as good as that file system's locks.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_exec.boundary.paths import Folder, storage_error
from jupyter_exec.exceptions import SessionConflict, StorageError

__all__ = [
    "RECORD_BYTES",
    "Claim",
    "Holder",
    "Recording",
    "claim",
    "claim_name",
    "held_within",
    "is_claim_name",
    "recording",
    "spelled",
]

RECORD_BYTES = 1024
"""Size of a claim file: the owner's JSON record, padded with spaces (read in one go)."""
SUFFIX = ".claim"
_ATTEMPTS = 50
"""Tries to lock a file that is still the one at the claim's name (each lost only to an
owner that released and removed it meanwhile)."""
_MAX_DEPTH = 32
"""Folders deeper than this below a folder looked through by :func:`held_within` are not."""
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def claim_name(name: str) -> str:
    """The claim file's name for the entry ``name``: ``.<name>.claim``."""
    return f".{name}{SUFFIX}"


def is_claim_name(name: str) -> bool:
    """Whether ``name`` is a claim file's (never an input to copy, nor a file a cell wrote)."""
    return name.startswith(".") and name.endswith(SUFFIX) and len(name) > len(SUFFIX) + 1


@dataclass(frozen=True)
class Holder:
    """Who holds a claim, as its record says (None: a field it does not say)."""

    pid: int | None
    host: str | None
    what: str | None
    since: str | None

    def describe(self) -> str:
        """``replay of a.ipynb (pid 4242, since 2026-11-29T12:00:00+00:00)``."""
        facts = [f"pid {self.pid}" if self.pid is not None else "pid unknown"]
        if self.host is not None and self.host != socket.gethostname():
            facts.append(f"on host {self.host}")
        if self.since is not None:
            facts.append(f"since {self.since}")
        return f"{self.what or 'another process'} ({', '.join(facts)})"


def _record(what: str) -> bytes:
    data = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "what": what,
        "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    raw = json.dumps(data, ensure_ascii=True).encode("ascii")[: RECORD_BYTES - 1]
    return raw.ljust(RECORD_BYTES - 1) + b"\n"


def _holder(fd: int) -> Holder:
    """The record in the claim file open at ``fd`` (bounded, never trusted beyond printing)."""
    try:
        data: Any = json.loads(os.pread(fd, RECORD_BYTES, 0).decode("ascii", "replace"))
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        return Holder(None, None, None, None)

    def text(key: str) -> str | None:
        value = data.get(key)
        return (
            "".join(c for c in value[:200] if c.isprintable()) if isinstance(value, str) else None
        )

    pid = data.get("pid")
    return Holder(
        pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        text("host"),
        text("what"),
        text("since"),
    )


@dataclass(eq=False)
class Claim:
    """A held claim on :attr:`path`; :meth:`release` gives it back (idempotent)."""

    path: Path
    what: str
    _folder: Folder = field(repr=False)
    _fd: int = field(repr=False)
    _identity: tuple[int, int] = field(repr=False)

    @property
    def held(self) -> bool:
        return self._fd >= 0

    @property
    def file(self) -> Path:
        """The claim file (``.<name>.claim`` beside :attr:`path`)."""
        return self.path.with_name(claim_name(self.path.name))

    def release(self) -> None:
        """Remove the claim file (if it still is ours) and drop the lock."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            with contextlib.suppress(OSError):
                if _identity_at(self._folder, claim_name(self.path.name)) == self._identity:
                    os.unlink(claim_name(self.path.name), dir_fd=self._folder.fd)
        finally:
            os.close(fd)  # drops the lock: only now may the next owner take the name
            self._folder.close()

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _identity_at(folder: Folder, name: str) -> tuple[int, int] | None:
    st = folder.lstat(name)
    return None if st is None else (st.st_dev, st.st_ino)


def _refuse_kind(path: Path, st: os.stat_result) -> None:
    """Raise unless ``st`` is a regular file with one name: what a claim file is."""
    if stat.S_ISLNK(st.st_mode):
        raise StorageError(
            f"refusing to use the claim file {path}: it is a symbolic link (planted by a "
            "kernel?), and following it could reach files outside the folder; remove it",
            errno.ELOOP,
        )
    if stat.S_ISDIR(st.st_mode):
        raise StorageError(f"refusing to use the claim file {path}: it is a folder", errno.EISDIR)
    if not stat.S_ISREG(st.st_mode):
        raise StorageError(
            f"refusing to use the claim file {path}: it is not a regular file (a FIFO, "
            "a socket or a device); remove it",
            errno.EINVAL,
        )
    if st.st_nlink > 1:
        raise StorageError(
            f"refusing to use the claim file {path}: it has {st.st_nlink} names (a hard "
            "link to another file, which the claim would overwrite); remove it",
            errno.EINVAL,
        )


def _open(folder: Folder, name: str, shown: Path) -> int:
    """The claim file ``name`` in ``folder``, open read-write (made if missing), checked."""
    st = folder.lstat(name)
    if st is not None:
        _refuse_kind(shown, st)  # before opening: a device is never opened
    try:
        fd = os.open(name, _OPEN_FLAGS, 0o644, dir_fd=folder.fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link planted since the look
            raise StorageError(f"refusing to use the claim file {shown}: it is a symbolic link; "
                               "remove it", errno.ELOOP) from None  # fmt: skip
        raise storage_error(exc, shown, "make the claim file") from exc
    try:
        _refuse_kind(shown, os.fstat(fd))  # what was opened, whatever stood there before
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_held(folder: Folder, name: str) -> bool:
    """Whether a live owner holds the claim file ``name`` in ``folder`` (never blocks)."""
    st = folder.lstat(name)
    if st is None or not stat.S_ISREG(st.st_mode):
        return False  # not a claim file: nothing of ours, and never opened
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder.fd
        )
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # a shared lock taken to look is dropped with it
    return False


def held_within(folder: str | os.PathLike[str]) -> list[Path]:
    """The paths claimed by live owners anywhere inside ``folder`` (empty if it is missing).

    For whoever is about to remove a folder: another run may record into it (a replay whose
    output was put inside another's run folder). Walked without following a link, at most
    :data:`_MAX_DEPTH` deep.
    """
    found: list[Path] = []
    try:
        top = Folder.open(folder)
    except (OSError, StorageError):
        return found
    with top:
        _look_within(top, 0, found)
    return found


def _look_within(folder: Folder, depth: int, found: list[Path]) -> None:
    try:
        names = sorted(os.listdir(folder.fd))
    except OSError:
        return
    for name in names:
        if is_claim_name(name):
            if _is_held(folder, name):
                found.append(folder.path / name[1 : -len(SUFFIX)])
            continue
        st = folder.lstat(name)
        if st is not None and stat.S_ISDIR(st.st_mode) and depth < _MAX_DEPTH:
            try:
                inner = folder.sub(name)
            except (OSError, StorageError):
                continue  # swapped for a link or removed meanwhile: not a folder of ours
            with inner:
                _look_within(inner, depth + 1, found)


_Key = tuple[int, int, str]
_LOCK = threading.Lock()
_RECORDING: dict[_Key, list[Recording]] = {}


def _key(path: Path) -> _Key | None:
    """(device, inode) of ``path``'s folder and its name: one notebook however it is spelt."""
    try:
        st = os.stat(path.parent)
    except OSError:
        return None
    return st.st_dev, st.st_ino, path.name


@dataclass(eq=False)
class Recording:
    """A live session's note that it records into :attr:`path` (:func:`recording`)."""

    path: Path
    who: str
    _key: _Key | None = field(repr=False)

    def release(self) -> None:
        """The session closed (idempotent)."""
        key = self._key
        if key is None:
            return
        with _LOCK:
            notes = _RECORDING.get(key, [])
            if self in notes:
                notes.remove(self)
            if not notes:
                _RECORDING.pop(key, None)


def recording(path: str | os.PathLike[str], who: str) -> Recording:
    """Note that ``who`` (``session 'agent'``) records into the notebook ``path`` (its folder
    exists) until :meth:`Recording.release`; a :func:`claim` on it is refused meanwhile."""
    target = Path(path).absolute()
    note = Recording(target, who, _key(target))
    if note._key is not None:
        with _LOCK:
            _RECORDING.setdefault(note._key, []).append(note)
    return note


def _recorded_by(path: Path) -> str | None:
    key = _key(path)
    with _LOCK:
        notes = _RECORDING.get(key) if key is not None else None
        return notes[0].who if notes else None


def spelled(path: str | os.PathLike[str]) -> Path:
    """``path`` as a claim names it: absolute, ``.`` and ``..`` taken out. The folder it lies
    in is then reached by what it is (:meth:`Folder.open`), so a link or a second spelling on
    the way leads to the same claim file; only a link as the last component does not."""
    return Path(os.path.normpath(Path(path).absolute()))


def claim(path: str | os.PathLike[str], what: str, advice: str) -> Claim:
    """Claim ``path`` (in an existing folder) for this process, as ``what``.

    ``what`` says who the owner is to whoever is refused (``replay of a.ipynb``), ``advice``
    what they can do (``wait for it to end, or choose another output``). Raises
    :class:`~jupyter_exec.SessionConflict` naming the live owner when another holds it, and
    :class:`~jupyter_exec.StorageError` when the claim file cannot be made or something
    other than a claim file stands at its name.
    """
    target = spelled(path)
    if not target.name:
        raise StorageError(f"cannot claim {target}: a claim file goes beside it", errno.EINVAL)
    name = claim_name(target.name)
    shown = target.with_name(name)
    folder = Folder.open(target.parent)
    try:
        for _ in range(_ATTEMPTS):
            fd = _open(folder, name, shown)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise SessionConflict(
                    f"{target} is taken: {holder.describe()} is working on it (its claim: "
                    f"{shown}); {advice}"
                ) from None
            except OSError as exc:
                os.close(fd)
                raise storage_error(exc, shown, "lock the claim file") from exc
            st = os.fstat(fd)
            if _identity_at(folder, name) != (st.st_dev, st.st_ino):
                os.close(fd)  # its owner released and removed it meanwhile: again
                continue
            held = Claim(target, what, folder, fd, (st.st_dev, st.st_ino))
            try:
                recorder = _recorded_by(target)
                if recorder is not None:
                    raise SessionConflict(
                        f"{target} is the notebook of the live {recorder} (in this process), "
                        f"which records into it and would be overwritten; {advice}"
                    )
                os.pwrite(fd, _record(what), 0)
                os.ftruncate(fd, RECORD_BYTES)
            except BaseException as exc:
                held.release()
                if isinstance(exc, OSError) and not isinstance(exc, StorageError):
                    raise storage_error(exc, shown, "write the claim file") from exc
                raise
            return held
        raise StorageError(f"could not claim {target}: its claim file kept changing", errno.EAGAIN)
    except BaseException:
        folder.close()
        raise
