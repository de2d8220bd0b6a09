"""The host's side of the in-kernel stream guard: install it, ask for it per cell, join its files.

A session that records its cells keeps host memory bounded under output
floods by letting the kernel keep what is past the budget
(:mod:`jupyter_exec.inkernel.streams`)::

    start / restart  ─► plan(): a probe file in the work dir, the guard's source sent with the
                        other helpers in one silent request (engine.installs); the kernel
                        hooks its streams only if it sees the probe (shares the dir)
    each cell        ─► prepare(): a CellGuard whose execute_request metadata holds the
                        budget, per stream the hidden file where the rest goes, and the
                        name prefix for rich outputs too large to send
    cell ended       ─► absorb(): each stream file is streamed (bounded memory) into the
                        cell's spill file after the head the host received, its tail kept
                        for the notebook's marker, and removed; saved_files(): the large
                        outputs the kernel saved, checked before they are believed

Files the kernel wrote are opened without following links from the work dir
down, so a kernel cannot make the host read (and copy into a file the kernel
can read) anything outside it.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jupyter_exec.boundary import naming
from jupyter_exec.boundary.paths import Folder
from jupyter_exec.engine import mime
from jupyter_exec.engine.installs import Installs, Outcome
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.engine.outputs import CellOutputs, Spill
from jupyter_exec.exceptions import StorageError, WorkDirError
from jupyter_exec.inkernel.streams import KEY, install_entry

__all__ = ["LARGE_OUTPUT_CHARS", "CellGuard", "install", "plan", "prepare"]

log = logging.getLogger("jupyter_exec")

STREAMS = ("stdout", "stderr")
CHUNK = 1 << 20
"""Bytes read at a time from a kernel's file: what the host holds of a flood at once."""

_INSTALL_TIMEOUT = 30.0


async def install(kernel: KernelHandle, work_dir: Path) -> bool:
    """Install the guard in ``kernel`` once per kernel process; whether it is active.

    A kernel that cannot take it (not IPython, another machine, a changed
    working directory) runs without it: output is still bounded in what the
    host keeps, only not in what it receives. A session installs it with the
    other helpers, in one request (:func:`plan`); this asks alone.
    """
    if kernel.stream_guard is not None:
        return kernel.stream_guard
    await Installs.alone(kernel, work_dir, plan, _INSTALL_TIMEOUT)  # a death: not active
    return bool(kernel.stream_guard)


def plan(installs: Installs) -> None:
    """Add the guard to ``installs`` unless its kernel decided already (an IPython kernel
    that finds the batch's probe file in its working directory takes it)."""
    kernel = installs.kernel
    if kernel.stream_guard is not None:
        return
    if not kernel.runs_ipython:  # the guard is Python source: never sent to another kernel
        kernel.stream_guard = False
        return
    try:
        probe = installs.probe()
    except (WorkDirError, StorageError) as exc:
        log.debug("stream guard not installed: %s", exc)
        kernel.stream_guard = False
        return

    def done(outcome: Outcome) -> None:
        kernel.stream_guard = outcome.ok
        if not outcome.ok:
            log.info("kernel %s runs without the stream guard: %s", kernel.kernel_id, outcome.why)

    installs.add(install_entry(probe), done)


LARGE_OUTPUT_CHARS = 8 << 20
"""A rich output value longer than this is saved by the kernel; the notebook gets a note and,
for an image, an ``<img>`` pointing at the file (what a viewer needs to show it)."""


_LARGE_RULES: dict[str, Any] = {
    "limit": LARGE_OUTPUT_CHARS,
    "extensions": mime.EXTENSIONS,
    "binary": sorted(mime.BINARY),
}
"""What the kernel is told about large outputs, the same for every cell (built once)."""


class CellGuard:
    """What one cell asks of the guard, and how the host takes back what it kept.

    Paths are relative to the work dir, in the session's files folder, and
    unique per cell and call (a stale file from an earlier run cannot be
    mistaken for this one's).
    """

    def __init__(self, work_dir: Path, files_folder: str, cell_index: int, budget: int) -> None:
        self.work_dir = work_dir
        self.files_folder = files_folder
        tag = secrets.token_hex(4)
        self.files = {
            name: f"{files_folder}/{naming.held_back_file_name(cell_index, name, tag)}"
            for name in STREAMS
        }
        self.prefix = f"{files_folder}/{naming.large_output_prefix(cell_index, tag)}"
        self.metadata: dict[str, Any] = {
            KEY: {
                "budget": max(0, budget),
                "files": self.files,
                "large": {**_LARGE_RULES, "prefix": self.prefix},
            }
        }

    def absorb(self, builder: CellOutputs, spill: Spill) -> None:
        """Join what the kernel kept back to the cell's outputs and spill file, then remove it.

        The files folder is opened once for every stream (a link-free walk from the work dir:
        each cell pays it, mostly to find no file)."""
        try:
            parent = Folder.open(self.work_dir, self.files_folder)
        except FileNotFoundError:
            return
        except (WorkDirError, StorageError) as exc:
            log.warning("ignored the kernel's overflow files in %s: %s", self.files_folder, exc)
            return
        with parent:
            for name, relative in self.files.items():
                chunks = _read_and_remove(parent, os.path.basename(relative))
                if chunks is not None:
                    builder.add_spilled(name, chunks, spill)

    def saved_files(self, output: dict[str, Any]) -> dict[str, Path]:
        """The files the kernel saved for ``output`` instead of sending them, by MIME type.

        Only names this cell asked for, and only regular files reached without
        a link, are believed: the metadata comes from the kernel.
        """
        saved = ((output.get("metadata") or {}).get(KEY) or {}).get("saved")
        if not isinstance(saved, dict):
            return {}
        found = {}
        for mime_type, relative in saved.items():
            if (
                isinstance(relative, str)
                and relative.startswith(self.prefix + "-")
                and "/" not in relative[len(self.prefix) :]
                and _is_plain_file(self.work_dir, relative)
            ):
                found[str(mime_type)] = self.work_dir / relative
        return found


async def prepare(
    kernel: KernelHandle, work_dir: Path, files_folder: str, cell_index: int, budget: int
) -> CellGuard | None:
    """A :class:`CellGuard` for the next cell, or None when the kernel runs without the guard."""
    if not await install(kernel, work_dir):
        return None
    return CellGuard(work_dir, files_folder, cell_index, budget)


def _is_plain_file(work_dir: Path, relative: str) -> bool:
    folder, name = os.path.split(relative)
    try:
        with Folder.open(work_dir, folder) as parent:
            found = parent.lstat(name)
    except (WorkDirError, StorageError, FileNotFoundError):
        return False
    return found is not None and stat.S_ISREG(found.st_mode)


def _read_and_remove(parent: Folder, name: str) -> Iterator[str] | None:
    """The file's text in chunks (decoded as it is read, removed once read), or None when
    there is none; to read before ``parent`` closes.

    ``parent`` was opened link-free from the work dir down
    (:mod:`jupyter_exec.boundary.paths`); a link, a folder or a FIFO where the file
    should be is removed and logged, never followed.
    """
    try:
        fd = parent.open_file(name, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except (WorkDirError, StorageError) as exc:
        with contextlib.suppress(WorkDirError, StorageError):
            parent.unlink(name)
        log.warning("ignored the kernel's overflow file %s: %s", name, exc)
        return None
    return _chunks(fd, parent, name)


def _chunks(fd: int, parent: Folder, name: str) -> Iterator[str]:
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
        with contextlib.suppress(WorkDirError, StorageError, OSError):  # (OSError: closed)
            parent.unlink(name)
