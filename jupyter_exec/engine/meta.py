"""What a session's notebook says about the session, in its ``jupyter_exec`` metadata.

A new notebook's metadata (the kernel's spec and language, our session name,
backend and creation time), a fork's (its parent's, renamed), the cells that
were undone or recovered when the state went back, and the history of state
changes. Replay and resume read these marks back (:func:`is_undone`), so a
notebook on disk always matches the state its session is in. Kept apart from
the recording, which appends cells: these edit what is already there.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.engine.recorder import NotebookRecorder
from jupyter_exec.models import StateRecovery
from jupyter_exec.options import SessionOptions

if TYPE_CHECKING:
    from jupyter_exec.session.recording import Recording

__all__ = [
    "fork_metadata",
    "is_undone",
    "mark_recovered",
    "mark_undone",
    "note_state_change",
    "notebook_metadata",
]


def notebook_metadata(kernel: KernelHandle, options: SessionOptions, name: str) -> dict[str, Any]:
    """A session notebook's metadata: the kernel's spec and language, and ours."""
    spec = kernel.spec
    language_info = dict(kernel.kernel_info.get("language_info", {})) or {"name": "python"}
    return {
        "kernelspec": {
            "name": options.kernel_name if options.python is None else "python3",
            "display_name": spec.display_name if spec else options.kernel_name,
            "language": (spec.language if spec else None) or language_info.get("name", ""),
        },
        "language_info": language_info,
        "jupyter_exec": {
            "session": name,
            "backend": options.backend,
            "created": datetime.now(timezone.utc).isoformat(),
            "environment": {
                "backend": options.backend,
                "kernelspec": options.kernel_name if options.python is None else "python3",
                "language": language_info.get("name", ""),
                "language_version": language_info.get("version", ""),
            },
            **(
                {"state_session": name, "state_folder": f".{name}_state"}
                if options.save_state
                and options.backend != "remote"
                and kernel.runs_ipython  # the per-cell state is Python's
                else {}
            ),
        },
    }


def fork_metadata(parent: Mapping[str, Any], name: str, where: dict[str, Any]) -> dict[str, Any]:
    """A fork's notebook metadata: the parent's, renamed, with ``jupyter_exec.fork`` = ``where``.

    The parent's own history of forks, undos and checkpoints stays behind.
    """
    metadata = copy.deepcopy(dict(parent))
    ours = dict(metadata.get("jupyter_exec") or {})
    ours.pop("state", None)
    ours.update(session=name, created=datetime.now(timezone.utc).isoformat(), fork=where)
    metadata["jupyter_exec"] = ours
    return metadata


def is_undone(cell: Mapping[str, Any]) -> bool:
    """Whether a notebook cell was undone (its effect is not in the session's state)."""
    ours = (cell.get("metadata") or {}).get("jupyter_exec") or {}
    return isinstance(ours, Mapping) and ours.get("undone") is True


def mark_undone(recorder: NotebookRecorder, from_index: int, undone: frozenset[int]) -> None:
    """Mark code cells undone (``jupyter_exec.undone``) so the notebook matches the state.

    After the state went back to a snapshot taken when the notebook had
    ``from_index`` cells: those from there on are undone, and earlier ones
    carry the marks they had then (``undone``). Replay and resume skip them.
    """
    for index, cell in enumerate(recorder.cells):
        if cell.get("cell_type") != "code":
            continue
        want = index >= from_index or index in undone
        ours = cell.setdefault("metadata", {}).setdefault("jupyter_exec", {})
        if bool(ours.get("undone")) == want:
            continue
        if want:
            ours["undone"] = True
        else:
            ours.pop("undone", None)
        recorder.refresh(index, save=False)
    recorder.save()


def mark_recovered(recorder: NotebookRecorder, index: int, recovery: StateRecovery) -> None:
    """Cell ``index``, whose kernel died, is undone: the state from before another cell came
    back from a snapshot or a checkpoint, with these names; others were lost (and why)."""
    cells = recorder.cells
    if not 0 <= index < len(cells):
        return
    ours = cells[index].setdefault("metadata", {}).setdefault("jupyter_exec", {})
    ours["undone"] = True
    ours["recovered"] = {
        "from_cell_index": recovery.from_cell_index,
        "names": list(recovery.names),
        "source": recovery.source,
        "lost": dict(recovery.lost),
    }
    recorder.refresh(index)


def note_state_change(
    recording: Recording | None, entry: dict[str, Any], next_cell_note: str | None
) -> None:
    """Add ``entry`` to the notebook's ``jupyter_exec.state`` history, and note the next cell."""
    if recording is None:
        return
    if next_cell_note is not None:
        recording.restart_note = next_cell_note
    recorder = recording.recorder
    if recorder is None:
        return
    ours = dict(recorder.metadata.get("jupyter_exec") or {})
    entry = {**entry, "at": datetime.now(timezone.utc).isoformat()}
    ours["state"] = [*ours.get("state", []), entry]
    recorder.set_metadata("jupyter_exec", ours)
    recorder.save()
