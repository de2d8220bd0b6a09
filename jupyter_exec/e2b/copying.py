"""Copying a sandbox's files where a kernel may be planting links: by descriptor, never a link
followed, nothing but regular files, folders and links copied.

A snapshot or a fork copies a sandbox's work dir while its kernel (a Docker container that
may be hostile) could rename anything in it. :func:`copy_tree` walks the source from a held
descriptor with :func:`os.fwalk` (which never follows a link, and checks each folder it
enters is the one it listed), opens each file with ``O_NOFOLLOW | O_NONBLOCK`` and copies it
only when ``fstat`` says it is a regular file (a FIFO is skipped, never waited on); a link
is copied as a link (its text is data: the sandbox's own path rules refuse it there as
here). The destination is a folder this process has just made, and no kernel has yet.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

__all__ = ["copy_tree"]

_CHUNK = 1 << 20


def copy_tree(
    source_fd: int,
    destination: Path,
    skip: Callable[[str], bool] = lambda _: False,
    mode: int = 0o700,
) -> int:
    """Copy the folder open at ``source_fd`` into the new folder ``destination`` (made here
    with ``mode``; it must not exist). ``skip``: top-level names left out. Returns bytes
    copied."""
    destination.mkdir(mode=mode)
    copied = 0
    for where, dirs, files, dir_fd in os.fwalk(".", dir_fd=source_fd, follow_symlinks=False):
        target = destination / where
        if where == ".":
            dirs[:] = [d for d in dirs if not skip(d)]
            files = [f for f in files if not skip(f)]
        for name in list(dirs):
            info = os.lstat(name, dir_fd=dir_fd)
            if stat.S_ISLNK(info.st_mode):  # listed as a folder, never entered: a link
                dirs.remove(name)
                os.symlink(os.readlink(name, dir_fd=dir_fd), target / name)
            else:
                (target / name).mkdir(mode=stat.S_IMODE(info.st_mode) | 0o700)
        for name in files:
            copied += _copy_entry(name, dir_fd, target / name)
    return copied


def _copy_entry(name: str, dir_fd: int, target: Path) -> int:
    try:
        info = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return 0  # gone since it was listed
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(name, dir_fd=dir_fd), target)
        return 0
    if not stat.S_ISREG(info.st_mode):
        return 0  # a FIFO, socket or device: not a file to copy
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return 0  # replaced by a link (ELOOP) or removed since: not copied
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            return 0
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                      stat.S_IMODE(opened.st_mode) | 0o600)  # fmt: skip
        try:
            size = 0
            while True:
                sent = os.sendfile(out, fd, None, _CHUNK)
                if sent == 0:
                    break
                size += sent
            return size
        finally:
            os.close(out)
    finally:
        os.close(fd)
