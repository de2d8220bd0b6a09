"""A running agent cell in a shared notebook: placed when it starts, outputs as they come.

:class:`LiveCell` is what the hook :class:`jupyter_exec.server.live.LiveCells` puts in the
shared document of an open notebook for each agent cell; the helpers below
turn recorded cells and outputs into the document's types (pycrdt maps, with
stream text as growable text), and are used by :class:`~.live.LiveNotebook`
when the recorded cell replaces the running one. pycrdt is imported on use:
this module is only reached when a collaboration room holds the notebook.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jupyter_exec.server.live import LiveNotebook
    from jupyter_exec.session.session import OutputCallback

__all__ = ["FLUSH_DELAY", "ORIGIN", "LiveCell", "update_cell"]

log = logging.getLogger("jupyter_exec.server")

ORIGIN = "jupyter-exec"
"""The origin of our transactions on the shared document."""

FLUSH_DELAY = 0.05
"""Seconds stream text is gathered before it is written (one update per burst, not per line)."""


def _outputs(outputs: list[dict[str, Any]]) -> list[Any]:
    """Outputs as the shared document holds them: maps, stream text as growable text."""
    from pycrdt import Map, Text

    made = []
    for output in outputs:
        output = dict(output)
        if output.get("output_type") == "stream":
            text = output.get("text", "")
            output["text"] = Text(text if isinstance(text, str) else "".join(text))
        made.append(Map(output))
    return made


def update_cell(ycell: Any, cell: dict[str, Any]) -> None:
    """An agent cell that changed: its outputs, count and our metadata (its source is
    the person's to edit)."""
    from pycrdt import Array, Map

    youtputs = ycell.get("outputs")
    if not isinstance(youtputs, Array):
        ycell["outputs"] = youtputs = Array()
    if youtputs.to_py() != cell.get("outputs", []):
        youtputs.clear()
        youtputs.extend(_outputs(cell.get("outputs", [])))
    if ycell.get("execution_count") != cell.get("execution_count"):
        ycell["execution_count"] = cell.get("execution_count")
    meta = ycell.get("metadata")
    if isinstance(meta, Map):
        for key in ("execution", "jupyter_exec"):
            if key in cell.get("metadata", {}):
                meta[key] = cell["metadata"][key]
    if ycell.get("execution_state") not in (None, "idle"):
        ycell["execution_state"] = "idle"


class LiveCell:
    """An agent cell while it runs: placed in the shared document, its outputs added as they come.

    Stream text is gathered for :data:`FLUSH_DELAY` seconds and written in one
    update; past ``max_chars`` of it, nothing more is streamed (the recorded
    cell, with its truncation marker, replaces the outputs at the end). It stops
    when the cell's reply comes (:meth:`outputs_complete`), before the record
    replaces its outputs: never after.
    """

    def __init__(self, notebook: LiveNotebook, ycell: Any, max_chars: int) -> None:
        self._notebook = notebook
        self._ycell = ycell
        self.id = str(ycell.get("id"))
        self._left = max_chars
        self._text: list[tuple[str, str]] = []  # (stream name, text) not yet written
        self._clear_pending = False
        self._timer: asyncio.TimerHandle | None = None
        self._done = False

    @classmethod
    def place(
        cls, notebook: LiveNotebook, doc: Any, code: str, cell_id: str, max_chars: int
    ) -> LiveCell:
        cell: dict[str, Any] = {
            "cell_type": "code",
            "id": cell_id,
            "execution_count": None,
            "metadata": {"jupyter_exec": {"status": "running"}},
            "outputs": [],
            "source": code,
        }
        with doc.ydoc.transaction(origin=ORIGIN):
            ycell = doc.create_ycell(cell)
            doc.ycells.append(ycell)
            ycell["execution_state"] = "running"  # JupyterLab shows [*]
        return cls(notebook, ycell, max_chars)

    def feed(self, event: dict[str, Any]) -> None:
        """One ``on_output`` event of the running cell."""
        if self._done:
            return
        kind = event.get("output_type")
        if kind == "stream":
            text = str(event.get("text", ""))[: max(self._left, 0)]
            self._left -= len(text)
            if text:
                self._text.append((str(event.get("name", "stdout")), text))
                if self._timer is None:
                    self._timer = asyncio.get_running_loop().call_later(FLUSH_DELAY, self.flush)
            return
        if kind == "clear_output":
            self.flush()
            if event.get("wait"):
                self._clear_pending = True
            else:
                self._edit(lambda outputs: outputs.clear())
            return
        if kind in ("display_data", "execute_result", "error"):
            self.flush()
            output = {k: v for k, v in event.items() if k != "transient"}
            self._edit(lambda outputs: outputs.extend(_outputs([output])))
        # update_display_data: the recorded cell brings the final values

    def flush(self) -> None:
        """Write the gathered stream text."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        chunks, self._text = self._text, []
        if not chunks:
            return

        def add(outputs: Any) -> None:
            from pycrdt import Map, Text

            for name, text in chunks:
                last = outputs[len(outputs) - 1] if len(outputs) else None
                grown = None
                if isinstance(last, Map) and last.get("output_type") == "stream":
                    grown = last.get("text") if last.get("name") == name else None
                if isinstance(grown, Text):
                    grown += text  # in place (assigning it back to the map would empty it)
                else:
                    stream = {"output_type": "stream", "name": name, "text": text}
                    outputs.extend(_outputs([stream]))

        self._edit(add)

    def _edit(self, change: Callable[[Any], None]) -> None:
        doc = self._notebook.doc
        if doc is None:
            return
        try:
            with doc.ydoc.transaction(origin=ORIGIN):
                outputs = self._ycell.get("outputs")
                if outputs is None:
                    return
                if self._clear_pending:
                    self._clear_pending = False
                    outputs.clear()
                change(outputs)
        except Exception:  # e.g. a person deleted the cell meanwhile: the record puts it back
            log.debug("could not show an output of %s live", self.id, exc_info=True)

    def outputs_complete(self) -> None:
        """The cell's reply came (the runner returned, every output fed): the text still
        gathered is written now, and nothing more ever is. The record that follows may be
        written into the document and then wait on other hooks (the state's signature
        write): a timer left pending would then add the text a second time."""
        self.flush()
        self.finish()

    def finish(self) -> None:
        """Stop streaming; text gathered and not yet written is dropped (the record, put in
        the document, holds the final outputs; an abandoned cell is taken out)."""
        self._done = True
        self._text.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def wrap(self, on_output: OutputCallback | None) -> OutputCallback:
        """The caller's ``on_output``, with this cell fed first."""

        async def both(event: dict[str, Any]) -> None:
            self.feed(event)
            if on_output is not None:
                outcome = on_output(event)
                if inspect.isawaitable(outcome):
                    await outcome

        return both

    def abandon(self) -> None:
        """The cell failed before it could be recorded: take it out of the document."""
        self.finish()
        doc = self._notebook.doc
        if doc is None:
            return
        with doc.ydoc.transaction(origin=ORIGIN):
            for index, ycell in enumerate(doc.ycells):
                if ycell.get("id") == self.id:
                    del doc.ycells[index]
                    break
