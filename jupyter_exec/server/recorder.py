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
good, but can edit it), and a person's work is never overwritten. The file
is still written atomically (temp + rename), and read and written without
following links (see :mod:`jupyter_exec.recorder`). JupyterLab notices the newer file
when the person next saves and asks whether to overwrite it or revert to the
version on disk; either answer loses nothing on our side, since the agent's
next save (or :meth:`MergingRecorder.resync`, called when the server saves
the notebook) puts back any agent cell the person's save left out.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from jupyter_exec.exceptions import WorkDirError
from jupyter_exec.recorder import (
    NBFORMAT_MINOR,
    NotebookRecorder,
    _dumps,
    file_stamp,
    split_lines,
)

__all__ = ["MergingRecorder"]

log = logging.getLogger("jupyter_exec.server")


@dataclass
class _Slot:
    """One cell of the file: an agent cell rendered from memory, or a cell kept verbatim."""

    cell_id: str | None
    verbatim: str | None = None
    """The cell's JSON as found on disk; ``None`` for an agent cell rendered from memory."""


class MergingRecorder(NotebookRecorder):
    """A :class:`NotebookRecorder` whose saves merge with edits made to the file by others."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._layout: list[_Slot] | None = None  # None: the file holds only our cells
        self._disk_metadata: dict[str, Any] | None = None
        self._written: set[str] = set()
        self._dirty: set[str] = set()

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
        except (OSError, ValueError, WorkDirError) as exc:
            # A half-written file (JupyterLab writes in place) or a broken one:
            # keep the last layout we knew, try again on the next save.
            log.warning("cannot merge with %s (%s); keeping the previous layout", self.path, exc)
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
            log.warning("%s is not a notebook any more; rewriting it", self.path)
            return None
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
                if cid in self._dirty or text == self._json[ours[cid]]:
                    layout.append(_Slot(cid))
                    continue
            layout.append(_Slot(cid, text))
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
        """Merge with the file if someone else changed it, then write atomically."""
        if self.changed_on_disk() and self._stamp is not None:
            self._merge_from_disk()
        self._extend_layout()
        super().save()  # also records the file's new stamp
        self._written.update(c["id"] for c in self._cells if "id" in c)
        self._dirty.clear()

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
