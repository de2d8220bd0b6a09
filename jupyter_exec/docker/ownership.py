"""Which uid a Docker kernel runs as, and how a root-owned work dir is lent to it and taken back.

The rule, in order:

1. An explicit ``user`` option ("UID[:GID]") wins.
2. With a rootless engine (``dockerd-rootless``, where the container's root *is* the user who
   runs the engine, and any other container uid is a subordinate id that owns nothing of
   theirs), the kernel runs as the container's uid 0: the owner's own uid, without privileges
   on the host, and nothing is lent.
3. If this process is not root, the kernel runs as this process's uid:gid. It must be able to
   read our private connection file, and we must be able to connect to the ipc sockets it
   creates, so no other uid would work without root. The work dir must be writable by us.
   A link the kernel plants there is then owned by our own uid, in a folder only we can write:
   ownership cannot tell it from the person's own, so the resolver never follows a link at or
   below a lent work dir at all (:func:`jupyter_exec.boundary.paths.lend_folder`, which the
   provisioner calls for every work dir it mounts). The same holds for rule 2.
4. If this process is root, the kernel runs as the uid:gid that owns the work dir, so files it
   writes belong to that user on the host and nothing needs lending.
5. If the work dir is owned by root, the kernel does **not** run as root. It runs as the
   unprivileged ``fallback_user`` (default 65532:65532, the "nonroot" id of distroless images),
   and only the work dir *itself* is lent to it, with the least change to the user's files: a
   POSIX ACL entry ``user:65532:rwx`` on that one folder (owner and contents untouched), so the
   kernel can create files there; files it creates are its own. Existing root-owned files stay
   read-only to the kernel. Where the filesystem has no ACLs, the folder itself (one entry) is
   chowned instead. The loan is taken back when the last kernel using that folder goes away:
   shutdown, the parent-death watchdog after a SIGKILL (:mod:`jupyter_exec.docker.watchdog`), or
   ``jupyter-exec reap``. Only the exact folder that was lent (same device and inode, reached
   without following links) is ever changed back, so a kernel that swapped a path component for
   a link cannot redirect the change elsewhere, and a nested session's folder is never touched.
   A folder that already had an ACL keeps its other entries; its mask is recomputed as
   ``setfacl -m``/``-x`` do (the union of the group class), and a ``user:65532`` entry of
   its own is replaced during the loan and removed after it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from jupyter_exec.docker.options import split_user
from jupyter_exec.exceptions import WorkDirError

__all__ = ["KernelUser", "Loan", "choose_user", "lend", "take_back"]

_ACL_XATTR = "system.posix_acl_access"
_ACL_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_UNDEFINED_ID = 0xFFFFFFFF
_ENTRY = struct.Struct("<HHI")
_HEADER = struct.Struct("<I")


@dataclass(frozen=True)
class KernelUser:
    """The ids the kernel runs as; ``lends`` when the work dir must be lent to them.

    ``mapped``: the ids are inside a rootless engine's user namespace, where they stand for
    this process's own user on the host.
    """

    uid: int
    gid: int
    name: str
    lends: bool = False
    mapped: bool = False

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
    work_dir: Path,
    *,
    explicit: str = "",
    fallback: str = "65532:65532",
    euid: int | None = None,
    rootless: bool = False,
) -> KernelUser:
    """Decide the kernel's uid:gid for ``work_dir`` (see the module docstring for the rule)."""
    st = check_work_dir(work_dir)
    euid = os.geteuid() if euid is None else euid
    if explicit:
        uid, gid = split_user(explicit)
        return KernelUser(uid, gid, _name_for(uid), mapped=rootless)
    if rootless:
        return KernelUser(0, 0, _name_for(euid), mapped=True)
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
        return KernelUser(fb_uid, fb_gid, "kernel", lends=True)
    if not st.st_mode & stat.S_IWUSR:
        raise WorkDirError(
            f"work dir {work_dir} is not writable by its owner (uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):o}), whom the Docker kernel runs as; `chmod u+w` it"
        )
    return KernelUser(st.st_uid, st.st_gid, _name_for(st.st_uid))


# -- reaching the folder without following links -------------------------------------------


def _open_exact(work_dir: Path) -> int:
    """Open ``work_dir`` (an absolute, already resolved path) with no link anywhere on the way."""
    if not work_dir.is_absolute():
        raise WorkDirError(f"work dir {work_dir} is not an absolute path")
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in work_dir.parts[1:]:
            child = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            os.close(fd)
            fd = child
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise WorkDirError(
                f"work dir {work_dir}: a component is now a symbolic link or not a folder; "
                "its loan is not changed through it"
            ) from None
        raise WorkDirError(f"cannot open work dir {work_dir}: {exc.strerror}") from exc
    return fd


# -- POSIX ACLs (the kernel's own xattr format; no libacl needed) ---------------------------

Acl = list[tuple[int, int, int]]  # (tag, perm, id), sorted by tag then id


def _read_acl(fd: int, mode: int) -> Acl:
    try:
        raw = os.getxattr(fd, _ACL_XATTR)
    except OSError as exc:
        if exc.errno != errno.ENODATA:
            raise
        return [
            (_USER_OBJ, (mode >> 6) & 7, _UNDEFINED_ID),
            (_GROUP_OBJ, (mode >> 3) & 7, _UNDEFINED_ID),
            (_OTHER, mode & 7, _UNDEFINED_ID),
        ]
    (version,) = _HEADER.unpack_from(raw)
    if version != _ACL_VERSION:
        raise OSError(errno.EINVAL, f"unknown ACL version {version}")
    return [_ENTRY.unpack_from(raw, off) for off in range(_HEADER.size, len(raw), _ENTRY.size)]


def _with_mask(acl: Acl) -> Acl:
    """``acl`` with its mask recomputed (or dropped when only the three base entries remain)."""
    base = [e for e in acl if e[0] != _MASK]
    named = [e for e in base if e[0] in (_USER, _GROUP)]
    if not named:
        return base
    group_class = 0
    for tag, perm, _id in base:
        if tag in (_USER, _GROUP, _GROUP_OBJ):
            group_class |= perm
    return sorted([*base, (_MASK, group_class, _UNDEFINED_ID)], key=lambda e: (e[0], e[2]))


def _write_acl(fd: int, acl: Acl, mode: int) -> None:
    acl = sorted(acl, key=lambda e: (e[0], e[2]))
    if not any(tag in (_USER, _GROUP) for tag, _perm, _id in acl):
        # Back to plain mode bits: drop the xattr and restore the group bits it masked.
        with contextlib.suppress(OSError):
            os.removexattr(fd, _ACL_XATTR)
        group = next(perm for tag, perm, _id in acl if tag == _GROUP_OBJ)
        os.fchmod(fd, (stat.S_IMODE(mode) & ~0o070) | (group << 3))
        return
    raw = _HEADER.pack(_ACL_VERSION) + b"".join(_ENTRY.pack(*e) for e in acl)
    os.setxattr(fd, _ACL_XATTR, raw)


# -- lending ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Loan:
    """One lent folder: how (``acl`` or ``owner``), to whom, and exactly which folder."""

    how: str
    uid: int
    gid: int
    device: int
    inode: int
    owner: tuple[int, int] = (0, 0)

    @property
    def label(self) -> str:
        """The container label value that lets any process take the loan back."""
        fields = (self.how, self.uid, self.gid, self.device, self.inode, *self.owner)
        return ":".join(str(f) for f in fields)

    @classmethod
    def from_label(cls, text: str) -> Loan | None:
        parts = text.split(":")
        if len(parts) != 7 or parts[0] not in ("acl", "owner"):
            return None  # written by an older version: nothing we know how to undo
        try:
            uid, gid, device, inode, owner_uid, owner_gid = (int(p) for p in parts[1:])
        except ValueError:
            return None
        return cls(parts[0], uid, gid, device, inode, (owner_uid, owner_gid))


def lend(work_dir: Path, user: KernelUser, identity: tuple[int, int] | None = None) -> Loan | None:
    """Let ``user`` create files in ``work_dir`` (that folder only); None when not needed.

    ``identity`` (device, inode) is the folder the caller pinned
    (:func:`jupyter_exec.boundary.paths.pin_dir`): a different folder found at that path now is
    refused, never lent.
    """
    if not user.lends:
        return None
    try:
        fd = _open_exact(work_dir)
    except WorkDirError as exc:
        raise WorkDirError(f"cannot lend the work dir to uid {user.uid}: {exc}") from None
    try:
        st = os.fstat(fd)
        if identity is not None and (st.st_dev, st.st_ino) != identity:
            raise WorkDirError(
                f"work dir {work_dir} was replaced after it was checked; it is not lent"
            )
        if st.st_uid == user.uid:
            return None
        try:
            acl = _read_acl(fd, st.st_mode)
            entries = [e for e in acl if not (e[0] == _USER and e[2] == user.uid)]
            _write_acl(fd, _with_mask([*entries, (_USER, 7, user.uid)]), st.st_mode)
            how = "acl"
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP):
                raise
            os.fchown(fd, user.uid, user.gid)  # no ACLs here: lend the one folder by owner
            how = "owner"
        return Loan(how, user.uid, user.gid, st.st_dev, st.st_ino, (st.st_uid, st.st_gid))
    except OSError as exc:
        raise WorkDirError(f"cannot lend work dir {work_dir} to uid {user.uid}: {exc}") from exc
    finally:
        os.close(fd)


def take_back(work_dir: Path, loan: Loan) -> bool:
    """Undo ``loan`` on ``work_dir``; False when that exact folder is no longer there."""
    try:
        fd = _open_exact(work_dir)
    except WorkDirError:
        return False
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (loan.device, loan.inode):
            return False
        if loan.how == "owner":
            if st.st_uid == loan.uid:
                os.fchown(fd, *loan.owner)
            return True
        acl = _read_acl(fd, st.st_mode)
        remaining = [e for e in acl if not (e[0] == _USER and e[2] == loan.uid)]
        if remaining != acl:
            _write_acl(fd, _with_mask(remaining), st.st_mode)
        return True
    except OSError as exc:
        raise WorkDirError(f"cannot take back the loan of work dir {work_dir}: {exc}") from exc
    finally:
        os.close(fd)
