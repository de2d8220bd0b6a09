"""Where a replay runs: a fresh copy of the recording folder's inputs, never that folder itself.

A replay that ran in the recording's folder met the files the first run left behind:
``%%file x.txt`` said "Overwriting" where the record said "Writing", a cell that appends to
a log read its own earlier lines, and the replay changed the folder it was checking. So the
kernel runs in a folder of its own, filled first with a copy of the recording folder's
inputs (the state the recording started from)::

    analysis.ipynb, data.csv, raw/         the recording's folder: read, never written
      │  copy: regular files and folders, by descriptor (no link followed or copied)
      ▼
    analysis.replayed_work/                the run folder (default: beside the replayed
      data.csv, raw/, analysis.ipynb       notebook, made afresh by every replay)

The run folder and the replayed notebook have one owner, the replay that claimed them
(:func:`claim_outputs`, a lock file beside each output notebook and each run folder, see
:mod:`jupyter_exec.boundary.claims`): a second replay to the same output while the first runs
is refused (:class:`~jupyter_exec.SessionConflict`, naming the first), and only the owner may
empty its run folder (:func:`fresh_run_folder`).

What is not copied: the files the recording's cells created (a jupyter-exec record names
them in ``jupyter_exec.written``: a ``%%file x.txt`` replays as "Writing x.txt" again),
claim files (``.<name>.claim``), links (a link to ``/etc`` or to another folder would
reach outside it; each is named in the report's warnings), FIFOs, sockets and devices,
hidden folders (a session's ``.<name>_state/`` and checkpoints, ``.git``,
``.ipynb_checkpoints``), and the replay's own record and run folder. A folder holding more
than :data:`MAX_INPUT_FILES` files or :data:`MAX_INPUT_BYTES` bytes is refused before any
kernel starts: replay such a notebook from a folder with its inputs only, or give a
``work_dir`` you filled and ``copy_inputs=False``.

Every path goes through :mod:`jupyter_exec.boundary.paths` (each component opened with
``O_NOFOLLOW`` relative to its parent's descriptor): a Docker kernel that recorded into the
folder may have planted links there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from jupyter_exec.boundary import claims
from jupyter_exec.boundary.paths import Folder, write_all
from jupyter_exec.exceptions import NotebookError, SessionConflict, StorageError

__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_INPUT_FILES",
    "Copied",
    "OutputClaim",
    "claim_outputs",
    "copy_inputs",
    "fresh_run_folder",
    "run_folder_for",
    "written_by_record",
]

MAX_INPUT_FILES = 20_000
"""Most files a replay copies from the recording's folder."""
MAX_INPUT_BYTES = 4 << 30
"""Most bytes a replay copies from the recording's folder (4 GiB)."""
MAX_DEPTH = 32
"""Folders deeper than this below the recording's folder are not copied."""
_CHUNK = 1 << 20
_AS_ROOT = os.geteuid() == 0


@dataclass
class Copied:
    """What a copy of the inputs holds, and what it left out (named in the report)."""

    files: int = 0
    bytes: int = 0
    links: list[str] = field(default_factory=list)
    """Links (relative paths) not copied and not followed."""
    others: list[str] = field(default_factory=list)
    """FIFOs, sockets and devices not copied."""

    def warnings(self) -> list[str]:
        out: list[str] = []
        for what, names in (("link", self.links), ("special file", self.others)):
            if names:
                shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
                out.append(
                    f"not copied into the replay's folder: {len(names)} {what}(s) ({shown}); "
                    "a replay copies regular files and folders only"
                )
        return out


MAX_WRITTEN = 1000


def written_by_record(metadata: Mapping[str, Any]) -> frozenset[str]:
    """The files a jupyter-exec record says its cells created (``jupyter_exec.written``):
    not inputs, so not copied. Only a skip list: a forged entry can leave a file out of the
    copy, never bring one in."""
    ours = metadata.get("jupyter_exec")
    written = ours.get("written") if isinstance(ours, Mapping) else None
    if not isinstance(written, list):
        return frozenset()
    return frozenset(w for w in written[:MAX_WRITTEN] if isinstance(w, str))


def run_folder_for(output: Path) -> Path:
    """The default run folder of a replay recorded to ``output``: ``<stem>_work`` beside it."""
    return output.with_name(f"{output.stem}_work")


@dataclass(eq=False)
class OutputClaim:
    """A replay's hold on what it writes: each output notebook and each run folder."""

    claims: tuple[claims.Claim, ...]

    def holds(self, path: Path) -> bool:
        """Whether ``path`` (a replayed notebook or a run folder) is claimed here."""
        return any(c.path == claims.spelled(path) for c in self.claims if c.held)

    def release(self) -> None:
        """Give every claim back (idempotent): on success, error, Ctrl-C and SIGTERM."""
        for held in reversed(self.claims):
            held.release()

    def __enter__(self) -> OutputClaim:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


CLAIM_ADVICE = (
    "wait for it to end, or record this replay elsewhere (--output, or the "
    "output= / work_dir= arguments)"
)


def claim_outputs(
    outputs: Sequence[Path], source: Path, work_dir: Path | None = None
) -> OutputClaim:
    """Claim each replayed notebook in ``outputs`` and the folder each runs in (the first in
    ``work_dir`` when given, else :func:`run_folder_for`) for a replay of ``source``, making
    their parent folders if needed. A run folder is claimed as itself (``.<name>.claim``
    beside it), so a replay given another's run folder as its ``work_dir`` is refused too.

    Raises :class:`~jupyter_exec.SessionConflict` naming the replay that holds one (its
    pid, and what to do), and :class:`~jupyter_exec.NotebookError` when a claim cannot be
    made (an unwritable folder, a link or a FIFO planted at the claim file's name).
    """
    folders = [run_folder_for(o) for o in outputs]
    if work_dir is not None and folders:
        folders[0] = work_dir
    held: list[claims.Claim] = []
    what = f"a replay of {source.name}"
    try:
        for path, kind in [*((o, "output") for o in outputs), *((f, "folder") for f in folders)]:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                held.append(claims.claim(path, what, CLAIM_ADVICE))
            except SessionConflict:
                raise
            except OSError as exc:  # StorageError too: what stands at the claim's name
                raise NotebookError(f"cannot claim the replay's {kind} {path}: {exc}") from exc
    except BaseException:
        for claim in reversed(held):
            claim.release()
        raise
    return OutputClaim(tuple(held))


def fresh_run_folder(path: Path, owner: OutputClaim) -> Path:
    """``path`` made empty: a previous replay's run folder there is removed first.

    Only by the replay whose claim is ``owner`` (:func:`claim_outputs`): a run folder is never
    removed under another replay's kernel, nor while a live claim lies inside it (another
    replay's output put there): that is a :class:`~jupyter_exec.SessionConflict`. The
    removal never follows a link (``shutil.rmtree`` walks by descriptor and refuses a link
    at the top): what a kernel planted in it goes, what it points to stays.
    """
    if not owner.holds(path):
        raise RuntimeError(f"{path} is not a run folder this replay claimed")
    inside = claims.held_within(path)
    if inside:
        raise SessionConflict(
            f"the replay's folder {path} holds {inside[0]}, which another run records into "
            "now (its output was put inside this folder); it is not removed under it: "
            f"{CLAIM_ADVICE}"
        )
    try:
        if os.path.lexists(path):
            shutil.rmtree(path)
        path.mkdir(parents=True)
    except OSError as exc:
        raise NotebookError(f"cannot make the replay's folder {path}: {exc}") from None
    return path


def copy_inputs(
    source: Path,
    dest: Path,
    *,
    skip_names: frozenset[str] = frozenset(),
    skip_dirs: Sequence[Path] = (),
    written: frozenset[str] = frozenset(),
    own_dest: bool = False,
) -> Copied:
    """Copy the inputs in ``source`` into the existing folder ``dest`` (see the module docstring).

    ``skip_names`` are top-level entries of ``source`` left out (the replay's own record),
    ``skip_dirs`` folders left out wherever they are (``dest`` always is), ``written`` the
    files (relative POSIX paths) the recording's cells created (:func:`written_by_record`).
    ``own_dest``: ``dest`` is the replay's own new folder; run as root, it is given to the owner
    of ``source``, as every copy is to its original's owner, so a Docker kernel (which runs as
    the work dir's owner) runs as the uid the recording's did and may write what it could.
    A file already in
    ``dest`` under a copied name is replaced. Raises :class:`~jupyter_exec.NotebookError`
    when ``source`` holds too much to copy, or a link stands where a folder is made.
    """
    copied = Copied()
    try:
        with Folder.open(source) as src, Folder.open(dest) as dst:
            if own_dest and _AS_ROOT:
                top = os.fstat(src.fd)
                dst.chown(top.st_uid, top.st_gid)
            skip_ids = {dst.identity()}
            for folder in skip_dirs:
                with contextlib.suppress(OSError):
                    st = os.stat(folder, follow_symlinks=False)
                    skip_ids.add((st.st_dev, st.st_ino))
            skip = _Skip(skip_names, skip_ids, written)
            _copy_folder(src, dst, PurePosixPath(), 0, copied, skip)
    except StorageError as exc:
        raise NotebookError(f"cannot copy the inputs of {source} for the replay: {exc}") from None
    return copied


@dataclass(frozen=True)
class _Skip:
    names: frozenset[str]  # top-level entries
    ids: set[tuple[int, int]]  # folders, by (device, inode)
    written: frozenset[str]  # files the record created, relative


def _copy_folder(
    src: Folder, dst: Folder, where: PurePosixPath, depth: int, copied: Copied, skip: _Skip
) -> None:
    for name in sorted(os.listdir(src.fd)):
        st = src.lstat(name)
        if st is None or (depth == 0 and name in skip.names) or str(where / name) in skip.written:
            continue
        if claims.is_claim_name(name):  # another run's ownership, not an input
            continue
        shown = str(where / name)
        if stat.S_ISLNK(st.st_mode):
            copied.links.append(shown)
        elif stat.S_ISDIR(st.st_mode):
            if name.startswith(".") or depth >= MAX_DEPTH or (st.st_dev, st.st_ino) in skip.ids:
                continue
            with src.sub(name) as inner, dst.sub(name, create=True) as out:
                if _AS_ROOT:
                    out.chown(st.st_uid, st.st_gid)
                _copy_folder(inner, out, where / name, depth + 1, copied, skip)
        elif stat.S_ISREG(st.st_mode):
            copied.files += 1
            copied.bytes += st.st_size
            if copied.files > MAX_INPUT_FILES or copied.bytes > MAX_INPUT_BYTES:
                raise NotebookError(
                    f"the notebook's folder {src.path} holds more than {MAX_INPUT_FILES:,} "
                    f"files or {MAX_INPUT_BYTES >> 30} GiB, too much to copy for a replay: "
                    "replay it from a folder with its inputs only, or give a work dir you "
                    "filled (copy_inputs=False)"
                )
            _copy_file(src, dst, name, st)
        else:
            copied.others.append(shown)


def _copy_file(src: Folder, dst: Folder, name: str, st: os.stat_result) -> None:
    fd = src.open_file(name, os.O_RDONLY)
    try:
        # A file already there is unlinked first (never written through), a link refused.
        out = dst.create(name, mode=(stat.S_IMODE(st.st_mode) & 0o755) | 0o600)
        try:
            if _AS_ROOT:
                os.fchown(out, st.st_uid, st.st_gid)
            _copy_bytes(fd, out, st.st_size)
        finally:
            os.close(out)
    except OSError as exc:
        if isinstance(exc, StorageError):
            raise
        raise StorageError(f"cannot copy {dst.path / name}: {exc}", exc.errno or errno.EIO) from exc
    finally:
        os.close(fd)


def _copy_bytes(fd: int, out: int, size: int) -> None:
    """At most ``size`` bytes of ``fd`` into ``out``: in the kernel (``copy_file_range``: no
    copy through this process, a reflink where the file system has them), else read/write."""
    left = size
    copy_range = getattr(os, "copy_file_range", None)
    while copy_range is not None and left > 0:
        try:
            sent = copy_range(fd, out, min(left, 1 << 30))
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            break
        if sent == 0:
            return
        left -= sent
    for block in _chunks(fd, left):
        write_all(out, (block,))


def _chunks(fd: int, size: int) -> Iterator[bytes]:
    """At most ``size`` bytes of ``fd`` (a file that grows while copied is cut there)."""
    left = size
    while left > 0:
        block = os.read(fd, min(_CHUNK, left))
        if not block:
            return
        left -= len(block)
        yield block
