"""The host's side of the in-kernel stream guard: install it, ask for it per cell, join its files.

A session that records its cells keeps host memory bounded under output
floods by letting the kernel keep what is past the budget
(:mod:`jupyter_exec.inkernel`)::

    start / restart  ─► install(): a probe file in the work dir, the guard's source run silently;
                        the kernel hooks its streams only if it sees the probe (shares the dir)
    each cell        ─► request(): execute_request metadata with the budget and, per stream,
                        the hidden file in the files folder where the rest goes
    cell ended       ─► absorb(): each such file is streamed (bounded memory) into the cell's
                        spill file after the head the host received, its tail kept for the
                        notebook's marker, and removed

Files the kernel wrote are opened without following links from the work dir
down, so a kernel cannot make the host read (and copy into a file the kernel
can read) anything outside it.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import queue
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jupyter_exec.inkernel import KEY, install_code
from jupyter_exec.kernel import QUIET_POLL, KernelHandle
from jupyter_exec.outputs import CellOutputs, Spill

__all__ = ["absorb", "install", "request"]

log = logging.getLogger("jupyter_exec")

STREAMS = ("stdout", "stderr")
CHUNK = 1 << 20
"""Bytes read at a time from a kernel's file: what the host holds of a flood at once."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_INSTALL_TIMEOUT = 30.0


async def install(kernel: KernelHandle, work_dir: Path) -> bool:
    """Install the guard in ``kernel`` once per kernel process; whether it is active.

    A kernel that cannot take it (not IPython, another machine, a changed
    working directory) runs without it: output is still bounded in what the
    host keeps, only not in what it receives.
    """
    if kernel.stream_guard is not None:
        return kernel.stream_guard
    probe = f".jupyter-exec-probe-{secrets.token_hex(8)}"
    try:
        fd = os.open(work_dir / probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        log.debug("stream guard not installed: %s", exc)
        kernel.stream_guard = False
        return False
    os.close(fd)
    try:
        reply = await _run_silently(kernel, install_code(probe))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(work_dir / probe)
    kernel.stream_guard = reply.get("status") == "ok"
    if not kernel.stream_guard:
        log.info(
            "kernel %s runs without the stream guard: %s", kernel.kernel_id, reply.get("evalue")
        )
    return kernel.stream_guard


async def _run_silently(kernel: KernelHandle, code: str) -> dict[str, Any]:
    msg_id = kernel.kc.execute(code, silent=True, store_history=False, allow_stdin=False)
    deadline = time.monotonic() + _INSTALL_TIMEOUT
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            msg = await kernel.shell.get(min(QUIET_POLL, remaining))
        except queue.Empty:
            if not await kernel.is_alive():
                break
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            return dict(msg["content"])
    return {"status": "error", "evalue": "no reply"}


def request(
    files_folder: str, cell_index: int, budget: int
) -> tuple[dict[str, Any], dict[str, str]]:
    """The execute_request metadata for one cell, and the kernel's file per stream.

    Paths are relative to the work dir, hidden, and unique per cell and call
    (a kernel's stale file from an earlier run cannot be mistaken for this one).
    """
    tag = secrets.token_hex(4)
    files = {
        name: f"{files_folder}/.cell-{cell_index + 1:03d}-{name}-{tag}.rest" for name in STREAMS
    }
    return {KEY: {"budget": max(0, budget), "files": files}}, files


def absorb(work_dir: Path, files: dict[str, str], builder: CellOutputs, spill: Spill) -> None:
    """Join what the kernel kept back to the cell's outputs and spill file, then remove it."""
    for name, relative in files.items():
        chunks = _read_and_remove(work_dir, relative)
        if chunks is not None:
            builder.add_spilled(name, chunks, spill)


def _read_and_remove(work_dir: Path, relative: str) -> Iterator[str] | None:
    """The file's text in chunks (decoded as it is read), or None when there is none.

    Opened link-free from the work dir down; a link, a folder or a FIFO where
    the file should be is ignored (and logged), never followed.
    """
    parts = Path(relative).parts
    try:
        dir_fd = os.open(work_dir, _DIR_FLAGS)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = next_fd
        fd = os.open(
            parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except FileNotFoundError:
        os.close(dir_fd)
        return None
    except OSError as exc:  # a link (ELOOP), or a folder of the path replaced by one
        _remove_quietly(parts[-1], dir_fd)
        os.close(dir_fd)
        log.warning("ignored the kernel's overflow file %s: %s", relative, exc)
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        _remove_quietly(parts[-1], dir_fd)
        os.close(dir_fd)
        log.warning("ignored the kernel's overflow file %s: not a regular file", relative)
        return None
    return _chunks(fd, dir_fd, parts[-1])


def _remove_quietly(name: str, dir_fd: int) -> None:
    """Remove ``name`` (a link itself, never its target; a folder is left)."""
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


def _chunks(fd: int, dir_fd: int, name: str) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        while block := os.read(fd, CHUNK):
            text = decoder.decode(block)
            if text:
                yield text
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        os.close(dir_fd)
