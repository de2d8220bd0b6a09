"""A remote kernel's place and its files: where it ran, and what it wrote, brought home.

A kernel on a gateway works in a folder on another machine; the session's
work dir is here. So for a remote IPython kernel::

    after each (re)start ─► inkernel_remote installed (one silent request): the host
                            the kernel runs on, and a first snapshot of its folder
    every cell          ─► a user_expressions entry returns the files the cell
                            created or changed there (name, size)
    after the cell      ─► each is read through the kernel, in chunks of CHUNK bytes
                            (silent requests), and written into the local work dir
                            by the boundary's resolver; the work-dir scan then lists
                            it in Execution.files like a file written locally

What the kernel reports is its word, not ours: a name is accepted only as a
plain relative path without hidden parts, never the session's notebook or
its ``<name>_files`` folder, and written only through
:func:`jupyter_exec.boundary.paths.write_bytes` (no ``..``, no link followed).
A file over the read limit (:func:`~jupyter_exec.boundary.paths.read_limit`, 256 MiB
by default) or past the per-cell total (the same) stays on the remote host;
the cell's record names it and says why. Nothing is sent to a kernel that
is not IPython, and no name is left in the user's namespace.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from jupyter_exec.boundary import replies
from jupyter_exec.boundary.paths import read_limit, write_bytes
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.exceptions import (
    KernelNotAliveError,
    KernelStartError,
    StorageError,
    WorkDirError,
)
from jupyter_exec.inkernel import module_call_code
from jupyter_exec.inkernel import remote as inkernel_remote

__all__ = [
    "CHUNK",
    "EXPRESSION_KEY",
    "Homecoming",
    "bring_home",
    "check_host",
    "expressions",
    "install",
]

log = logging.getLogger("jupyter_exec")

EXPRESSION_KEY = "jupyter_exec_remote_files"
CHUNK = 4 << 20
"""Bytes read per request: a 4 MiB chunk is about 5.6 MB of base64 in one reply."""
MAX_FILES_PER_CELL = 1000
MAX_LISTING_CHARS = 4 << 20
"""The raw answer listing a cell's files: past 4 MiB, no file comes home."""
MAX_CHUNK_CHARS = 4 * (CHUNK // 3 + 1) + 2
"""The raw answer carrying one chunk: its base64 text and the quotes around it."""
MAX_HOST_CHARS = 1024
_CALL_TIMEOUT = 60.0
_REFUSALS = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.EINVAL})
"""A write the resolver refused (a link or a folder where the file would go): the file
stays remote, named in the cell's record; the session goes on."""
_MODULE = f"__import__('sys').modules[{inkernel_remote.MODULE!r}]"


@dataclass
class Homecoming:
    """What came home after a cell, and what stayed on the remote host (with why)."""

    copied: list[Path] = field(default_factory=list)
    left: list[dict[str, Any]] = field(default_factory=list)


async def install(kernel: KernelHandle) -> bool:
    """Install the in-kernel half once per kernel process; whether files can come home.

    Also learns where the kernel runs (``kernel.host``).
    """
    if kernel.remote_files is not None:
        return kernel.remote_files
    kernel.remote_files = False
    if not kernel.remote or not kernel.runs_ipython:  # Python source: an IPython kernel only
        return False
    code = module_call_code(
        inkernel_remote.__file__,
        inkernel_remote.MODULE,
        "install(__import__('os').getcwd())",
        "remote",
        "install",
    )
    with contextlib.suppress(KernelNotAliveError):
        reply = await kernel.run_silent(
            code,
            time.monotonic() + _CALL_TIMEOUT,
            expressions={"where": f"__import__('json').dumps({_MODULE}.where())"},
            died="",
        )
        if reply is not None and reply.get("status") == "ok":
            where = replies.answer(reply.get("user_expressions"), "where", MAX_HOST_CHARS)
            if isinstance(where, str) and 0 < len(where) <= 255:
                kernel.host = where
            kernel.remote_files = True
    return kernel.remote_files


async def check_host(kernel: KernelHandle, wanted: str) -> None:
    """Raise :class:`~jupyter_exec.KernelStartError` if the kernel runs elsewhere than the
    host the session pinned (a server that cannot place kernels ignores the request).

    A kernel that cannot say where it runs (not IPython) is taken at the gateway's word.
    """
    if not await install(kernel) or kernel.host is None or kernel.host == wanted:
        return
    try:
        address = await asyncio.to_thread(socket.gethostbyname, wanted)
    except OSError:
        address = None
    if kernel.host == address:
        return
    raise KernelStartError(
        f"the kernel was asked to run on {wanted!r} but runs on {kernel.host!r}: does the "
        "server place kernels on hosts? (jupyter-exec gateway and Enterprise Gateway's "
        "distributed kernels do; a plain Jupyter Server runs every kernel on its own machine)"
    )


async def expressions(kernel: KernelHandle) -> dict[str, str]:
    """The ``user_expressions`` entry a remote cell carries (empty when not installed)."""
    return {EXPRESSION_KEY: f"{_MODULE}.changes()"} if await install(kernel) else {}


def _listing(user_expressions: Mapping[str, Any]) -> list[tuple[str, int]]:
    entries = replies.answer(user_expressions, EXPRESSION_KEY, MAX_LISTING_CHARS)
    found: list[tuple[str, int]] = []
    for entry in entries if isinstance(entries, list) else ():
        if (
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], str)
            and isinstance(entry[1], int)
            and not isinstance(entry[1], bool)
            and entry[1] >= 0
        ):
            found.append((entry[0], entry[1]))
    return found


def _plain(name: str) -> bool:
    """A relative path of plain, visible names: what a kernel may name for the work dir."""
    if not name or "\0" in name or "\\" in name or len(name) > 4096:
        return False
    pure = PurePosixPath(name)
    return not pure.is_absolute() and all(
        p not in ("", ".", "..") and p[0] != "." for p in pure.parts
    )


async def bring_home(
    kernel: KernelHandle,
    user_expressions: Mapping[str, Any],
    work_dir: Path,
    refused: Callable[[str], str | None],
) -> Homecoming:
    """Copy the files the cell's reply lists into ``work_dir``.

    ``refused(name)`` says why a name must not be written here (the session's
    notebook, its outputs folder), or ``None``. A failed read (the kernel died,
    the file vanished) or a refused write (a link on the way) leaves that file out,
    noted; a write the disk failed (full, read-only) raises
    :class:`~jupyter_exec.StorageError` after the others are written.
    """
    home = Homecoming()
    listing = _listing(user_expressions)
    if not listing:
        return home
    budget = limit = read_limit()
    failure: StorageError | None = None
    for number, (name, size) in enumerate(listing):
        why = _why_not(name, size, limit, budget, number, refused)
        if why is not None:
            home.left.append({"name": name[:300], "size": size, "reason": why})
            continue
        data = await _read(kernel, name, size)
        if data is None:
            home.left.append({"name": name, "size": size, "reason": "it could not be read"})
            continue
        budget -= len(data)
        try:
            home.copied.append(write_bytes(work_dir, name, data))
        except (StorageError, WorkDirError) as exc:
            home.left.append({"name": name, "size": size, "reason": str(exc)})
            if isinstance(exc, StorageError) and exc.errno not in _REFUSALS:
                failure = failure or exc  # the disk's failure (full, read-only), not a refusal
    if home.left:
        log.warning("kernel %s: files left on its host: %s", kernel.kernel_id, home.left)
    if failure is not None:
        raise failure
    return home


def _why_not(
    name: str,
    size: int,
    limit: int,
    budget: int,
    number: int,
    refused: Callable[[str], str | None],
) -> str | None:
    if not _plain(name):
        return "not a plain relative path of visible names"
    if number >= MAX_FILES_PER_CELL:
        return f"more than {MAX_FILES_PER_CELL} files changed in one cell"
    if size > limit:
        return f"{size:,} bytes, over the {limit:,}-byte limit (JUPYTER_EXEC_MAX_READ_MB)"
    if size > budget:
        return f"the cell's files passed the {limit:,}-byte limit (JUPYTER_EXEC_MAX_READ_MB)"
    return refused(name)


async def _read(kernel: KernelHandle, name: str, size: int) -> bytes | None:
    """The file's first ``size`` bytes, read through the kernel (None if it cannot be)."""
    chunks: list[bytes] = []
    offset = 0
    while offset < size or (size == 0 and not chunks):
        want = min(CHUNK, size - offset)
        call = f"{_MODULE}.read({name!r}, {offset}, {want})"
        try:
            reply = await kernel.run_silent(
                "", time.monotonic() + _CALL_TIMEOUT, expressions={"chunk": call}, died=""
            )
        except KernelNotAliveError:
            return None
        encoded = replies.answer_str(
            (reply or {}).get("user_expressions"), "chunk", MAX_CHUNK_CHARS
        )
        if not isinstance(encoded, str):
            return None
        try:
            chunk = base64.b64decode(encoded, validate=True)
        except ValueError:
            return None
        if len(chunk) > want:
            return None
        chunks.append(chunk)
        if not chunk:
            break  # shorter than listed (truncated meanwhile): what there is
        offset += len(chunk)
    return b"".join(chunks)
