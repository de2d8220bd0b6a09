"""After a kernel death: the latest snapshot or checkpoint comes back, and says what did not.

When a cell's kernel dies (or must be stopped because it ran away), the
session restarts it; with something to come back from, not empty:

* the latest **undo snapshot** (in memory, ``undo_steps`` > 0): a kernel started
  from it is swapped in, with every object as it was, unpicklable ones too;
* else, with ``save_state`` (the default), the newest **signed generation** of
  the state saved after every cell (:mod:`jupyter_exec.state.generations`), then the
  recorded cells after it run again (:mod:`jupyter_exec.state.reload`): the next cell
  sees the state of the last completed one;
* else, or when it is newer, the latest **checkpoint on disk** this session
  took (explicit or automatic, ``checkpoint_every``): the restarted kernel loads it.

Names the cells after that point changed (reported by the kernel with each
cell's reply, :mod:`jupyter_exec.state.durable`), and names the checkpoint could not
store, are **lost**: the :class:`~jupyter_exec.StateRecovery` on the Execution
that saw the death and on the next one lists them by name with the reason,
and so does the notebook (``jupyter_exec.recovered`` on the cell that died).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.engine.meta import is_undone, mark_recovered, note_state_change
from jupyter_exec.exceptions import CheckpointError, ForkError, KernelNotAliveError
from jupyter_exec.models import CellError, Execution, StateRecovery
from jupyter_exec.state.forking import container_of
from jupyter_exec.state.kernel_calls import user_names
from jupyter_exec.state.reload import recover_generation
from jupyter_exec.state.snapshots import drop

if TYPE_CHECKING:
    from jupyter_exec.engine.hooks import Replacement
    from jupyter_exec.state.durable import DurableState
    from jupyter_exec.state.host import StateHost

__all__ = ["MAX_NAMES_SHOWN", "RecoveryMixin", "user_names"]

log = logging.getLogger("jupyter_exec")

MAX_NAMES_SHOWN = 20
"""How many names an error message lists (the notebook and the Execution have them all)."""


class RecoveryMixin:
    """The recovery half of :class:`~jupyter_exec.state.session_state.SessionState`."""

    points: list[Any]
    checkpoints: dict[str, tuple[Any, Any]]
    undo_steps: int
    durable: DurableState
    remote_kernel: bool = False
    """The session's kernel is remote: its state is saved on its host, and a death's error
    says why when it did not come back."""
    recovered: StateRecovery | None = None
    """Set by a recovery during a cell; reported with that cell and the next, then cleared."""
    _recovered_next: StateRecovery | None = None

    async def _switch(self, session: StateHost, point: Any, reason: Replacement) -> None:
        raise NotImplementedError

    async def setup_generations(self, session: StateHost, kernel: KernelHandle) -> bool:
        raise NotImplementedError

    async def recover(self, session: StateHost) -> bool:
        """In place of a restart when a cell's kernel died or would not stop: a kernel from
        the latest snapshot (an undo point's, or a checkpoint's), so the state from before that
        cell (or the last one that had a snapshot) comes back, every object included. False
        when there is none, or a checkpoint on disk is newer (the caller restarts, then
        :meth:`recover_from_disk`)."""
        self.points = [p for p in self.points if p.snapshot.alive]
        old = session.kernel_slot.kernel
        candidates: list[tuple[Any, str | None]] = []
        if self.undo_steps > 0:
            candidates += [(p, None) for p in self.points]
        timeline = {c.path for c in self.durable.taken}  # undo and restore prune it
        for made, kept in self.checkpoints.values():
            if kept is not None and kept.snapshot.alive and made.path in timeline:
                candidates.append((kept, made.name))
        if not candidates or old is None:
            return False
        point, checkpoint = max(candidates, key=lambda c: (c[0].cell_index, c[0].serial))
        latest = self.durable.latest()
        if latest is not None and latest.cell_index > point.cell_index:
            return False
        newest = self.durable.generations.newest()
        if newest is not None and newest.cells > point.cell_index:
            return False  # the per-cell state on disk is newer
        first: object = old.km.provisioner  # the container's own, not a fork's in it
        if container_of(old) is first and await old.is_alive():
            return False  # a container's first kernel, running away: only a restart stops it
        lost = self._changed_after(session, point.cell_index)
        if checkpoint is None:
            self.points.remove(point)
        try:
            await self._switch(session, point, "recover")
        except ForkError as exc:
            log.warning("session %s: no recovery from the snapshot: %s", session.name, exc)
            return False
        finally:
            if checkpoint is None:  # an undo point is used up; a checkpoint is kept
                await drop(point.snapshot)
        later = [p for p in self.points if p.cell_index > point.cell_index]
        self.points = [p for p in self.points if p not in later]
        for each in later:
            await drop(each.snapshot)
        self.durable.rewound(point.cell_index)
        now = session.kernel_slot.kernel
        assert now is not None
        source = "snapshot" if checkpoint is None else f"checkpoint {checkpoint!r}"
        names = await user_names(now)
        self._recovered(source, point.cell_index, names, lost, session)
        return True

    async def recover_from_disk(self, session: StateHost) -> None:
        """After a restart for a death: load the newest signed generation (and run the
        recorded cells after it again), or the latest checkpoint this session wrote."""
        latest = self.durable.latest()
        kernel = session.kernel_slot.kernel
        if kernel is None:
            return
        generations = self.durable.generations
        newest = generations.newest()
        newer = latest is None or (newest is not None and newest.cells >= latest.cell_index)
        if (
            generations.enabled
            and newer
            and await recover_generation(self, session, kernel, newest)
        ):
            return
        if latest is None:
            return
        lost = self._changed_after(session, latest.cell_index)
        for name, reason in latest.skipped.items():
            lost.setdefault(name, f"not stored in the checkpoint: {reason}")
        try:
            loaded = await self.durable.load(session, kernel, latest)
        except (CheckpointError, KernelNotAliveError) as exc:
            log.warning("session %s: no recovery from %s: %s", session.name, latest.path, exc)
            return
        self.durable.rewound(latest.cell_index, latest)
        source = f"checkpoint {latest.name!r}"
        self._recovered(source, latest.cell_index, loaded.names, lost, session)

    def _changed_after(self, session: StateHost, cell_index: int) -> dict[str, str]:
        recording = session._recording
        recorder = recording.recorder if recording is not None else None
        undone = {i for i, c in enumerate(recorder.cells if recorder else ()) if is_undone(c)}
        changed = self.durable.changed_since(cell_index, undone)
        return {name: "changed after it was taken" for name in sorted(changed)}

    def _recovered(
        self,
        source: str,
        cell_index: int,
        names: tuple[str, ...],
        lost: dict[str, str],
        session: StateHost,
    ) -> None:
        back = tuple(n for n in names if n not in lost)
        self.recovered = StateRecovery(source, cell_index, back, dict(sorted(lost.items())))
        note_state_change(
            session._recording,
            {
                "action": "recover",
                "source": source,
                "to_cell_index": cell_index,
                "names": list(back),
                "lost": dict(lost),
            },
            None,
        )

    def explain_recovery(self, error: CellError | None) -> CellError | None:
        """The run's error, saying what came back instead of "state is lost"."""
        recovery = self.recovered
        lost = error is not None and "its state is lost" in error.evalue
        if recovery is None and error is not None and lost and self.remote_kernel:
            note = f"its state is lost ({self._remote_loss()})"
            text = error.evalue.replace("its state is lost", note)
            return CellError(error.ename, text, error.traceback)
        if recovery is None or error is None:
            return error
        where = "its snapshot" if recovery.source == "snapshot" else recovery.source
        back = (
            f"the state from before cell {recovery.from_cell_index + 1} came back from "
            f"{where} ({len(recovery.names)} name(s): {_shown(recovery.names)})"
        )
        if recovery.lost:
            back += f"; lost: {_shown(tuple(f'{n} ({why})' for n, why in recovery.lost.items()))}"
        text = error.evalue.replace("its state is lost", back)
        if text == error.evalue:
            text = f"{text}; {back}"
        return CellError(error.ename, text, error.traceback)

    def _remote_loss(self) -> str:
        """Why a remote kernel's state did not come back after its death."""
        generations = self.durable.generations
        if generations.unavailable:
            return f"its per-cell state was not saved: {generations.unavailable}"
        if not generations.enabled:
            return "save_state is off"
        if generations.newest() is None:
            return "no cell's state was saved yet"
        return (
            "the state saved on its host did not load into the restarted kernel, which may "
            "run on another host; the log says why"
        )

    def annotate(self, execution: Execution) -> Execution:
        """The Execution with the recovery it saw, or the one just before it."""
        recovery = self.recovered or self._recovered_next
        if self.recovered is None:
            self._recovered_next = None
        if recovery is None or execution.recovered is not None:
            return execution
        return replace(execution, recovered=recovery)

    def after_record(self, session: StateHost, cell_index: int | None) -> None:
        """Mark the cell whose kernel died undone, with the names that came back and were lost."""
        recovery, self.recovered = self.recovered, None
        if recovery is None:
            return
        self._recovered_next = recovery
        recording = session._recording
        if recording is None or recording.recorder is None:
            return
        if cell_index is not None:
            mark_recovered(recording.recorder, cell_index, recovery)
        where = "snapshot" if recovery.source == "snapshot" else recovery.source
        note = f"recovered from the {where} taken before cell {recovery.from_cell_index + 1}"
        if recovery.lost:
            note += f"; lost: {', '.join(recovery.lost)}"
        recording.restart_note = note


def _shown(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:MAX_NAMES_SHOWN]) or "none"
    if len(names) > MAX_NAMES_SHOWN:
        shown += f" and {len(names) - MAX_NAMES_SHOWN} more"
    return shown
