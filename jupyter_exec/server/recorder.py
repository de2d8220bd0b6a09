"""A session notebook that a person may edit in JupyterLab while the agent appends to it.

Two writers share one file: JupyterLab saves the person's version (their
cells, their edits, sometimes without the agent's latest cells), and the
session saves after every cell the agent runs. Neither may erase the other.
The rule, applied on every save by the agent:

* If the file is unchanged since our last save, write as before.
* If someone else wrote it, their file becomes the base: every cell in it is
  kept as they left it: their own cells, their edits to the agent's cells,
  their metadata (only the ``jupyter_exec`` key is ours).
* The agent's cells are matched by cell id. A cell the agent has changed
  since (a display update) replaces the file's copy. An agent cell missing
  from the file is put back after the agent cell that preceded it; a cell
  never written before is appended at the end, in execution order.

So the agent's record is never lost (a person can't delete an agent cell for
good, but can edit it), and a person's work is never overwritten.

When the notebook is open in JupyterLab with real-time collaboration, the
same rule is applied to the shared document instead of the file (see
:mod:`jupyter_exec.server.live`): :attr:`MergingRecorder.live` writes there,
and the collaboration room saves the file.

Cells a person runs on the session's kernel take their place in the run
order (:mod:`jupyter_exec.engine.runorder`): :meth:`MergingRecorder.person_ran`
numbers them, and each save stamps the person's cells it can match. The file
is still written atomically (temp + rename), and read and written without
following links (see :mod:`jupyter_exec.engine.recorder`). JupyterLab notices the newer file
when the person next saves and asks whether to overwrite it or revert to the
version on disk; either answer loses nothing on our side, since the agent's
next save (or :meth:`MergingRecorder.resync`, called when the server saves
the notebook) puts back any agent cell the person's save left out.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from jupyter_exec.engine.outputs import MAX_OUTPUT_DEPTH, too_deep
from jupyter_exec.engine.recorder import (
    NBFORMAT_MINOR,
    NotebookRecorder,
    _dumps,
    file_stamp,
    split_lines,
)
from jupyter_exec.engine.runorder import PersonRun, match_runs
from jupyter_exec.exceptions import NotebookError, WorkDirError

__all__ = ["LiveDocument", "MergingRecorder"]

log = logging.getLogger("jupyter_exec.server")

MAX_FILE_DEPTH = MAX_OUTPUT_DEPTH + 4
"""How deep a cell read back from the file may nest: an output's bundle, in its list, in its
cell (deeper cells are dropped, so saving never meets Python's recursion limit)."""


@dataclass
class _Slot:
    """One cell of the file: an agent cell rendered from memory, or a cell kept verbatim."""

    cell_id: str | None
    verbatim: str | None = None
    """The cell's JSON as found on disk; ``None`` for an agent cell rendered from memory."""
    cell: dict[str, Any] | None = None
    """The verbatim cell as read (so a person's run can be stamped on it)."""


class LiveDocument(Protocol):
    """Where the cells go while the notebook is open in a collaborative room."""

    def write(self, recorder: MergingRecorder) -> bool:
        """Apply the two-writers rule to the shared document; False if it is not open."""

    def stamp(self, runs: list[tuple[int, PersonRun]], agent: set[str]) -> None:
        """Stamp the person's cells in the shared document with their runs."""

    def close(self) -> None:
        """The session ends: leave the document (the agent's presence goes)."""


class MergingRecorder(NotebookRecorder):
    """A :class:`NotebookRecorder` whose saves merge with edits made to the file by others."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._layout: list[_Slot] | None = None  # None: the file holds only our cells
        self._disk_metadata: dict[str, Any] | None = None
        self._written: set[str] = set()
        self._dirty: set[str] = set()
        self.live: LiveDocument | None = None
        """The shared document, when collaboration is installed (see :mod:`.live`)."""
        self._person_runs: list[tuple[int, PersonRun]] = []  # (seq, run), in run order
        self._pending: list[PersonRun] = []  # seen while an agent cell was running
        self._agent_running = False

    # -- what the shared document needs to know ----------------------------------------

    @property
    def written(self) -> set[str]:
        """Ids of the agent cells written out before (a missing one was deleted by someone)."""
        return self._written

    @property
    def person_runs(self) -> list[tuple[int, PersonRun]]:
        """The runs of a person's cells seen so far, as (seq, run), in run order."""
        return self._person_runs

    @property
    def changed(self) -> set[str]:
        """Ids of the agent cells changed since the last save, or never saved."""
        new = {i for c in self._cells if (i := c.get("id")) and i not in self._written}
        return self._dirty | new

    # -- the run order -----------------------------------------------------------------

    def cell_started(self) -> None:
        """An agent cell starts: a person's cell seen ending now may have run before it."""
        self._agent_running = True

    def cell_finished(self) -> None:
        """The agent cell ended (recorded or not): number what waited for it."""
        self._agent_running = False
        pending, self._pending = self._pending, []
        for run in pending:
            self._number(run)

    def next_run_seq(self, execution_count: int | None = None) -> int:
        """The agent cell's place; a person's cell the kernel ran before it comes first."""
        before = [
            r
            for r in self._pending
            if None not in (r.execution_count, execution_count)
            and r.execution_count < execution_count  # type: ignore[operator]
        ]
        for run in before:
            self._number(run)
        self._pending = [r for r in self._pending if r not in before]
        return super().next_run_seq(execution_count)

    def person_ran(self, run: PersonRun) -> None:
        """A person's cell ran on the kernel: give it its place in the run order."""
        if self._agent_running:  # it may have run before the agent's cell: wait for that one
            self._pending.append(run)
        else:
            self._number(run)

    def _number(self, run: PersonRun) -> None:
        self._person_runs.append((super().next_run_seq(run.execution_count), run))
        if self.live is not None:
            self.live.stamp(self._person_runs, {c["id"] for c in self._cells})

    def _stamp_layout(self) -> bool:
        """Stamp the person's cells in the file layout with their runs; True if any changed."""
        if not self._person_runs or self._layout is None:
            return False
        slots = [s for s in self._layout if s.cell is not None]
        stamps = match_runs(
            [s.cell for s in slots if s.cell is not None],
            self._person_runs,
            {c["id"] for c in self._cells},
        )
        changed = False
        for position, stamp in stamps.items():
            slot = slots[position]
            assert slot.cell is not None
            metadata = slot.cell.setdefault("metadata", {})
            ours = metadata.get("jupyter_exec")
            ours = dict(ours) if isinstance(ours, dict) else {}
            if ours.get("run") == stamp:
                continue
            ours["run"] = stamp
            metadata["jupyter_exec"] = ours
            slot.verbatim = _dumps(split_lines(slot.cell), "  ")
            changed = True
        return changed

    # -- bookkeeping of what changed on our side ---------------------------------------

    def replace(self, index: int, cell: dict[str, Any], *, save: bool = True) -> None:
        if "id" in cell:
            self._dirty.add(cell["id"])
        super().replace(index, cell, save=save)

    # -- merging -----------------------------------------------------------------------

    def changed_on_disk(self) -> bool:
        """Whether someone else wrote the file since our last save."""
        return file_stamp(self.path) != self._stamp

    def _read_disk(self) -> dict[str, Any] | None:
        """The file as JSON, read without following a link (None: nothing usable there)."""
        try:
            with self._folder() as folder:
                raw = json.loads(folder.read_bytes(self.path.name).decode("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, WorkDirError, RecursionError) as exc:
            # A half-written file (JupyterLab writes in place), a broken one, or one a
            # kernel filled with JSON nested past what can be parsed: keep the last layout
            # we knew, try again on the next save.
            reason = "nested too deep" if isinstance(exc, RecursionError) else exc
            log.warning("cannot merge with %s (%s); keeping the previous layout", self.path, reason)
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
            log.warning("%s is not a notebook any more; rewriting it", self.path)
            return None
        if too_deep(raw.get("metadata"), MAX_FILE_DEPTH):
            log.warning("the metadata of %s is nested too deep; keeping ours", self.path)
            raw["metadata"] = None
        deep = [c for c in raw["cells"] if too_deep(c, MAX_FILE_DEPTH)]
        if deep:  # no person writes these; kept, a save would fail on them every time
            log.warning("dropping %d cell(s) nested too deep from %s", len(deep), self.path)
            raw["cells"] = [c for c in raw["cells"] if not any(c is d for d in deep)]
        return raw

    def _merge_from_disk(self) -> None:
        disk = self._read_disk()
        if disk is None:
            return
        ours = {c["id"]: i for i, c in enumerate(self._cells) if "id" in c}
        layout: list[_Slot] = []
        present: set[str] = set()
        for cell in disk["cells"]:
            if not isinstance(cell, dict):
                continue
            cid = cell.get("id") if isinstance(cell.get("id"), str) else None
            text = _dumps(split_lines(cell), "  ")
            if cid is not None and cid in ours:
                present.add(cid)
                fresh = cid in self._dirty or cid not in self._written  # ours is newer
                if fresh or text == self._json[ours[cid]]:
                    layout.append(_Slot(cid))
                    continue
            layout.append(_Slot(cid, text, cell))
        # Agent cells the file lacks: restored after their predecessor, or appended if new.
        for index, cell in enumerate(self._cells):
            cid = cell.get("id")
            if cid is None or cid in present:
                continue
            slot = _Slot(cid)
            if cid in self._written:
                layout.insert(self._after_predecessor(layout, index), slot)
            else:
                layout.append(slot)
            present.add(cid)
        self._layout = layout
        metadata = disk.get("metadata")
        self._disk_metadata = dict(metadata) if isinstance(metadata, dict) else None

    def _after_predecessor(self, layout: list[_Slot], index: int) -> int:
        """Where to reinsert agent cell ``index``: just after the closest earlier agent cell."""
        earlier = {c.get("id") for c in self._cells[:index]}
        for position in range(len(layout) - 1, -1, -1):
            slot = layout[position]
            if slot.verbatim is None and slot.cell_id in earlier:
                return position + 1
        return 0

    def _extend_layout(self) -> None:
        """Add agent cells that are not yet in the known layout (the usual case: one new cell)."""
        if self._layout is None:
            return
        placed = {s.cell_id for s in self._layout}
        for cell in self._cells:
            cid = cell.get("id")
            if cid is not None and cid not in placed:
                self._layout.append(_Slot(cid))
        # A cell the person had edited that the agent changed since: the agent's update wins.
        for slot in self._layout:
            if slot.verbatim is not None and slot.cell_id in self._dirty:
                slot.verbatim = None

    # -- disk --------------------------------------------------------------------------

    def _incremental(self) -> bool:
        # Until someone else writes the file, it is exactly the base layout.
        return self._layout is None

    def _chunks(self) -> list[bytes]:
        if self._layout is None:
            return super()._chunks()
        index = {c.get("id"): i for i, c in enumerate(self._cells)}
        parts = [
            s.verbatim if s.verbatim is not None else self._json[index[s.cell_id]]
            for s in self._layout
            if s.verbatim is not None or s.cell_id in index
        ]
        metadata = dict(self._disk_metadata) if self._disk_metadata is not None else {}
        for key, value in self._metadata.items():
            if key == "jupyter_exec" or key not in metadata:
                metadata[key] = value
        cells = ",\n  ".join(parts)
        text = (
            '{\n "cells": ['
            + (f"\n  {cells}\n ],\n" if cells else "],\n")
            + ' "metadata": '
            + _dumps(metadata, " ")
            + f',\n "nbformat": 4,\n "nbformat_minor": {NBFORMAT_MINOR}\n}}\n'
        )
        return [text.encode("utf-8")]

    def save(self) -> None:
        """Merge with the file if someone else changed it, then write atomically.

        While the notebook is open in a collaborative room, the cells go into
        its shared document instead, and the room writes the file.
        """
        if self.live is None or not self.live.write(self):
            if self.changed_on_disk() and self._stamp is not None:
                self._merge_from_disk()
            self._extend_layout()
            self._stamp_layout()
            super().save()  # also records the file's new stamp
        self._written.update(c["id"] for c in self._cells if "id" in c)
        self._dirty.clear()

    def close(self) -> None:
        """Leave the shared document; write what the file still lacks (agent cells, runs)."""
        live, self.live = self.live, None
        if live is not None:
            live.close()
        with contextlib.suppress(NotebookError):
            if self._stale_on_disk():
                self.save()
        super().close()

    def _stale_on_disk(self) -> bool:
        """The file lacks an agent cell, or a person's run that could be stamped on it."""
        if not self.changed_on_disk():
            return bool(self.changed)
        disk = self._read_disk()
        if disk is None:
            return False
        on_disk = {c.get("id") for c in disk["cells"] if isinstance(c, dict)}
        if any(c.get("id") not in on_disk for c in self._cells):
            return True
        self._merge_from_disk()
        return self._stamp_layout()

    def resync(self) -> bool:
        """After someone else saved the file: put back agent cells it lacks. True if rewritten.

        A save that kept every agent cell is left alone (rewriting it would
        only make JupyterLab think the file changed under it).
        """
        if not self.changed_on_disk():
            return False
        disk = self._read_disk()
        if disk is None:
            return False
        on_disk = {c.get("id") for c in disk["cells"] if isinstance(c, dict)}
        if all(c.get("id") in on_disk for c in self._cells):
            self._merge_from_disk()
            self._stamp = file_stamp(self.path)
            return False
        self.save()
        return True
