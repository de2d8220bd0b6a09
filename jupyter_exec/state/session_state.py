"""A session's state over time: forks into new sessions, per-cell undo, named checkpoints.

Built on the copy-on-write fork of a live kernel (:mod:`jupyter_exec.state.forking`),
on snapshots, frozen forks that start new kernels with the state they froze
(:mod:`jupyter_exec.state.snapshots`), and on checkpoints the kernel writes to disk
(:mod:`jupyter_exec.state.durable`)::

    session.fork(n)        fork_kernel x n ─► n new sessions    [branching.py]
    execute(code)          take_snapshot before the cell (undo_steps > 0); the names
                           it changed come back with its reply; after it, an
                           automatic checkpoint on disk when one is due
    session.undo(n)        start_from(the snapshot before the n-th last cell)
                           ─► swapped in for the session's kernel; the undone
                           cells stay in the notebook, marked undone
    session.checkpoint()   take_snapshot, kept under a name, and the namespace
                           written to .<session>_checkpoints/<checkpoint>/
    session.restore(c)     start_from(its snapshot) ─► swapped in, likewise; without
                           the snapshot (another run, another machine): loaded from disk
    a kernel death         the latest snapshot or checkpoint comes back  [recovery.py]

Every operation takes the session's execution lock, so it waits for a running
cell (and those queued before it) and never interleaves with one. Snapshots
live in memory for the life of the session (they cost what later cells
rewrite, copy-on-write) and are ended by ``close()``; checkpoints on disk stay.
Only IPython kernels on this machine or in our Docker containers can be
forked; others get :class:`~jupyter_exec.ForkError` saying why.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.boundary.naming import validate_name
from jupyter_exec.engine.hooks import Replacement
from jupyter_exec.engine.installs import Installs
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.engine.meta import is_undone, mark_undone, note_state_change
from jupyter_exec.engine.runner import CellRun
from jupyter_exec.exceptions import (
    CheckpointError,
    ForkError,
    InvalidArgument,
    KernelNotAliveError,
    SessionClosedError,
)
from jupyter_exec.network.shared import shared
from jupyter_exec.state.branching import running_kernel
from jupyter_exec.state.checkpoints import (
    Checkpoint,
    checkpoints_folder,
    manifest_undone,
    names_on_disk,
    on_disk,
    read_checkpoint,
)
from jupyter_exec.state.durable import STATE, DurableState
from jupyter_exec.state.forking import AdoptedProvisioner, in_docker
from jupyter_exec.state.recovery import RecoveryMixin
from jupyter_exec.state.snapshots import Snapshot, drop, start_from, take_snapshot

if TYPE_CHECKING:
    from jupyter_exec.state.host import StateHost

__all__ = ["Checkpoint", "SessionState"]

log = logging.getLogger("jupyter_exec")

CLOSE_FLUSH = 30.0
"""Seconds a closing session waits for its kernel to finish writing the last generation."""


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


@dataclass
class SessionState(RecoveryMixin):
    """What one session keeps for undo and checkpoints; owned by the session."""

    undo_steps: int
    checkpoint_every: float | None = None
    points: list[_Point] = field(default_factory=list)
    """Undo points, oldest first: the snapshot before each of the last cells."""
    checkpoints: dict[str, tuple[Checkpoint, _Point | None]] = field(default_factory=dict)
    """This session's checkpoints; the point is None for one only on disk."""
    unsupported: str | None = None
    """Why the kernel cannot be snapshotted (undo is then unavailable)."""
    root: KernelHandle | None = None
    """A Docker session's first kernel, kept while a fork of it serves the session:
    its container's life is that kernel's."""
    durable: DurableState = field(init=False)
    _serial: int = 0
    _configured: bool = False

    def __post_init__(self) -> None:
        self.durable = DurableState(self.checkpoint_every)

    # -- around each cell ------------------------------------------------------------

    async def before_cell(self, session: StateHost, kernel: KernelHandle) -> None:
        """Take the undo snapshot for the cell about to run (when undo is on and possible),
        and have the kernel report the names the cell changes (when anything can restore)."""
        wanted = self.undo_steps > 0 or self.durable.every > 0 or self.checkpoints
        if not await self.setup_generations(session, kernel) and wanted:
            await self.durable.ensure(session, kernel)
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

    def plan_installs(self, session: StateHost, installs: Installs) -> None:
        """What :meth:`before_cell` would install in the kernel, added to the session's one
        batch before the kernel process's first recorded cell: the state module when the
        generations or undo and checkpoints want it, then the generations."""
        self._configure(session)
        kernel = installs.kernel
        generations = self.durable.generations
        saving = generations.enabled and generations.refused is not kernel
        if saving or self.undo_steps > 0 or self.durable.every > 0 or self.checkpoints:
            self.durable.plan(session, installs)
        if not saving:
            return
        if STATE in installs.names():
            generations.plan(session, installs, needs=(STATE,))
        elif self.durable.installed is kernel:
            generations.plan(session, installs)

    def _configure(self, session: StateHost) -> None:
        """Take the session's options for the generations (once)."""
        if self._configured:
            return
        self._configured = True
        generations = self.durable.generations
        options = session.options
        self.remote_kernel = options.backend == "remote"
        generations.enabled = options.save_state  # a remote kernel's, on its host
        generations.budget = options.state_budget_mb << 20

    async def setup_generations(self, session: StateHost, kernel: KernelHandle) -> bool:
        """Install the per-cell state in ``kernel`` (``save_state``); whether it is there."""
        generations = self.durable.generations
        self._configure(session)
        if not generations.enabled or generations.refused is kernel:
            return False
        return await self.durable.ensure(session, kernel) and await generations.ensure(
            session, kernel
        )

    def cell_expressions(
        self, kernel: KernelHandle, cell_index: int | None = None
    ) -> dict[str, str]:
        """The ``user_expressions`` a cell's request carries: the names it changed, and for
        a recorded cell (``cell_index``) the commit of the generation after it."""
        found = self.durable.expressions(kernel, bool(self.points or self.checkpoints))
        if cell_index is not None:
            found.update(self.durable.generations.expressions(kernel, cell_index))
        return found

    async def after_cell(
        self, session: StateHost, kernel: KernelHandle, run: CellRun, index: int | None
    ) -> None:
        """Note the names the cell changed; take an automatic checkpoint when one is due."""
        self.durable.after_cell(index, run.user_expressions)
        await self.durable.generations.after_cell(session, kernel, run.user_expressions)
        serving = session.kernel_slot.kernel
        if run.status not in ("ok", "error") or session.closed or kernel is not serving:
            return
        needed = bool(self.points or self.checkpoints)
        if run.status == "error" and self.durable.expressions(kernel, needed):  # reply had none
            await self.durable.changes_after_error(kernel, index)
        index_now = self._cells_now(session)

        def where() -> dict[str, Any]:  # (a walk over every cell: only when one is due)
            index, undone = self._where(session)
            return {"cell_index": index, "undone": undone}

        await self.durable.auto(session, kernel, where)
        starts = [p.cell_index for p in self.points]
        starts += [p.cell_index for _, p in self.checkpoints.values() if p is not None]
        starts += [c.cell_index for c in self.durable.taken]
        self.durable.forget_before(min(starts, default=index_now))

    def _cells_now(self, session: StateHost) -> int:
        """The index the next recorded cell takes (what :meth:`_where` says first)."""
        recording = session._recording
        assert recording is not None
        recorder = recording.recorder
        return recording.cells_run if recorder is None else len(recorder)

    def _where(self, session: StateHost) -> tuple[int, list[int]]:
        recording = session._recording
        assert recording is not None
        recorder = recording.recorder
        if recorder is None:
            return recording.cells_run, []
        return len(recorder), [i for i, c in enumerate(recorder.cells) if is_undone(c)]

    def _point(self, session: StateHost, snapshot: Snapshot) -> _Point:
        self._serial += 1
        index, undone = self._where(session)
        return _Point(snapshot, index, frozenset(undone), self._serial)

    # -- undo -----------------------------------------------------------------------

    async def undo(self, session: StateHost, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgument(f"undo(n): n must be a whole number of cells >= 1, not {n!r}")
        async with session.kernel_slot.locked():
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
            await self._switch(session, point, "undo")
            gone, self.points = self.points[-n:], self.points[:-n]
            for each in gone:
                await drop(each.snapshot)
            self.durable.rewound(point.cell_index)
            note_state_change(
                session._recording,
                {"action": "undo", "cells": n, "to_cell_index": point.cell_index},
                f"undo: the state from before cell {point.cell_index + 1}",
            )

    # -- checkpoints ----------------------------------------------------------------

    async def checkpoint(self, session: StateHost, name: str | None) -> Checkpoint:
        if name is not None:
            _check_checkpoint_name(name)
            taken = self._taken_names(session)
            if name in taken:
                raise InvalidArgument(
                    f"a checkpoint named {name!r} exists; choose another name "
                    f"(taken: {', '.join(sorted(taken))})"
                )
        async with session.kernel_slot.locked():
            kernel = await running_kernel(session, "checkpoint")
            if name is None:
                taken = self._taken_names(session)
                number = len(self.checkpoints) + 1
                while f"checkpoint-{number}" in taken:
                    number += 1
                name = f"checkpoint-{number}"
            point: _Point | None = None
            memory_problem: Exception | None = None
            try:
                point = self._point(session, await take_snapshot(kernel))
                point.undo_serials = tuple(p.serial for p in self.points)
            except ForkError as exc:
                memory_problem = exc
            if session.closed:
                if point is not None:
                    await drop(point.snapshot)
                raise SessionClosedError("the session was closed while taking the checkpoint")
            index, undone = self._where(session)
            try:
                made = await self.durable.save(
                    session, kernel, name, {"cell_index": index, "undone": undone}
                )
            except CheckpointError as exc:
                if point is None:
                    raise CheckpointError(
                        f"no checkpoint could be taken: in memory: {memory_problem}; on disk: {exc}"
                    ) from None
                log.warning(
                    "session %s: checkpoint %r kept in memory only: %s", session.name, name, exc
                )
                made = Checkpoint(name, index, datetime.now(timezone.utc), session.name)
            except BaseException:  # the kernel died writing it, or the caller gave up
                if point is not None:
                    await drop(point.snapshot)
                raise
            self.checkpoints[name] = (made, point)
            note_state_change(
                session._recording,
                {"action": "checkpoint", "name": name, "cell_index": index}
                | ({"path": str(made.path)} if made.path else {})
                | ({"skipped": dict(made.skipped)} if made.skipped else {}),
                None,
            )
            return made

    def _taken_names(self, session: StateHost) -> set[str]:
        return set(self.checkpoints) | names_on_disk(session.work_dir, session.name)

    def list_checkpoints(self, session: StateHost) -> list[Checkpoint]:
        mine = [made for made, _ in self.checkpoints.values()]
        paths = {c.path for c in mine if c.path is not None}
        try:
            disk = on_disk(session.work_dir, session.name)
        except SessionClosedError:  # not started
            disk = []
        return mine + [c for c in disk if c.path not in paths]

    def _resolve(
        self, session: StateHost, checkpoint: Checkpoint | str | os.PathLike[str]
    ) -> tuple[Checkpoint, _Point | None]:
        if isinstance(checkpoint, Checkpoint):
            found = self.checkpoints.get(checkpoint.name)
            if found is not None and found[0].session == checkpoint.session:
                return found
            if checkpoint.path is not None:
                return checkpoint, None
            known = ", ".join(sorted(self.checkpoints)) or "none yet"
            raise InvalidArgument(
                f"this session has no checkpoint {checkpoint.name!r} (its checkpoints: {known})"
            )
        if isinstance(checkpoint, str) and checkpoint in self.checkpoints:
            return self.checkpoints[checkpoint]
        if isinstance(checkpoint, str) and "/" not in checkpoint and os.sep not in checkpoint:
            for listed in self.list_checkpoints(session):
                if listed.name == checkpoint and listed.session == session.name:
                    return listed, None
            if checkpoint in names_on_disk(session.work_dir, session.name):
                # Left out of the listing (unsigned, altered, not whole): say why.
                relative = f"{checkpoints_folder(session.name)}/{checkpoint}"
                return read_checkpoint(session.work_dir, relative, verify=False), None
            known = ", ".join(c.name for c in self.list_checkpoints(session)) or "none yet"
            raise InvalidArgument(
                f"this session has no checkpoint {checkpoint!r} (its checkpoints: {known})"
            )
        if isinstance(checkpoint, str | os.PathLike):  # read, not yet hashed (load does it)
            folder = Path(checkpoint).absolute()
            return read_checkpoint(folder.parent, folder.name, verify=False), None
        raise InvalidArgument(
            f"restore() takes a Checkpoint, its name or its folder, not {type(checkpoint).__name__}"
        )

    async def restore(
        self,
        session: StateHost,
        checkpoint: Checkpoint | str | os.PathLike[str],
        force: bool = False,
        trust_origin: bool = False,
    ) -> None:
        async with session.kernel_slot.locked():
            session._live_kernel()
            made, point = self._resolve(session, checkpoint)
            if point is not None and point.snapshot.alive:
                await self._switch(session, point, "restore")
                keep = set(point.undo_serials)
                gone = [p for p in self.points if p.serial not in keep]
                self.points = [p for p in self.points if p.serial in keep]
                for each in gone:
                    await drop(each.snapshot)
                self.durable.rewound(point.cell_index, made if made.path else None)
                note_state_change(
                    session._recording,
                    {"action": "restore", "name": made.name, "to_cell_index": point.cell_index},
                    f"restored checkpoint {made.name!r} (taken before cell {point.cell_index + 1})",
                )
                return
            if made.path is None:
                self.checkpoints.pop(made.name, None)
                raise ForkError(
                    f"checkpoint {made.name!r} is lost: its snapshot process ended (a Docker "
                    "session's restart ends its container, and the snapshots in it) and it "
                    "could not be written to disk"
                )
            await self._restore_from_disk(session, made, force, trust_origin)

    async def _restore_from_disk(
        self, session: StateHost, made: Checkpoint, force: bool, trust_origin: bool
    ) -> None:
        kernel = session._live_kernel()
        if not await kernel.is_alive():
            await session.restart("restarted to restore a checkpoint")
            kernel = session._live_kernel()
        loaded = await self.durable.load(
            session, kernel, made, force=force, trust_origin=trust_origin
        )
        ours = loaded.checkpoint.session == session.name
        recording = session._recording
        if recording is not None and recording.recorder is not None:
            if ours:
                mark_undone(recording.recorder, made.cell_index, manifest_undone(made))
            else:  # another session's state: none of this notebook's cells made it
                mark_undone(recording.recorder, 0, frozenset())
        for each in self.points:  # another timeline now
            await drop(each.snapshot)
        self.points = []
        self.durable.rewound(made.cell_index if ours else None, loaded.checkpoint if ours else None)
        source = str(loaded.checkpoint.path)
        note_state_change(
            session._recording,
            {"action": "restore", "name": made.name, "path": source, "names": list(loaded.names)}
            | ({"to_cell_index": made.cell_index} if ours else {"session": made.session})
            | ({"skipped": dict(made.skipped)} if made.skipped else {}),
            f"restored checkpoint {made.name!r} from {source}",
        )

    # -- switching kernels ------------------------------------------------------------

    async def _switch(self, session: StateHost, point: _Point, reason: Replacement) -> None:
        """Start a kernel from ``point``'s snapshot, make it the session's, retire the old one."""
        old = session._live_kernel()
        new = await start_from(point.snapshot, cwd=session.work_dir)
        if session.closed:
            await new.shutdown(now=True)
            raise SessionClosedError("the session was closed while its state was being restored")
        new.stream_guard = old.stream_guard
        new.network = shared(old.network)  # the session's proxy, still closed by its owner
        await session.replace_kernel(new, reason)
        await self._retire(session, old)
        recording = session._recording
        if recording is not None and recording.recorder is not None:
            mark_undone(recording.recorder, point.cell_index, point.undone)

    async def _retire(self, session: StateHost, old: KernelHandle) -> None:
        adopted = isinstance(old.km.provisioner, AdoptedProvisioner)
        if not adopted and (in_docker(old) or not session.options.shuts_down_kernel):
            # A Docker session's first kernel holds its container (and every fork in it);
            # a kernel we were given is not ours to stop. Both wait for close().
            if self.root is None and in_docker(old) and await old.is_alive():
                # Its state is in the snapshots now: free what only it holds (the
                # container's memory limit is shared with the kernel serving the session).
                old.send_silent(_RELEASE)
            self.root = self.root or old
            return
        with contextlib.suppress(Exception):
            await old.shutdown(now=True)

    async def restartable(self, session: StateHost, kernel: KernelHandle) -> None:
        """Before ``kernel`` restarts: forget what the restarted process will not have, and
        for a Docker session serving a fork, put its first kernel back in the session's
        place to restart instead (a fork in the container cannot restart; that one can)."""
        self.durable.installed = None  # the restarted process has none of it
        self.durable.generations.installed = None
        # Nor what the last commit stored: the next one stores every name (a zygote's
        # child starts with names of its own, which a cell may never change).
        self.durable.generations.committed_in = None
        root = self.root
        if root is None or not in_docker(root) or kernel is root:
            return
        self.root = None
        session.kernel_slot.swap(root)  # (the restart that follows counts its generation)
        with contextlib.suppress(Exception):
            await kernel.shutdown(now=True)

    def unsigned_generation(self, kernel: KernelHandle) -> bool:
        """Whether the last cell's state is handed to the kernel's writer but not signed."""
        return self.durable.generations.unsigned(kernel)

    async def sign_written(self, session: StateHost, kernel: KernelHandle) -> None:
        """Sign what the kernel's writer finished since the last cell, without waiting for
        the rest (an idle session's poll; a kernel that cannot answer is left alone)."""
        with contextlib.suppress(CheckpointError, KernelNotAliveError, OSError):
            await self.durable.generations.flush(session, kernel, 0.0)

    async def flush(self, session: StateHost) -> None:
        """The public ``flush()``: wait for the kernel's writer, sign what it wrote, and
        write the signature files; in turn with cells."""
        generations = self.durable.generations
        async with session.kernel_slot.locked():
            kernel = session.kernel_slot.kernel
            live = kernel is not None and not session.kernel_slot.known_dead(kernel)
            if kernel is not None and live and kernel is generations.installed:
                with contextlib.suppress(KernelNotAliveError):
                    await generations.flush(session, kernel)
            await generations.settled()

    async def before_close(self, session: StateHost, kernel: KernelHandle) -> None:
        """Sign the generation of the last cell before the kernel stops (a resume then starts
        from it); a kernel that does not answer in :data:`CLOSE_FLUSH` seconds is left."""
        generations = self.durable.generations
        if generations.installed is not kernel:
            return
        with contextlib.suppress(CheckpointError, KernelNotAliveError, OSError):
            if await generations.discard_remote(session, kernel):
                return  # a remote kernel's state goes with it: nothing to wait for
            await generations.flush(session, kernel, CLOSE_FLUSH)

    async def close(self, shuts_down_kernel: bool) -> None:
        """End every snapshot; then the kept first kernel (after the session's own kernel)."""
        await self.durable.generations.settled()  # the newest signature is on disk
        snapshots = [p.snapshot for p in self.points]
        snapshots += [point.snapshot for _, point in self.checkpoints.values() if point]
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


def _check_checkpoint_name(name: Any) -> None:
    if not isinstance(name, str):
        raise InvalidArgument(f"a checkpoint name must be a str, not {type(name).__name__}")
    try:
        validate_name(name)
    except InvalidArgument as exc:
        raise InvalidArgument(str(exc).replace("session name", "checkpoint name")) from None
    if name.startswith("auto-"):
        raise InvalidArgument(
            f"checkpoint names starting with 'auto-' are the session's own ({name!r})"
        )
