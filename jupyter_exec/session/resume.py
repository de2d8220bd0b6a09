"""Resuming a recorded session: re-run its notebook's code to rebuild the kernel's state.

Called by :meth:`~jupyter_exec.AsyncSession.start` for a session made with
:meth:`~jupyter_exec.AsyncSession.resume`. The re-run cells are executed
without writing anything (no files, no new cells); then the notebook becomes
the session's live record, so new cells are appended to it, numbering on.
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from jupyter_exec.boundary.naming import backup_notebook_name, safe_name
from jupyter_exec.boundary.paths import Folder
from jupyter_exec.engine.languages import is_default_language, language_of_kernel
from jupyter_exec.engine.meta import is_undone, notebook_metadata
from jupyter_exec.engine.recorder import new_cell_id
from jupyter_exec.engine.runner import is_interrupt
from jupyter_exec.engine.runorder import run_order
from jupyter_exec.exceptions import InvalidArgument
from jupyter_exec.state.generations import state_folder

if TYPE_CHECKING:
    from jupyter_exec.engine.kernel import KernelHandle
    from jupyter_exec.session.session import AsyncSession

__all__ = ["did_not_finish", "for_notebook", "rebuild"]

log = logging.getLogger("jupyter_exec")


S = TypeVar("S", bound="AsyncSession")


def for_notebook(
    cls: type[S],
    notebook: str | os.PathLike[str],
    until: int | None,
    work_dir: str | os.PathLike[str] | None,
    name: str | None,
    options: dict[str, Any],
) -> S:
    """An unstarted session of class ``cls`` for ``notebook`` (the engine sets it to resume)."""
    if until is not None and until < 0:
        raise InvalidArgument(f"until must be >= 0, not {until}")
    path = Path(notebook).expanduser().absolute()
    if not {"language", "kernel_name", "python", "kernel_manager"} & set(options):
        options = {**options, **_language_of(path)}
    return cls(
        path.parent if work_dir is None else work_dir,
        notebook=path,
        name=name or safe_name(path.stem),
        overwrite=True,
        **options,
    )


def _language_of(path: Path) -> dict[str, str]:
    """``{"language": ...}`` for a notebook recorded by a kernel of another language than
    Python (R, Bash, Deno), so it resumes on that kernel; ``{}`` otherwise (a notebook
    that cannot be read is reported when the session starts)."""
    try:
        with path.open(encoding="utf-8") as f:
            spec = json.load(f).get("metadata", {}).get("kernelspec", {})
    except (OSError, ValueError, AttributeError):
        return {}
    language = language_of_kernel(str(spec.get("name") or "")) if isinstance(spec, dict) else None
    return {} if is_default_language(language) else {"language": str(language)}


async def rebuild(session: AsyncSession, nb: Any, until: int | None) -> None:
    """Re-run the recorded code cells, then adopt the notebook as the session's record.

    With ``until``, cells after the ``until``-th code cell no longer match
    the kernel's state: the full notebook is first copied to
    ``<stem>.before-resume-<time>.ipynb`` beside it, then the live record is
    cut after that cell, so it stays a faithful, replayable account.
    """
    path = session.notebook_path
    kernel = session.kernel_slot.kernel
    recording = session._recording
    assert path is not None
    assert kernel is not None
    assert recording is not None
    cells = [dict(c) for c in nb.cells]
    for cell in cells:
        cell.setdefault("id", new_cell_id())  # nbformat < 4.5 had no cell ids
    positions = [  # in the order the cells ran (a shared notebook says), else as placed
        i
        for i in run_order(cells)
        if (c := cells[i])["cell_type"] == "code" and c["source"].strip() and not is_undone(c)
    ]
    entry: dict[str, Any] = {"at": datetime.now(timezone.utc).isoformat()}
    if until is not None:
        if until < len(positions):
            backup = path.with_name(backup_notebook_name(path.stem))
            with Folder.open(path.parent) as folder:  # never through a link the kernel made
                folder.write_atomic(backup.name, [folder.read_bytes(path.name)])
            kept = _kept(cells, positions, until)
            entry.update(dropped_cells=len(cells) - len(kept), backup=backup.name)
            cells = [cells[i] for i in kept]
        positions = positions[:until]
    # The saved state first, then only the cells after it.
    if until is None and session.options.save_state and kernel.runs_ipython:
        from jupyter_exec.state.reload import load_for_resume

        made = await load_for_resume(session._state, session, kernel, dict(nb.metadata), len(cells))
        if made is not None:
            restored = sum(1 for i in positions if i < made.cells)
            positions = [i for i in positions if i >= made.cells]
            entry.update(state_generation=made.number, state_cells=made.cells)
            await _count_on(kernel, restored)
    number = {p: n for n, p in enumerate(_code_positions(nb.cells), start=1)}
    stopped = [i for i in positions if did_not_finish(nb.cells[i])]
    if stopped:
        positions = [i for i in positions if i not in stopped]
        entry.update(not_rerun=[number.get(i, 0) for i in stopped])
    code_cells = [nb.cells[i] for i in positions]
    for position, cell in zip(positions, code_cells, strict=True):
        session.resumed.append(await session.replay_cell(cell.source))
        session.resumed_cells.append(number.get(position, 0))
    failed = [n for n, e in zip(session.resumed_cells, session.resumed, strict=True) if not e.ok]
    metadata = dict(nb.metadata)
    ours = notebook_metadata(kernel, session.options, session.name)
    metadata.update({k: v for k, v in ours.items() if k != "jupyter_exec"})
    history = dict(metadata.get("jupyter_exec", {}))
    history.setdefault("session", session.name)
    if session.options.save_state and kernel.runs_ipython:
        history.update(state_session=session.name, state_folder=state_folder(session.name))
    entry.update(cells_rerun=len(code_cells), failed=failed)
    history["resumed"] = [*history.get("resumed", []), entry]
    metadata["jupyter_exec"] = history
    recording.adopt(session.recorder_class(path, metadata, cells))
    note = (
        f"resumed: state rebuilt by re-running {len(code_cells)} cell(s)"
        if "state_generation" not in entry
        else f"resumed: saved state of {entry['state_cells']} cell(s), "
        f"then {len(code_cells)} cell(s) re-run"
    )
    if stopped:
        note += f"; cell(s) {entry['not_rerun']} not re-run: they were stopped before they ended"
    recording.restart_note = note
    if failed:
        log.warning("resume of %s: re-run cells %s failed", path, failed)


STOPPED = frozenset({"timeout", "died", "cancelled"})
"""The recorded statuses of a cell that did not run to its end."""


def did_not_finish(cell: Any) -> bool:
    """A recorded cell that was stopped before its end: interrupted, timed out, its kernel
    died under it, or cancelled. Resuming does not run it again: what stopped it (a cell
    waiting five minutes, an ``os._exit``) would stop the resume the same way, and a whole
    run of it would give a state the session never had. Its own record says so
    (our ``status``), or, for a notebook from elsewhere, a ``KeyboardInterrupt`` output."""
    ours = cell.get("metadata", {}).get("jupyter_exec", {})
    if isinstance(ours, dict) and ours.get("status") in STOPPED:
        return True
    return any(isinstance(o, dict) and is_interrupt(o) for o in cell.get("outputs", ()))


def _kept(cells: list[dict[str, Any]], positions: list[int], until: int) -> list[int]:
    """The cells that still match the state after re-running the first ``until`` of
    ``positions``: those, and every cell that does not run placed before the last of them."""
    rerun = set(positions[:until])
    last = max(rerun, default=-1)
    runnable = set(positions)
    return [i for i in range(len(cells)) if i in rerun or (i not in runnable and i <= last)]


def _code_positions(cells: list[Any]) -> list[int]:
    """The positions of the code cells, in notebook order (how a person numbers them)."""
    return [i for i, c in enumerate(cells) if c["cell_type"] == "code"]


async def _count_on(kernel: KernelHandle, cells: int) -> None:
    """Number the next cell as if the ``cells`` brought back from the saved state had run
    again (as a re-run would), so the record's execution counts keep going up."""
    if cells:
        code = f"get_ipython().execution_count += {int(cells)}"
        await kernel.run_silent(code, time.monotonic() + 30.0, died="")
