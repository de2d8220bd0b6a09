"""Sleep and wake: a session that holds no kernel while idle and gets one back on its next call.

A sleeping session keeps everything but its kernel process: its work dir, its notebook
(still open for the next cell), its options and its per-cell state on disk
(:mod:`jupyter_exec.state.generations`). What it costs is what the kernel held: a
local kernel's process is gone, a Docker session's container too::

    session.sleep()   the execution lock (a running cell ends first) ─► the last
                      cell's generation flushed and signed ─► snapshots and forks
                      ended ─► the kernel stopped ─► ``sleeping``; returns the names
                      the saved state does not hold (name ─► why)
    next call         execute, run_script, restart, fork, undo, checkpoint, restore
                      ─► a new kernel on the same options (kernelspec, backend,
                      work dir; meanwhile the OS reads its chunk files ahead)
                      ─► the newest generation this session signed loaded
                      (never one read back from the folder: a file the kernel
                      planted there is not a signature) ─► the recorded cells after
                      it run again ─► the call goes on
    the woken cell    its Execution's ``recovered`` says where the state came from
                      and lists what did not come back; the notebook notes the wake
                      on that cell (``jupyter_exec.kernel``) and in its metadata
                      (``jupyter_exec.state``), as a restart or a recovery is noted

Only what the per-cell state can save sleeps: a Python (IPython) kernel the session
started itself, on this machine or in Docker, with ``save_state`` on. Others are
refused with :class:`~jupyter_exec.CheckpointError` saying why, and keep running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from jupyter_exec.engine.hooks import CellCall, CellHooks
from jupyter_exec.engine.meta import note_state_change
from jupyter_exec.exceptions import CheckpointError, KernelNotAliveError, SessionClosedError
from jupyter_exec.models import StateRecovery
from jupyter_exec.session.launch import launch_kernel
from jupyter_exec.state.generations import read_manifest, state_folder
from jupyter_exec.state.kernel_calls import user_names
from jupyter_exec.state.reload import later_cells, read_ahead, rerun, rerun_words

if TYPE_CHECKING:
    from pathlib import Path

    from jupyter_exec.engine.kernel import KernelHandle
    from jupyter_exec.models import Execution
    from jupyter_exec.session.session import AsyncSession
    from jupyter_exec.state.generations import Generation

__all__ = [
    "SleepRecord",
    "WakeNote",
    "put_to_sleep",
    "refuse_sleep",
    "state_refusal",
    "unsaved_names",
    "wake_up",
]

log = logging.getLogger("jupyter_exec")


@dataclass(frozen=True)
class SleepRecord:
    """What a session's sleep saved: its newest signed generation and what it left out."""

    generation: int | None
    """The generation a wake loads (None: none was signed; the recorded cells run again)."""
    cells: int
    """How many recorded cells that generation holds."""
    unsaved: dict[str, str]
    """Names the saved state does not hold, each with why (unpicklable, past the budget...)."""


def refuse_sleep(session: AsyncSession, kernel: KernelHandle) -> None:
    """Raise :class:`~jupyter_exec.CheckpointError` saying why this session cannot sleep
    (its kernel is not its to stop, or its state could not come back); nothing if it can."""
    why = None
    if not session.options.shuts_down_kernel:
        why = "its kernel was given to it (a kernel_manager it does not own): not its to stop"
    why = why or state_refusal(session, kernel)
    if why is not None:
        raise CheckpointError(f"session {session.name!r} cannot sleep: {why}")


def state_refusal(session: AsyncSession, kernel: KernelHandle) -> str | None:
    """Why ``session``'s state could not come back after its kernel stops (None: it can);
    whether the kernel is the session's to stop is the caller's to say (a front end that
    holds the kernel, as the REST extension does, knows)."""
    options = session.options
    why = None
    if options.backend == "remote":
        why = (
            "its kernel is remote: its saved state is kept in the kernel's folder on its host, "
            "which goes when the kernel stops"
        )
    elif not kernel.runs_ipython:
        why = (
            f"its kernel runs {kernel.language or 'another language'!r}; only a Python "
            "(IPython) kernel's namespace is saved"
        )
    elif not options.save_state:
        why = "save_state is off: nothing would bring its state back"
    elif (generations := session._state.durable.generations).refused is kernel:
        why = f"its state cannot be saved: {generations.unavailable}"
    return why


def unsaved_names(work_dir: Path, made: Generation, budget: int, who: str) -> dict[str, str] | None:
    """The names generation ``made`` left out, each with why; None when its manifest cannot
    be read back (said in the log: a wake refuses it too, and runs the cells again)."""
    try:
        manifest = read_manifest(work_dir, made, budget)
    except CheckpointError as exc:
        log.warning("session %s: its saved state cannot be read back: %s", who, exc)
        return None
    return {str(k): str(v) for k, v in (manifest.get("skipped") or {}).items()}


async def put_to_sleep(session: AsyncSession, kernel: KernelHandle) -> SleepRecord:
    """Save ``kernel``'s state and stop it (the caller holds the session's lock and has
    checked :func:`refuse_sleep`); the slot is left empty."""
    state = session._state
    await state.before_close(session, kernel)  # the last cell's generation, signed
    generations = state.durable.generations
    made = generations.newest()
    unsaved: dict[str, str] = {}
    if made is not None:
        found = unsaved_names(session.work_dir, made, generations.budget, session.name)
        if found is None:
            made = None
        unsaved = found or {}
    await state.restartable(session, kernel)  # a Docker fork's container kernel back
    await state.close(True)  # snapshots and forks: their processes end too
    last = session.kernel_slot.place(None)
    if last is not None:
        await last.shutdown()
    record = SleepRecord(made.number if made else None, made.cells if made else 0, unsaved)
    note_state_change(
        session._recording,
        {
            "action": "sleep",
            "generation": record.generation,
            "cells": record.cells,
            "unsaved": dict(unsaved),
        },
        None,
    )
    log.info("session %s: asleep (generation %s)", session.name, record.generation)
    return record


async def wake_up(session: AsyncSession) -> StateRecovery:
    """A new kernel for the sleeping ``session``, its saved state loaded (the caller holds
    the session's lock); what came back, for the next Execution."""
    generations = session._state.durable.generations
    made = generations.newest()
    ahead = None  # the chunks read into the page cache while the kernel starts
    if made is not None:
        ahead = asyncio.create_task(
            asyncio.to_thread(read_ahead, session.work_dir, made, generations.budget)
        )
    try:
        return await _woken(session)
    finally:
        if ahead is not None:
            with contextlib.suppress(Exception):
                await ahead


async def _woken(session: AsyncSession) -> StateRecovery:
    kernel = await launch_kernel(session.options, session.work_dir)
    if session.closed:  # closed while the kernel started: that close won
        await kernel.shutdown(now=True)
        raise SessionClosedError("the session was closed while it woke")
    if kernel.network is not None:
        kernel.network.session = session.name
    session.kernel_slot.swap(kernel)
    try:
        recovery = await _load(session, kernel)
    except BaseException:
        if session.kernel_slot.place(None) is kernel:
            with contextlib.suppress(Exception):
                await kernel.shutdown(now=True)
        if session.closed:
            raise SessionClosedError("the session was closed while it woke") from None
        raise
    if session.closed:
        raise SessionClosedError("the session was closed while it woke")
    note = f"woken from sleep: {recovery.source}"
    if recovery.lost:
        note += f"; not back: {', '.join(recovery.lost)}"
    note_state_change(
        session._recording,
        {
            "action": "wake",
            "source": recovery.source,
            "to_cell_index": recovery.from_cell_index,
            "names": list(recovery.names),
            "lost": dict(recovery.lost),
        },
        note,
    )
    log.info("session %s: awake (%s)", session.name, recovery.source)
    return recovery


async def _load(session: AsyncSession, kernel: KernelHandle) -> StateRecovery:
    """The newest generation this session signed (kept in memory: never a signature file
    read back from the folder) into ``kernel``, then the recorded cells after it."""
    state = session._state
    generations = state.durable.generations
    made = generations.newest()
    skipped: dict[str, str] = {}
    refused = ""
    if made is not None:
        try:
            if not await state.setup_generations(session, kernel):
                raise CheckpointError(generations.unavailable or "the per-cell state is off")
            loaded = await generations.load(session, kernel, made, own_folder=True)
            skipped = loaded.skipped
        except (CheckpointError, KernelNotAliveError) as exc:
            log.warning("session %s: saved state not loaded on wake: %s", session.name, exc)
            refused = f" (generation {made.number} refused: {exc})"
            made = None
    else:
        await state.setup_generations(session, kernel)
    done, todo, unfinished = later_cells(session, made.cells if made is not None else 0)
    failed = await rerun(session, kernel, todo)
    names = await user_names(kernel)
    await _count_on(session, kernel)
    generations.committed_in = None  # the next commit stores every name
    if made is None:
        source = f"the recorded cells run again{refused}" + rerun_words((), failed, unfinished)
    else:
        source = f"generation {made.number} of {state_folder(session.name)}"
        source += rerun_words(todo, failed, unfinished)
    lost = {n: f"not saved: {why}" for n, why in skipped.items() if n not in names}
    back = tuple(n for n in names if n not in lost)
    return StateRecovery(source, done, back, dict(sorted(lost.items())))


async def _count_on(session: AsyncSession, kernel: KernelHandle) -> None:
    """Number the next cell after the last recorded one (a wake is not a restart to a person
    reading the notebook)."""
    recorder = session._recorder
    counts = [c.get("execution_count") for c in (recorder.cells if recorder else ())]
    last = max((c for c in counts if isinstance(c, int)), default=0)
    if last:
        code = f"get_ipython().execution_count = {int(last) + 1}"
        await kernel.run_silent(code, time.monotonic() + 30.0, died="")


class WakeNote(CellHooks):
    """Puts what the wake brought back on the Execution of the cell that woke the session
    (``Execution.recovered``), unless that cell saw a recovery of its own."""

    def __init__(self) -> None:
        self.pending: StateRecovery | None = None

    async def after_record(self, cell: CellCall, execution: Execution | None) -> Execution | None:
        pending = self.pending
        if pending is None or not cell.recorded:
            return execution
        self.pending = None
        if execution is None or execution.recovered is not None:
            return execution
        return replace(execution, recovered=pending)
