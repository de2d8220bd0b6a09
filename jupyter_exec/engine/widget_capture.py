"""Outputs printed inside an ipywidgets ``Output`` widget belong to the widget, not the cell.

``with out: print(...)`` does not change where the kernel sends the text: the widget first
tells the front end, over its comm, "capture what the request ``<msg_id>`` prints"
(``comm_msg`` ``{"method": "update", "state": {"msg_id": ...}}``), and an empty ``msg_id``
ends it. JupyterLab and nbclient then put those outputs in the widget's state, not in the
cell; so does this module, so a session records, and a replay compares, what they show::

    comm_msg update msg_id=<this request> ─► capturing into widget <comm id>
    stream / display_data / error / clear_output while capturing ─► that widget's outputs
    comm_msg update msg_id=""              ─► back to the cell

Only the ``msg_id`` state attribute is read (the ``Output`` model is the widget that has one),
so no widget library is needed here. The widget's outputs end up in the notebook metadata's
widget state (:func:`merge_widget_state`), as nbclient writes it, with the outputs only (the
model's other attributes are not tracked).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = ["WIDGET_STATE_MIME", "OutputCaptures", "merge_widget_state"]

WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
CAPTURED = frozenset({"stream", "display_data", "execute_result", "error", "clear_output"})
"""The messages an ``Output`` widget takes while it captures (update_display_data is not)."""


class _Builder(Protocol):
    def feed(self, msg: Mapping[str, Any]) -> list[dict[str, Any]]: ...

    def finish(self) -> list[dict[str, Any]]: ...


class OutputCaptures:
    """Which ``Output`` widget captures a cell's outputs now, and what each one captured."""

    def __init__(self, new_builder: Callable[[], _Builder]) -> None:
        self._new_builder = new_builder
        self._builders: dict[str, _Builder] = {}
        self._active: list[str] = []  # comm ids, innermost last (``with a: with b:``)

    def feed(self, msg: Mapping[str, Any]) -> bool:
        """Whether ``msg`` was the widget's (a capture switch, or an output it captured)."""
        kind = msg["header"]["msg_type"]
        if kind == "comm_msg":
            parent = (msg.get("parent_header") or {}).get("msg_id")
            self._switch(msg.get("content") or {}, parent)
            return False  # a comm message is no output either way
        if not self._active or kind not in CAPTURED:  # the common case: one test
            return False
        target = self._active[-1]
        builder = self._builders.get(target)
        if builder is None:
            builder = self._builders[target] = self._new_builder()
        builder.feed(msg)
        return True

    def _switch(self, content: Mapping[str, Any], parent: Any) -> None:
        comm_id, data = content.get("comm_id"), content.get("data")
        if not isinstance(comm_id, str) or not isinstance(data, Mapping):
            return
        state = data.get("state")
        if data.get("method") != "update" or not isinstance(state, Mapping):
            return
        if "msg_id" not in state:
            return
        if comm_id in self._active:
            self._active.remove(comm_id)
        if state["msg_id"] and state["msg_id"] == parent:
            self._active.append(comm_id)

    def finish(self) -> dict[str, list[dict[str, Any]]]:
        """Each capturing widget's outputs (by its model id, the comm id), in order."""
        return {comm_id: builder.finish() for comm_id, builder in self._builders.items()}


def merge_widget_state(
    metadata: Mapping[str, Any], captured: Mapping[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """``metadata["widgets"]`` with ``captured`` outputs added to each ``Output`` model's state."""
    widgets = dict(metadata.get("widgets") or {})
    document = dict(widgets.get(WIDGET_STATE_MIME) or {})
    document.setdefault("version_major", 2)
    document.setdefault("version_minor", 0)
    state = dict(document.get("state") or {})
    for model_id, outputs in captured.items():
        model = dict(state.get(model_id) or {})
        model.setdefault("model_name", "OutputModel")
        model.setdefault("model_module", "@jupyter-widgets/output")
        model.setdefault("model_module_version", "1.0.0")
        attributes = dict(model.get("state") or {})
        attributes["outputs"] = [*(attributes.get("outputs") or []), *outputs]
        model["state"] = attributes
        state[model_id] = model
    document["state"] = state
    widgets[WIDGET_STATE_MIME] = document
    return widgets
