"""A session's state over time: forks into new sessions, per-cell undo, named checkpoints.

Built on the copy-on-write fork of a live kernel (:mod:`jupyter_exec.forking`)
and on snapshots, frozen forks that start new kernels with the state they
froze (:mod:`jupyter_exec.snapshots`)::

    session.fork(n)        fork_kernel x n ─► n new sessions, same work dir,
                           each its own notebook (the parent's cells, and
                           metadata saying where it branched)
    execute(code)          take_snapshot before the cell (undo_steps > 0)
    session.undo(n)        start_from(the snapshot before the n-th last cell)
                           ─► swapped in for the session's kernel; the undone
                           cells stay in the notebook, marked undone
    session.checkpoint()   take_snapshot, kept under a name
    session.restore(c)     start_from(its snapshot) ─► swapped in, likewise

Every operation takes the session's execution lock, so it waits for a running
cell (and those queued before it) and never interleaves with one. Snapshots
live in memory for the life of the session (they cost what later cells
rewrite, copy-on-write) and are ended by ``close()``. Only IPython kernels on
this machine or in our Docker containers can be forked; others get
:class:`~jupyter_exec.ForkError` saying why.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import logging
import os
import queue
import stat
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from jupyter_exec.exceptions import (
    ForkError,
    InvalidArgument,
    KernelNotAliveError,
    SessionClosedError,
)
from jupyter_exec.forking import AdoptedProvisioner, container_of, fork_kernel, in_docker
from jupyter_exec.kernel import QUIET_POLL, KernelHandle
from jupyter_exec.models import CellError
from jupyter_exec.naming import files_folder, notebook_name, validate_name
from jupyter_exec.recording import (
    Recording,
    fork_metadata,
    mark_recovered,
    mark_undone,
    note_state_change,
)
from jupyter_exec.snapshots import Snapshot, drop, start_from, take_snapshot

if TYPE_CHECKING:
    from jupyter_exec.session import AsyncSession

__all__ = ["MAX_FORKS", "Checkpoint", "SessionState", "StateMethods", "fork_session"]

log = logging.getLogger("jupyter_exec")

S = TypeVar("S", bound="AsyncSession")

MAX_FORKS = 32
"""The most sessions one ``fork()`` call makes (each is a kernel process)."""


@dataclass(frozen=True)
class Checkpoint:
    """A named point in a session's state, to :meth:`~jupyter_exec.AsyncSession.restore` later.

    Kept in memory (a frozen copy-on-write fork of the kernel) for the life
    of the session that took it.
    """

    name: str
    cell_index: int
    """The notebook's length when it was taken: cells from this index on came after it."""
    created: datetime
    """When it was taken (UTC)."""
    session: str
    """The name of the session it belongs to."""


@dataclass
class _Point:
    """A snapshot and where in the notebook it was taken."""

    snapshot: Snapshot
    cell_index: int
    undone: frozenset[int]
    """Cells already marked undone when it was taken (restoring it restores those marks)."""
    serial: int
    undo_serials: tuple[int, ...] = ()
    """For a checkpoint: the undo points of its timeline, still valid after restoring it."""


@dataclass(frozen=True)
class Recovery:
    """What came back when a cell's kernel died: the state from before cell ``cell_index``."""

    cell_index: int
    names: tuple[str, ...]


MAX_NAMES_SHOWN = 20
"""How many of the names that came back an error message lists (the notebook has them all)."""


@dataclass
class SessionState:
    """What one session keeps for undo and checkpoints; owned by the session."""

    undo_steps: int
    points: list[_Point] = field(default_factory=list)
    """Undo points, oldest first: the snapshot before each of the last cells."""
    checkpoints: dict[str, tuple[Checkpoint, _Point]] = field(default_factory=dict)
    unsupported: str | None = None
    """Why the kernel cannot be snapshotted (undo is then unavailable)."""
    root: KernelHandle | None = None
    """A Docker session's first kernel, kept while a fork of it serves the session:
    its container's life is that kernel's."""
    recovered: Recovery | None = None
    """Set by :meth:`recover` during a cell; reported with that cell, then cleared."""
    _serial: int = 0

    # -- before each cell ------------------------------------------------------------

    async def before_cell(self, session: AsyncSession, kernel: KernelHandle) -> None:
        """Take the undo snapshot for the cell about to run (when undo is on and possible)."""
        if self.undo_steps <= 0 or self.unsupported is not None:
            return
        try:
            snapshot = await take_snapshot(kernel)
        except ForkError as exc:
            self.unsupported = str(exc)
            log.info("session %s: undo unavailable: %s", session.name, exc)
            return
        except KernelNotAliveError:
            return  # the cell will report the dead kernel
        if session.closed:  # closed meanwhile: close() has ended the others already
            await drop(snapshot)
            return
        self.points.append(self._point(session, snapshot))
        while len(self.points) > self.undo_steps:
            await drop(self.points.pop(0).snapshot)

    def _point(self, session: AsyncSession, snapshot: Snapshot) -> _Point:
        self._serial += 1
        recording = session._recording
        assert recording is not None
        recorder = recording.recorder
        index = len(recorder) if recorder is not None else recording.cells_run
        undone = frozenset(
            i
            for i, cell in enumerate(recorder.cells if recorder is not None else ())
            if _undone(cell)
        )
        return _Point(snapshot, index, undone, self._serial)

    # -- undo -----------------------------------------------------------------------

    async def undo(self, session: AsyncSession, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgument(f"undo(n): n must be a whole number of cells >= 1, not {n!r}")
        async with session._lock:
            session._live_kernel()
            if self.undo_steps <= 0:
                raise InvalidArgument(
                    "undo is off for this session: start it with undo_steps=N to be able to "
                    "undo the last N cells"
                )
            if not self.points and self.unsupported is not None:
                raise ForkError(
                    f"undo is unavailable for this session's kernel: {self.unsupported}"
                )
            # A Docker session's restart ends its container, and the snapshots in it.
            self.points = [p for p in self.points if p.snapshot.alive]
            available = len(self.points)
            if n > available:
                raise InvalidArgument(
                    f"cannot undo {n} cell(s): {available} step(s) available "
                    f"(the session keeps a snapshot before each of its last {self.undo_steps} "
                    "cells; cells already undone, or after a restored checkpoint, do not count)"
                )
            point = self.points[-n]
            await self._switch(session, point)
            gone, self.points = self.points[-n:], self.points[:-n]
            for each in gone:
                await drop(each.snapshot)
            note_state_change(
                session._recording,
                {"action": "undo", "cells": n, "to_cell_index": point.cell_index},
                f"undo: the state from before cell {point.cell_index + 1}",
            )

    # -- checkpoints ----------------------------------------------------------------

    async def checkpoint(self, session: AsyncSession, name: str | None) -> Checkpoint:
        if name is not None:
            _check_checkpoint_name(name)
            if name in self.checkpoints:
                raise InvalidArgument(
                    f"a checkpoint named {name!r} exists; choose another name "
                    f"(taken: {', '.join(sorted(self.checkpoints))})"
                )
        async with session._lock:
            kernel = await _running_kernel(session, "checkpoint")
            if name is None:
                number = len(self.checkpoints) + 1
                while f"checkpoint-{number}" in self.checkpoints:
                    number += 1
                name = f"checkpoint-{number}"
            snapshot = await take_snapshot(kernel)
            if session.closed:
                await drop(snapshot)
                raise SessionClosedError("the session was closed while taking the checkpoint")
            point = self._point(session, snapshot)
            point.undo_serials = tuple(p.serial for p in self.points)
            made = Checkpoint(
                name=name,
                cell_index=point.cell_index,
                created=datetime.now(timezone.utc),
                session=session.name,
            )
            self.checkpoints[name] = (made, point)
            note_state_change(
                session._recording,
                {"action": "checkpoint", "name": name, "cell_index": point.cell_index},
                None,
            )
            return made

    def list_checkpoints(self) -> list[Checkpoint]:
        return [made for made, _ in self.checkpoints.values()]

    async def restore(self, session: AsyncSession, checkpoint: Checkpoint | str) -> None:
        name = checkpoint.name if isinstance(checkpoint, Checkpoint) else checkpoint
        if not isinstance(name, str):
            raise InvalidArgument(
                f"restore() takes a Checkpoint or its name, not {type(checkpoint).__name__}"
            )
        async with session._lock:
            session._live_kernel()
            found = self.checkpoints.get(name)
            if found is None or (
                isinstance(checkpoint, Checkpoint) and checkpoint.session != found[0].session
            ):
                known = ", ".join(sorted(self.checkpoints)) or "none yet"
                raise InvalidArgument(
                    f"this session has no checkpoint {name!r} (its checkpoints: {known})"
                )
            made, point = found
            if not point.snapshot.alive:
                del self.checkpoints[name]
                raise ForkError(
                    f"checkpoint {name!r} is lost: its snapshot process ended (a Docker "
                    "session's restart ends its container, and the snapshots in it)"
                )
            await self._switch(session, point)
            keep = set(point.undo_serials)
            gone = [p for p in self.points if p.serial not in keep]
            self.points = [p for p in self.points if p.serial in keep]
            for each in gone:
                await drop(each.snapshot)
            note_state_change(
                session._recording,
                {"action": "restore", "name": made.name, "to_cell_index": point.cell_index},
                f"restored checkpoint {made.name!r} (taken before cell {point.cell_index + 1})",
            )

    # -- recovery -------------------------------------------------------------------

    async def recover(self, session: AsyncSession) -> bool:
        """In place of a restart when a cell's kernel died or would not stop: a kernel from
        the latest snapshot, so the state from before that cell (or the last one that had a
        snapshot) comes back. False when there is none to use (the caller restarts)."""
        self.points = [p for p in self.points if p.snapshot.alive]
        old = session._kernel
        if self.undo_steps <= 0 or not self.points or old is None:
            return False
        if container_of(old) is old.km.provisioner and await old.is_alive():
            return False  # a container's first kernel, running away: only a restart stops it
        point = self.points.pop()
        try:
            await self._switch(session, point)
        except ForkError as exc:
            log.warning("session %s: no recovery from the snapshot: %s", session.name, exc)
            return False
        finally:
            await drop(point.snapshot)
        assert session._kernel is not None
        names = await user_names(session._kernel)
        self.recovered = Recovery(point.cell_index, names)
        note_state_change(
            session._recording,
            {"action": "recover", "to_cell_index": point.cell_index, "names": list(names)},
            None,
        )
        return True

    def explain_recovery(self, error: CellError | None) -> CellError | None:
        """The run's error, saying what came back instead of "state is lost"."""
        recovery = self.recovered
        if recovery is None or error is None:
            return error
        shown = ", ".join(recovery.names[:MAX_NAMES_SHOWN]) or "none"
        if len(recovery.names) > MAX_NAMES_SHOWN:
            shown += f" and {len(recovery.names) - MAX_NAMES_SHOWN} more"
        back = (
            f"the state from before cell {recovery.cell_index + 1} came back from its "
            f"snapshot ({len(recovery.names)} name(s): {shown})"
        )
        text = error.evalue.replace("its state is lost", back)
        if text == error.evalue:
            text = f"{text}; {back}"
        return CellError(error.ename, text, error.traceback)

    def after_record(self, session: AsyncSession, cell_index: int | None) -> None:
        """Mark the cell whose kernel died undone, with the names that came back."""
        recovery, self.recovered = self.recovered, None
        recording = session._recording
        if recovery is None or recording is None or recording.recorder is None:
            return
        if cell_index is not None:
            mark_recovered(recording.recorder, cell_index, recovery.cell_index, recovery.names)
        recording.restart_note = (
            f"recovered from the snapshot taken before cell {recovery.cell_index + 1}"
        )

    # -- switching kernels ------------------------------------------------------------

    async def _switch(self, session: AsyncSession, point: _Point) -> None:
        """Start a kernel from ``point``'s snapshot, make it the session's, retire the old one."""
        old = session._live_kernel()
        new = await start_from(point.snapshot, cwd=session.work_dir)
        if session.closed:
            await new.shutdown(now=True)
            raise SessionClosedError("the session was closed while its state was being restored")
        new.stream_guard = old.stream_guard
        session._kernel = new
        session._generation += 1
        await self._retire(session, old)
        recording = session._recording
        if recording is not None and recording.recorder is not None:
            mark_undone(recording.recorder, point.cell_index, point.undone)

    async def _retire(self, session: AsyncSession, old: KernelHandle) -> None:
        adopted = isinstance(old.km.provisioner, AdoptedProvisioner)
        if not adopted and (in_docker(old) or not session.options.shuts_down_kernel):
            # A Docker session's first kernel holds its container (and every fork in it);
            # a kernel we were given is not ours to stop. Both wait for close().
            if self.root is None and in_docker(old) and await old.is_alive():
                # Its state is in the snapshots now: free what only it holds (the
                # container's memory limit is shared with the kernel serving the session).
                old.kc.execute(_RELEASE, silent=True, store_history=False, allow_stdin=False)
            self.root = self.root or old
            return
        with contextlib.suppress(Exception):
            await old.shutdown(now=True)

    async def restartable(self, session: AsyncSession, kernel: KernelHandle) -> KernelHandle:
        """The kernel a restart should restart: for a Docker session serving a fork, its first
        kernel (a fork in the container cannot restart; the container's kernel can)."""
        root = self.root
        if root is None or not in_docker(root) or kernel is root:
            return kernel
        self.root = None
        session._kernel = root
        with contextlib.suppress(Exception):
            await kernel.shutdown(now=True)
        return root

    async def close(self, shuts_down_kernel: bool) -> None:
        """End every snapshot; then the kept first kernel (after the session's own kernel)."""
        snapshots = [p.snapshot for p in self.points]
        snapshots += [point.snapshot for _, point in self.checkpoints.values()]
        self.points = []
        self.checkpoints = {}
        for snapshot in snapshots:
            with contextlib.suppress(Exception):
                await drop(snapshot)
        root, self.root = self.root, None
        if root is not None:
            with contextlib.suppress(Exception):
                await root.shutdown(kernel=shuts_down_kernel)


_RELEASE = "get_ipython().reset(new_session=False)\nimport gc\ngc.collect()"
"""Run in a Docker session's first kernel once a fork serves the session instead."""


async def _running_kernel(session: AsyncSession, doing: str) -> KernelHandle:
    """The session's kernel, alive (checked with the backend), or why ``doing`` cannot go on."""
    kernel = session._live_kernel()
    if not await kernel.is_alive():
        raise KernelNotAliveError(
            f"cannot {doing}: the session's kernel is not running; restart() it, or undo() / "
            "restore() a checkpoint, first"
        )
    return kernel


def _undone(cell: dict[str, Any]) -> bool:
    return bool((cell.get("metadata") or {}).get("jupyter_exec", {}).get("undone"))


def _check_checkpoint_name(name: Any) -> None:
    if not isinstance(name, str):
        raise InvalidArgument(f"a checkpoint name must be a str, not {type(name).__name__}")
    try:
        validate_name(name)
    except InvalidArgument as exc:
        raise InvalidArgument(str(exc).replace("session name", "checkpoint name")) from None


# -- fork ---------------------------------------------------------------------------------


def _session(mixin: StateMethods) -> AsyncSession:
    """The session this API is mixed into (the only class that inherits it)."""
    return cast("AsyncSession", mixin)


class StateMethods:
    """The session API of this module, mixed into :class:`~jupyter_exec.AsyncSession`."""

    _state: SessionState

    async def fork(self, n: int = 1, name: str | None = None) -> list[AsyncSession]:
        """``n`` new sessions, each starting from this session's live state; this one goes on.

        Each has its own kernel (a copy-on-write fork: ~0.2 s, memory shared
        until written), the same work dir, and its own notebook (``<name>.ipynb``)
        and files folder: ``name`` (``<name>-<k>`` when ``n`` > 1), default
        ``<this name>-fork-<k>``. The notebook starts with this session's cells
        and says where it branched (metadata ``jupyter_exec.fork``). Waits for a
        running cell. Raises :class:`~jupyter_exec.ForkError` for a kernel that
        cannot fork (remote, not IPython, CUDA initialised) and
        :class:`~jupyter_exec.KernelNotAliveError` for a dead one. Close the
        forks yourself; a Docker session's forks share its container and end with it.
        """
        return await fork_session(_session(self), n, name)

    async def undo(self, n: int = 1) -> None:
        """Go back to the state before the last ``n`` cells (needs ``undo_steps`` >= ``n``).

        The kernel is replaced by one started from the snapshot taken before
        those cells (~0.2 s); they stay in the notebook, marked undone
        (``jupyter_exec.undone``), so replay and resume skip them. Works after
        the kernel died, too. Asking for more steps than are kept raises
        :class:`~jupyter_exec.InvalidArgument` saying how many are available.
        """
        await self._state.undo(_session(self), n)

    async def checkpoint(self, name: str | None = None) -> Checkpoint:
        """Remember the current state under ``name`` (default ``checkpoint-<k>``), in memory.

        A frozen copy-on-write snapshot of the kernel, kept until the session
        closes, that :meth:`restore` can go back to any number of times.
        """
        return await self._state.checkpoint(_session(self), name)

    async def restore(self, checkpoint: Checkpoint | str) -> None:
        """Go back to ``checkpoint`` (or the one of that name): a kernel started from it.

        Cells recorded after it are marked undone in the notebook; the restore
        is noted in the notebook's metadata and on the next cell.
        """
        await self._state.restore(_session(self), checkpoint)

    def checkpoints(self) -> list[Checkpoint]:
        """This session's checkpoints, oldest first."""
        return self._state.list_checkpoints()


async def fork_session(session: S, n: int, name: str | None) -> list[S]:
    """``n`` new, started sessions of ``session``'s class, each from its live state."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_FORKS:
        raise InvalidArgument(f"fork(n): n must be a whole number from 1 to {MAX_FORKS}, not {n!r}")
    if name is not None:
        validate_name(name)
        if name == session.name:
            raise InvalidArgument(f"a fork needs a name of its own, not the parent's ({name!r})")
    async with session._lock:
        kernel = await _running_kernel(session, "fork")
        work_dir = session.work_dir
        names = _fork_names(session, n, name)
        writing = writing_files(kernel, work_dir)
        if writing:
            log.warning(
                "session %s forks while its kernel has files of the work dir open for "
                "writing (%s): the forks share them, with one file offset",
                session.name,
                ", ".join(writing),
            )
        children: list[S] = []
        try:
            for child_name in names:
                handle = await fork_kernel(kernel, cwd=work_dir)
                handle.stream_guard = kernel.stream_guard
                children.append(_adopt_fork(session, handle, child_name, writing))
        except BaseException:
            for child in children:
                with contextlib.suppress(Exception):
                    await child.close()
            raise
        parent_recording = session._recording
        if parent_recording is not None:
            for child in children:
                parent_recording.ignore_session(child.notebook_path, child.files_dir)
                child_recording = child._recording
                assert child_recording is not None
                for other in (session, *children):
                    if other is not child:
                        child_recording.ignore_session(other.notebook_path, other.files_dir)
        note_state_change(
            parent_recording,
            {"action": "fork", "forks": [c.name for c in children]},
            None,
        )
        return children


def _fork_names(session: AsyncSession, n: int, name: str | None) -> list[str]:
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
    child._work_dir = work_dir
    child._name = name
    child._kernel = handle
    path = work_dir / notebook_name(name) if parent.notebook_path is not None else None
    child._notebook_path = path
    recording = Recording(work_dir, files_folder(name), path)
    child._recording = recording
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


def writing_files(kernel: KernelHandle, work_dir: Path) -> list[str]:
    """Files under ``work_dir`` a local kernel process holds open for writing (relative paths).

    A fork shares them with one file offset. Read from ``/proc``; empty where
    that cannot be read (not Linux, a Docker kernel's own view of its files).
    """
    process = getattr(kernel.km.provisioner, "process", None)
    pid = getattr(process, "pid", None)
    if not isinstance(pid, int) or in_docker(kernel):
        return []
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
            found.add(str(target.relative_to(root)))
    return sorted(found)


NAMES_EXPRESSION = "sorted(get_ipython().run_line_magic('who_ls', ''))"
"""The user's names in a kernel's namespace (IPython's own hidden ones left out)."""


async def user_names(kernel: KernelHandle, timeout: float = 10.0) -> tuple[str, ...]:
    """The names in ``kernel``'s user namespace, asked silently (empty if it does not say)."""
    msg_id = kernel.kc.execute(
        "", silent=True, store_history=False, user_expressions={"names": NAMES_EXPRESSION}
    )
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            msg = await kernel.shell.get(min(QUIET_POLL, remaining))
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        found = (msg["content"].get("user_expressions") or {}).get("names") or {}
        try:
            names = ast.literal_eval((found.get("data") or {}).get("text/plain", "[]"))
        except (ValueError, SyntaxError):
            return ()
        return tuple(str(n) for n in names) if isinstance(names, list) else ()
    return ()
