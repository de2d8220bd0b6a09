"""Live cells: the agent's cells written into the notebook a person has open, as they run.

Without real-time collaboration, JupyterLab shows a notebook as it was when
opened, and the session's saves only reach the person on a reload (or through
the Overwrite / Revert dialog). With ``jupyter-collaboration`` installed, an
open notebook is a shared document (a pycrdt ``Doc`` in a *room* of
jupyter-server-ydoc) that every browser tab edits, and that the room saves
to disk. The session then writes there, and the file is left to the room::

    the agent's cell starts    ─► a cell at the end of the shared document,
                                  shown as running ([*]) with the agent's code
    its outputs arrive         ─► appended to that cell (stream text grows)
    its reply comes            ─► the text gathered written; streaming ends
    it is recorded             ─► the cell takes its final outputs, count and
                                  metadata; MergingRecorder.save → LiveNotebook.write
    a person deletes an agent  ─► put back after the agent cell before it
    cell                          (the two-writers rule of server/recorder.py)
    a person runs a cell on    ─► the cell gets its place in the run order
    the agent's kernel            (jupyter_exec.engine.runorder), stamped in the document

The agent is also present in the room's awareness, under the session's name,
so JupyterLab shows it as a collaborator. When no room holds the notebook (no
one has it open, or collaboration is not installed or disabled), the recorder
writes the file as before. Nothing here imports the collaboration packages
until a room is found: the extension runs the same without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from jupyter_exec.engine.hooks import CellCall, CellHooks
from jupyter_exec.engine.runorder import PersonRun, match_runs
from jupyter_exec.server.livecell import ORIGIN, LiveCell, update_cell
from jupyter_exec.server.recorder import MergingRecorder

if TYPE_CHECKING:
    from jupyter_exec.engine.runner import CellRun
    from jupyter_exec.models import Execution


log = logging.getLogger("jupyter_exec.server")

COLORS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
"""Colours of the agent's presence, one per session name."""


def collaboration(serverapp: Any) -> Any | None:
    """jupyter-server-ydoc's extension app, if it is installed and enabled on this server."""
    manager = getattr(serverapp, "extension_manager", None)
    package = getattr(manager, "extensions", {}).get("jupyter_server_ydoc")
    if package is None or not getattr(package, "enabled", False):
        return None
    for point in package.extension_points.values():
        app = getattr(point, "app", None)
        if app is not None and hasattr(app, "get_document"):
            return app
    return None


def _room_id(serverapp: Any, api_path: str) -> str | None:
    """The room jupyter-server-ydoc keeps for a notebook (it names rooms by file id)."""
    try:
        from jupyter_server_ydoc.utils import (  # type: ignore[import-untyped]
            encode_file_path,
            room_id_from_encoded_path,
        )
    except ImportError:
        return None
    file_ids = serverapp.web_app.settings.get("file_id_manager")
    if file_ids is None:
        return None
    file_id = file_ids.index(api_path)
    if file_id is None:
        return None
    return str(room_id_from_encoded_path(encode_file_path("json", "notebook", file_id)))


class LiveNotebook:
    """The shared document of one session's notebook, while a room holds it.

    :meth:`refresh` (async, before each cell) finds the room through
    jupyter-server-ydoc's ``get_document``; the synchronous writes after it
    check that the same room still serves the document, so a room closed
    meanwhile (everyone left) sends the cells back to the file.
    """

    def __init__(self, serverapp: Any, ydoc_app: Any, api_path: str, name: str) -> None:
        self._serverapp = serverapp
        self._app = ydoc_app
        self._api_path = api_path
        self.name = name
        self._room_id: str | None = None
        self._room: Any = None
        self._doc: Any = None
        self._pending: asyncio.Future[None] | None = None  # a room lookup to stamp runs in

    def _current_room(self) -> Any:
        if self._room_id is None:
            self._room_id = _room_id(self._serverapp, self._api_path)
        server = getattr(self._app, "ywebsocket_server", None)
        if self._room_id is None or server is None:
            return None
        return server.rooms.get(self._room_id)

    @property
    def doc(self) -> Any:
        """The shared notebook (a ``jupyter_ydoc.YNotebook``), or None if no room holds it."""
        room = self._current_room()
        if room is None or room is not self._room or not getattr(room, "ready", True):
            return None
        return self._doc

    async def refresh(self) -> Any:
        """Look for the notebook's room; the shared notebook, or None.

        A room that cannot be reached (collaboration failing) is no reason to
        fail the agent's cell: it then goes to the file, as without one.
        """
        try:
            room = self._current_room()
            if room is not None and room is not self._room:
                doc = await self._app.get_document(room_id=self._room_id, copy=False)
                if doc is None:
                    return None
                self._room, self._doc = room, doc
                self._announce(room)
        except Exception:
            log.warning(
                "jupyter-exec: cannot reach the collaboration room of %s; writing the file instead",
                self._api_path,
                exc_info=True,
            )
            room = None
        if room is None:
            self._room = self._doc = None
            return None
        return self.doc

    def _announce(self, room: Any) -> None:
        """Be present in the room as a collaborator named after the session."""
        initials = "".join(w[0] for w in self.name.replace("_", "-").split("-") if w)[:2]
        user = {
            "username": f"jupyter-exec-{self.name}",
            "name": self.name,
            "display_name": f"{self.name} (jupyter-exec)",
            "initials": (initials or "JX").upper(),
            "color": COLORS[sum(map(ord, self.name)) % len(COLORS)],
            "avatar_url": None,
        }
        try:
            room.awareness.set_local_state({"user": user})
        except Exception:  # presence is a courtesy: never stop a cell for it
            log.debug("could not set the agent's presence in %s", self._api_path, exc_info=True)

    # -- the two-writers rule, on the shared document ---------------------------------

    def write(self, recorder: MergingRecorder) -> bool:
        """Bring the agent's cells into the shared document; False if no room holds it."""
        doc = self.doc
        if doc is None:
            return False
        from pycrdt import Map

        changed, written = recorder.changed, recorder.written
        with doc.ydoc.transaction(origin=ORIGIN):
            ycells = doc.ycells
            where = {ycell.get("id"): i for i, ycell in enumerate(ycells)}
            for index, cell in enumerate(recorder.cells):
                cid = cell.get("id")
                if cid in where:
                    if cid in changed:
                        update_cell(ycells[where[cid]], cell)
                    continue
                at = len(ycells)
                if cid in written:  # a person deleted it: back after its predecessor
                    earlier = [c.get("id") for c in recorder.cells[:index]]
                    at = max((where[e] + 1 for e in earlier if e in where), default=0)
                ycells.insert(at, doc.create_ycell(cell))
                where = {ycell.get("id"): i for i, ycell in enumerate(ycells)}
            meta = doc.ydoc.get("meta", type=Map).get("metadata")
            ours = recorder.metadata.get("jupyter_exec")
            if isinstance(meta, Map) and ours is not None and meta.get("jupyter_exec") != ours:
                meta["jupyter_exec"] = ours
        if recorder.person_runs:
            self.stamp(recorder.person_runs, {c["id"] for c in recorder.cells})
        return True

    def stamp(self, runs: list[tuple[int, PersonRun]], agent: set[str]) -> None:
        """Stamp the person's cells in the shared document with their place in the run order.

        A room opened since the last agent cell is looked up first (in a task:
        the lookup is asynchronous); with no room, the file gets the stamps.
        """
        doc = self.doc
        if doc is None:
            if self._current_room() is not None and self._pending is None:
                self._pending = asyncio.ensure_future(self._stamp_later(runs, agent))
            return
        from pycrdt import Map

        ycells = list(doc.ycells)
        light = [
            {
                "id": y.get("id"),
                "cell_type": y.get("cell_type"),
                "source": str(y.get("source", "")),
                "execution_count": y.get("execution_count"),
            }
            for y in ycells
        ]
        for light_cell in light:  # Yjs numbers are floats
            count = light_cell["execution_count"]
            light_cell["execution_count"] = int(count) if isinstance(count, float) else count
        with doc.ydoc.transaction(origin=ORIGIN):
            for index, stamp in match_runs(light, runs, agent).items():
                meta = ycells[index].get("metadata")
                if not isinstance(meta, Map):
                    continue
                ours = meta.get("jupyter_exec")
                ours = dict(ours) if isinstance(ours, dict) else {}
                if ours.get("run") != stamp:
                    meta["jupyter_exec"] = {**ours, "run": stamp}

    async def _stamp_later(self, runs: list[tuple[int, PersonRun]], agent: set[str]) -> None:
        try:
            if await self.refresh() is not None:
                self.stamp(runs, agent)
        except Exception:  # the stamps go to the file on the next save instead
            log.debug("could not stamp a person's run in %s", self._api_path, exc_info=True)
        finally:
            self._pending = None

    def close(self) -> None:
        """The session ended: the agent leaves the room."""
        if self._pending is not None:
            self._pending.cancel()
        room, self._room, self._doc = self._room, None, None
        if room is not None and room is self._current_room():
            with contextlib.suppress(Exception):
                room.awareness.set_local_state(None)


# -- the hooks the server's sessions call ------------------------------------------------------


def attach(session: Any, serverapp: Any, api_path: str) -> None:
    """Set a started server session up for live cells and the run order.

    A person's cells run on its kernel are numbered in the run order (from
    the kernel's IOPub, watched by the session's ``activity``); with
    collaboration installed, its notebook gets a :class:`LiveNotebook`.
    """
    recorder = session.recorder
    if not isinstance(recorder, MergingRecorder):
        return
    watch_person_runs(session)
    app = collaboration(serverapp)
    if app is not None:
        recorder.live = LiveNotebook(serverapp, app, api_path, session.name)


def watch_person_runs(session: Any) -> None:
    """Number a person's cells in the run order: every client but the session's own is a person.

    Called when the session starts and again when a fork, undo or restore
    swaps its kernel (a new kernel client, a new session id in its headers).
    """
    recorder = session.recorder
    kernel = session.kernel_slot.kernel
    own = getattr(getattr(getattr(kernel, "kc", None), "session", None), "session", None)
    if isinstance(recorder, MergingRecorder) and isinstance(own, str):
        session.activity.watch_runs(own, recorder.person_ran)


class LiveCells(CellHooks):
    """A server session's hook: each agent cell shown live in the shared document, if a
    room holds the notebook, and the run order told when an agent cell starts and ends.

    Registered by :class:`~jupyter_exec.server.entry.ServerAsyncSession`; the cells
    a resume re-runs are written nowhere, so they are not shown either.
    """

    def __init__(self, session: Any) -> None:
        self.session = session
        self._recorder: MergingRecorder | None = None
        self._cell: LiveCell | None = None

    async def before_cell(self, cell: CellCall) -> None:
        recorder = self.session.recorder
        if not cell.recorded or not isinstance(recorder, MergingRecorder):
            return
        recorder.cell_started()
        self._recorder = recorder
        live = recorder.live
        doc = await live.refresh() if isinstance(live, LiveNotebook) else None
        if isinstance(live, LiveNotebook) and doc is not None:
            from jupyter_exec.engine.recorder import new_cell_id

            options = self.session.options
            self._cell = LiveCell.place(
                live, doc, cell.code, new_cell_id(), options.max_output_chars
            )
            recorder.next_cell_id = self._cell.id
            cell.on_output = self._cell.wrap(cell.on_output)

    async def after_reply(self, cell: CellCall, run: CellRun) -> None:
        # Every output is in: the live cell stops here, before the record is written into
        # the document (the hooks after the record may wait on I/O; a stream timer firing
        # then would write the cell's text a second time).
        if self._cell is not None:
            self._cell.outputs_complete()

    async def after_record(self, cell: CellCall, execution: Execution | None) -> Execution | None:
        recorder, self._recorder = self._recorder, None
        shown, self._cell = self._cell, None
        if recorder is None:
            return execution
        try:
            if shown is not None and (execution is None or cell.problem is not None):
                shown.abandon()  # the cell raises: it is not shown as a finished cell
            elif shown is not None:
                shown.finish()  # recorded: the document holds its final outputs already
        finally:
            recorder.next_cell_id = None
            recorder.cell_finished()
        return execution
