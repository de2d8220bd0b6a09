"""Forking a session: ``n`` new sessions, each from the live state of a session's kernel.

Each fork is a started session of the parent's class around a copy-on-write
fork of its kernel (:func:`jupyter_exec.state.forking.fork_kernel`): the same work
dir, its own notebook that starts with the parent's cells and says where it
branched, and its own files folder. The parent goes on unchanged. The parent's
kernel forks the ``n`` children one after another; they start (connect, answer)
at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from jupyter_exec.boundary.naming import files_folder, notebook_name, validate_name
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.engine.meta import fork_metadata, note_state_change
from jupyter_exec.engine.provisioning import kernel_process
from jupyter_exec.exceptions import InvalidArgument, KernelNotAliveError
from jupyter_exec.network.shared import shared
from jupyter_exec.state.checkpoints import checkpoints_folder
from jupyter_exec.state.forking import ForkedProcess, in_docker, request_fork
from jupyter_exec.state.generations import state_folder

if TYPE_CHECKING:
    from jupyter_exec.state.host import ForkHost, StateHost

__all__ = ["MAX_FORKS", "fork_session", "running_kernel", "writing_files"]

log = logging.getLogger("jupyter_exec")

S = TypeVar("S", bound="ForkHost")

MAX_FORKS = 32
"""The most sessions one ``fork()`` call makes (each is a kernel process)."""


async def running_kernel(session: StateHost, doing: str) -> KernelHandle:
    """The session's kernel, alive (checked with the backend), or why ``doing`` cannot go on."""
    kernel = session._live_kernel()
    if not await kernel.is_alive():
        raise KernelNotAliveError(
            f"cannot {doing}: the session's kernel is not running; restart() it, or undo() / "
            "restore() a checkpoint, first"
        )
    return kernel


async def fork_session(session: S, n: int, name: str | None) -> list[S]:
    """``n`` new, started sessions of ``session``'s class, each from its live state."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_FORKS:
        raise InvalidArgument(f"fork(n): n must be a whole number from 1 to {MAX_FORKS}, not {n!r}")
    if name is not None:
        validate_name(name)
        if name == session.name:
            raise InvalidArgument(f"a fork needs a name of its own, not the parent's ({name!r})")
    async with session.kernel_slot.locked():
        kernel = await running_kernel(session, "fork")
        work_dir = session.work_dir
        names = _fork_names(session, n, name)
        writing = writing_files(kernel, work_dir, skip=(state_folder(session.name),))
        if writing:
            log.warning(
                "session %s forks while its kernel has files of the work dir open for "
                "writing (%s): the forks share them, with one file offset",
                session.name,
                ", ".join(writing),
            )
        children: list[S] = []
        forked: list[ForkedProcess] = []
        try:
            for _ in names:  # the parent forks them one after another...
                forked.append(await request_fork(kernel, cwd=work_dir))
            pending, forked = forked, []  # adopt_kernel ends a child it fails to drive
            handles = await _adopt_all(pending)  # ...and they start at once
            for child_name, handle in zip(names, handles, strict=True):
                handle.stream_guard = kernel.stream_guard
                handle.network = shared(kernel.network)  # in the same container, same proxy
                children.append(_adopt_fork(session, handle, child_name, writing))
        except BaseException:
            for process in forked:  # forked, never driven: ended now
                with contextlib.suppress(BaseException):
                    await (await process.adopt()).shutdown(now=True)
            for child in children:
                with contextlib.suppress(Exception):
                    await child.close()
            raise
        parent_recording = session._recording
        if parent_recording is not None:
            for child in children:
                parent_recording.ignore_session(child.notebook_path, child.files_dir)
                parent_recording.ignore_session(None, _checkpoints_dir(child))
                child_recording = child._recording
                assert child_recording is not None
                for other in (session, *children):
                    if other is not child:
                        child_recording.ignore_session(other.notebook_path, other.files_dir)
                        child_recording.ignore_session(None, _checkpoints_dir(other))
        note_state_change(
            parent_recording,
            {"action": "fork", "forks": [c.name for c in children]},
            None,
        )
        return children


async def _adopt_all(forked: list[ForkedProcess]) -> list[KernelHandle]:
    """Every forked child as a ready kernel, connected at once; if one fails, the others
    are shut down and its error raised."""
    made = await asyncio.gather(*(p.adopt() for p in forked), return_exceptions=True)
    handles = [h for h in made if isinstance(h, KernelHandle)]
    failed = next((h for h in made if isinstance(h, BaseException)), None)
    if failed is not None:
        for handle in handles:
            with contextlib.suppress(Exception):
                await handle.shutdown(now=True)
        raise failed
    return handles


def _fork_names(session: StateHost, n: int, name: str | None) -> list[str]:
    work_dir = session.work_dir

    def free(candidate: str) -> bool:
        return (
            not (work_dir / notebook_name(candidate)).exists()
            and not (work_dir / files_folder(candidate)).exists()
        )

    if name is not None:
        names = [name] if n == 1 else [f"{name}-{k}" for k in range(1, n + 1)]
        taken = [c for c in names if not free(c)]
        if taken:
            raise InvalidArgument(
                f"{taken[0]!r} already has a notebook or files folder in {work_dir}; "
                "give the fork another name"
            )
        return [validate_name(c) for c in names]
    names = []
    k = 0
    while len(names) < n:
        k += 1
        candidate = f"{session.name}-fork-{k}"
        if free(candidate):
            names.append(validate_name(candidate))
    return names


def _adopt_fork(parent: S, handle: KernelHandle, name: str, writing: list[str]) -> S:
    """A started session of ``parent``'s class around the forked kernel ``handle``."""
    options = parent.options.replace(
        name=name, notebook=None, work_dir=parent.work_dir, kernel_manager=None, owns_kernel=False
    )
    if parent.notebook_path is None:
        options = options.replace(notebook=False)
    child = type(parent)(options=options)
    work_dir = parent.work_dir
    path = work_dir / notebook_name(name) if parent.notebook_path is not None else None
    recording = child.adopt_kernel(handle, work_dir, path)
    parent_recording = parent._recording
    if path is not None and parent_recording is not None and parent_recording.recorder is not None:
        recorder = parent_recording.recorder
        cells = copy.deepcopy(recorder.cells)
        where = {
            "parent_session": parent.name,
            "parent_notebook": str(parent.notebook_path),
            "cell_index": len(cells),
            "at": datetime.now(timezone.utc).isoformat(),
        }
        if writing:
            where["shared_open_files"] = writing
        metadata = fork_metadata(recorder.metadata, name, where)
        recording.adopt(child.recorder_class(path, metadata, cells))
        recording.cells_run = parent_recording.cells_run
    return child


def writing_files(kernel: KernelHandle, work_dir: Path, skip: tuple[str, ...] = ()) -> list[str]:
    """Files under ``work_dir`` a local kernel process holds open for writing (relative paths).

    A fork shares them with one file offset. Read from ``/proc``; empty where
    that cannot be read (not Linux, a Docker kernel's own view of its files).
    Files in the folders ``skip`` names are jupyter-exec's own (the per-cell state's
    writer, whose files a fork never writes: its child starts a writer of its own).
    """
    process = kernel_process(kernel.km.provisioner)
    pid = process.pid if process is not None else None
    if not isinstance(pid, int) or in_docker(kernel):
        return []
    # Trusted origin: compared with the kernel's own /proc fd links (real paths), not opened.
    root = work_dir.resolve()
    found: set[str] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    for fd in fds:
        try:
            target = Path(os.readlink(f"/proc/{pid}/fd/{fd}"))
            with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as f:
                flags = next(int(line.split()[1], 8) for line in f if line.startswith("flags:"))
            if not target.is_absolute() or not stat.S_ISREG(target.stat().st_mode):
                continue
        except (OSError, StopIteration, ValueError):
            continue
        if flags & (os.O_WRONLY | os.O_RDWR) and target.is_relative_to(root):
            relative = target.relative_to(root)
            if relative.parts[0] not in skip:
                found.add(str(relative))
    return sorted(found)


def _checkpoints_dir(session: StateHost) -> Path:
    """Where ``session``'s kernel writes its checkpoints (not the other sessions' doing)."""
    return session.work_dir / checkpoints_folder(session.name)
