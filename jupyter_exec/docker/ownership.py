"""Which uid the kernel runs as, and how a root-owned work dir is lent to it and handed back.

The rule, in order:

1. An explicit ``user`` option ("UID[:GID]") wins.
2. If this process is not root, the kernel runs as this process's uid:gid. It must be able to
   read our 0700 run dir, and we must be able to connect to the ipc sockets it creates, so no
   other uid would work without root. The work dir must be writable by us.
3. If this process is root, the kernel runs as the uid:gid that owns the work dir, so files it
   writes belong to that user on the host.
4. If the work dir is owned by root, the kernel does **not** run as root. It runs as the
   unprivileged ``fallback_user`` (default 65532:65532, the "nonroot" id of distroless images),
   and the work dir is *lent* to it: every entry owned by root is chowned to the fallback id
   while the kernel runs. When the last kernel using that dir goes away (shutdown, or
   ``jupyter-exec reap`` after a crash) the loan is *handed back*: every entry owned by the
   fallback id is chowned to the original owner, so the user ends up with root-owned files as
   if root had written them. Files other users own are never touched.
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from jupyter_exec.docker.options import split_user
from jupyter_exec.exceptions import WorkDirError

__all__ = ["KernelUser", "choose_user", "hand_back", "lend"]


@dataclass(frozen=True)
class KernelUser:
    """The ids the kernel runs as, and the owner to hand a lent work dir back to."""

    uid: int
    gid: int
    name: str
    lent_from: tuple[int, int] | None = None

    @property
    def docker_user(self) -> str:
        return f"{self.uid}:{self.gid}"


def _name_for(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "kernel"


def check_work_dir(work_dir: Path) -> os.stat_result:
    """Stat the work dir, raising :class:`WorkDirError` if it cannot be a mount source."""
    try:
        st = work_dir.stat()
    except FileNotFoundError:
        raise WorkDirError(f"work dir {work_dir} does not exist") from None
    except PermissionError:
        raise WorkDirError(f"work dir {work_dir} cannot be accessed (permission denied)") from None
    if not stat.S_ISDIR(st.st_mode):
        raise WorkDirError(f"work dir {work_dir} is not a directory")
    return st


def choose_user(
    work_dir: Path, *, explicit: str = "", fallback: str = "65532:65532", euid: int | None = None
) -> KernelUser:
    """Decide the kernel's uid:gid for ``work_dir`` (see the module docstring for the rule)."""
    st = check_work_dir(work_dir)
    euid = os.geteuid() if euid is None else euid
    if explicit:
        uid, gid = split_user(explicit)
        return KernelUser(uid, gid, _name_for(uid))
    if euid != 0:
        if not os.access(work_dir, os.W_OK | os.X_OK):
            raise WorkDirError(
                f"work dir {work_dir} is not writable by uid {euid}, which the Docker kernel runs "
                f"as (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}). "
                "Use a work dir you own, or `chmod u+w` it."
            )
        gid = os.getegid()
        return KernelUser(euid, gid, _name_for(euid))
    fb_uid, fb_gid = split_user(fallback)
    if fb_uid == 0:
        raise WorkDirError(
            "fallback_user must not be root: the kernel never runs as root by default"
        )
    if st.st_uid == 0:
        return KernelUser(fb_uid, fb_gid, "kernel", lent_from=(0, st.st_gid))
    if st.st_uid == fb_uid:
        # Already lent by another live kernel: share the loan; hand back to root by default.
        return KernelUser(fb_uid, fb_gid, "kernel", lent_from=(0, 0))
    if not st.st_mode & stat.S_IWUSR:
        raise WorkDirError(
            f"work dir {work_dir} is not writable by its owner (uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):o}), whom the Docker kernel runs as; `chmod u+w` it"
        )
    return KernelUser(st.st_uid, st.st_gid, _name_for(st.st_uid))


def _walk(root: Path) -> list[Path]:
    paths = [root]
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        paths.extend(base / name for name in dirnames)
        paths.extend(base / name for name in filenames)
    return paths


def _rechown(root: Path, from_uid: int, to_uid: int, to_gid: int) -> int:
    """chown every entry under ``root`` owned by ``from_uid``; never follows symlinks."""
    changed = 0
    for path in _walk(root):
        try:
            if path.lstat().st_uid == from_uid:
                os.chown(path, to_uid, to_gid, follow_symlinks=False)
                changed += 1
        except FileNotFoundError:
            continue  # removed while we walked
    return changed


def lend(work_dir: Path, user: KernelUser) -> int:
    """Give the fallback uid ownership of the root-owned entries of ``work_dir``."""
    if user.lent_from is None:
        return 0
    try:
        return _rechown(work_dir, user.lent_from[0], user.uid, user.gid)
    except OSError as exc:
        raise WorkDirError(f"cannot lend work dir {work_dir} to uid {user.uid}: {exc}") from exc


def hand_back(work_dir: Path, lent_to_uid: int, owner: tuple[int, int]) -> int:
    """Return everything the fallback uid owns under ``work_dir`` to ``owner``."""
    if not work_dir.exists():
        return 0
    try:
        return _rechown(work_dir, lent_to_uid, owner[0], owner[1])
    except OSError as exc:
        raise WorkDirError(
            f"cannot hand work dir {work_dir} back to uid {owner[0]}: {exc}"
        ) from exc
