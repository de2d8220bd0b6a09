"""Coming back from the per-cell state: the newest signed generation, then the recorded
cells after it run again, silently (after a kernel death, and on ``Session.resume``).

Only generations this host signed are loaded (:mod:`jupyter_exec.state.generations`); the
newest one, written by the kernel after the last cell, is signed with the next cell's
reply, so the cells between it and the death are run again instead: the next cell sees
the state of the last completed one. Names the generation could not store (open files,
sockets, threads, unpicklable objects) and that no re-run cell made again are reported
as lost, by name, with the reason.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from jupyter_exec.boundary.paths import Folder
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.engine.meta import is_undone
from jupyter_exec.exceptions import CheckpointError, KernelNotAliveError, StorageError, WorkDirError
from jupyter_exec.inkernel.generations import OBJECTS
from jupyter_exec.state.generations import Generation, read_manifest, signed_on_disk, state_folder
from jupyter_exec.state.kernel_calls import user_names

if TYPE_CHECKING:
    from jupyter_exec.state.durable import DurableState
    from jupyter_exec.state.host import StateHost

__all__ = ["Recovering", "load_for_resume", "read_ahead", "recover_generation", "rerun"]

log = logging.getLogger("jupyter_exec")


class Recovering(Protocol):
    """What a reload needs of the session's state (its recovery mixin): the generations on
    disk, a way to install them in a kernel, and where to say what came back. A protocol,
    so the recovery can call in here without the two modules importing each other."""

    durable: DurableState

    async def setup_generations(self, session: StateHost, kernel: KernelHandle) -> bool: ...

    @property
    def _recovered(self) -> Callable[[str, int, tuple[str, ...], dict[str, str], StateHost], None]:
        """Note what came back: source, cell index, names back, names lost, session."""
        ...


RERUN_TIMEOUT = 3600.0
"""Seconds one re-run cell may take when the session has no cell timeout."""


async def rerun(
    session: StateHost, kernel: KernelHandle, sources: Sequence[tuple[int, str]]
) -> list[str]:
    """Run ``(cell index, code)`` silently in order (nothing recorded, no output); what
    failed, as ``cell N: error``."""
    failed: list[str] = []
    for index, code in sources:
        deadline = time.monotonic() + (session.timeout or RERUN_TIMEOUT)
        content = await kernel.run_silent(
            code, deadline, died="the kernel died while cells were run again"
        )
        status = (content or {}).get("status")
        if status != "ok":
            what = (content or {}).get("ename") or "no answer in time"
            failed.append(f"cell {index + 1}: {what}")
    return failed


UNFINISHED = frozenset({"timeout", "died"})
"""Recorded statuses of cells that never completed: a timed-out cell was interrupted (run
again, it would take as long again, or forever) and a cell whose kernel died would kill the
restarted one. Neither runs again: the state is that of the last completed cell."""


def later_cells(session: StateHost, cells: int) -> tuple[int, list[tuple[int, str]], list[str]]:
    """How many cells the record holds; the code of those from the ``cells``-th on that
    count (not undone, completed): what runs again on top of a state after ``cells`` cells;
    and the cells left out because they never completed (``cell N: timeout``)."""
    recording = session._recording
    recorder = recording.recorder if recording is not None else None
    if recorder is None:
        return cells, [], []
    found = list(recorder.cells)
    todo: list[tuple[int, str]] = []
    unfinished: list[str] = []
    for i, c in enumerate(found):
        if i < cells or c.get("cell_type") != "code" or is_undone(c):
            continue
        status = ((c.get("metadata") or {}).get("jupyter_exec") or {}).get("status")
        if status in UNFINISHED:
            unfinished.append(f"cell {i + 1}: {status}")
        else:
            todo.append((i, "".join(c.get("source", ""))))
    return len(found), todo, unfinished


def rerun_words(todo: Sequence[Any], failed: Sequence[str], unfinished: Sequence[str]) -> str:
    """How a recovery's source names the cells it ran again (and those it did not)."""
    words = f", then {len(todo)} recorded cell(s) run again" if todo else ""
    words += f" ({'; '.join(failed)})" if failed else ""
    if unfinished:
        words += f"; not run again, never completed: {'; '.join(unfinished)}"
    return words


async def recover_generation(
    state: Recovering, session: StateHost, kernel: KernelHandle, made: Generation | None
) -> bool:
    """Load ``made`` into the restarted ``kernel`` (None: none is signed yet, start empty)
    and run the recorded cells after it; whether the state came back (False: the caller
    falls back to a checkpoint)."""
    done, todo, unfinished = later_cells(session, made.cells if made is not None else 0)
    if made is None and not todo:
        return False
    generations = state.durable.generations
    skipped: dict[str, str] = {}
    try:
        if not await state.setup_generations(session, kernel):
            return False
        if made is not None:
            skipped = (await generations.load(session, kernel, made)).skipped
        failed = await rerun(session, kernel, todo)
        names = await user_names(kernel)
    except (CheckpointError, KernelNotAliveError) as exc:
        log.warning("session %s: the per-cell state not loaded: %s", session.name, exc)
        return False
    generations.committed_in = None  # the next commit stores every name
    lost = {n: f"not saved: {why}" for n, why in skipped.items() if n not in names}
    if made is None:
        source = "the recorded cells run again (no saved state was signed yet)"
        source += rerun_words((), failed, unfinished)
    else:
        source = f"generation {made.number} of {state_folder(session.name)}"
        source += rerun_words(todo, failed, unfinished)
    state.durable.rewound(done)
    state._recovered(source, done, names, lost, session)
    return True


async def load_for_resume(
    state: Recovering,
    session: StateHost,
    kernel: KernelHandle,
    metadata: dict[str, Any],
    cells: int,
) -> Generation | None:
    """On resume: the newest signed generation of the notebook's session, loaded into
    ``kernel`` (None: there is none, or it cannot be loaded; the cells are all re-run)."""
    ours = metadata.get("jupyter_exec") or {}
    recorded = ours.get("state_session") or ours.get("session")
    if not isinstance(recorded, str) or not recorded:
        return None
    if not await state.setup_generations(session, kernel):
        return None
    generations = state.durable.generations
    for made in reversed(signed_on_disk(session.work_dir, recorded)):
        if made.cells > cells:
            continue  # a state past what the notebook holds: another timeline
        try:
            await generations.load(session, kernel, made)
        except (CheckpointError, KernelNotAliveError) as exc:
            log.warning("resume: generation %d not loaded: %s", made.number, exc)
            continue
        return made
    return None


_ADDRESS = re.compile("[0-9a-f]{32}|[0-9a-f]{64}")
"""A chunk file's name (its hex digest), as the kernel's load requires."""


def read_ahead(work_dir: Path, made: Generation, budget: int) -> int:
    """Ask the OS to bring generation ``made``'s chunk files into the page cache, while its
    new kernel starts (a forked writer leaves what it wrote out of the cache: a wake would
    read it from disk). Nothing is read here and nothing trusted: the kernel's load reads
    and checks every chunk as before. Only the manifest the host signed is followed, through
    no link, to regular files only; a remote kernel's files are on its host. How many files
    were named to the OS; 0 when there is nothing to do or the hint cannot be given."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None or made.origin.get("backend") == "remote":
        return 0
    try:
        manifest = read_manifest(work_dir, made, budget)
    except CheckpointError:
        return 0  # the load refuses it, saying why
    addresses = {
        str(chunk[0])
        for entry in (manifest.get("names") or {}).values()
        if isinstance(entry, dict)
        for chunk in entry.get("chunks") or ()
        if isinstance(chunk, list) and chunk and isinstance(chunk[0], str)
    }
    named = 0
    try:
        with Folder.open(work_dir, f"{state_folder(made.session)}/{OBJECTS}") as objects:
            for address in sorted(a for a in addresses if _ADDRESS.fullmatch(a)):
                with contextlib.suppress(OSError, StorageError, WorkDirError):
                    fd = objects.open_file(address, os.O_RDONLY)
                    try:
                        advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                        named += 1
                    finally:
                        os.close(fd)
    except (OSError, StorageError, WorkDirError) as exc:
        log.debug("read-ahead of generation %d skipped: %s", made.number, exc)
    return named
