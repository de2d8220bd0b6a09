"""Output printed inside an ipywidgets ``Output`` widget goes to the widget, as in Jupyter.

Message-level tests first (the capture switch as the widget sends it over its comm), then a
real kernel: the widget's protocol is sent with the ``comm`` package exactly as ipywidgets'
``Output.__enter__`` / ``__exit__`` send it (flush, then ``update`` with the request's
``msg_id``; flush, then an empty ``msg_id``), since ipywidgets is not a dependency here. A
session records the captured text in the notebook's widget state, not in the cell, and a
replay of a record that holds it there (as nbclient writes it) is ``same``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyter_exec import Session
from jupyter_exec.engine.outputs import CellOutputs
from jupyter_exec.engine.widget_capture import WIDGET_STATE_MIME, merge_widget_state
from jupyter_exec.notebook.replay import replay
from tests.engine.test_outputs import PARENT, message


def capture(comm_id: str, msg_id: str) -> dict[str, Any]:
    data = {"method": "update", "state": {"msg_id": msg_id}, "buffer_paths": []}
    return message("comm_msg", comm_id=comm_id, data=data)


def stdout(text: str) -> dict[str, Any]:
    return message("stream", name="stdout", text=text)


def test_outputs_between_the_switches_go_to_the_widget() -> None:
    cell = CellOutputs()
    cell.feed(stdout("before\n"))
    assert cell.feed(capture("w1", PARENT["msg_id"])) == []
    assert cell.feed(stdout("inside\n")) == []  # no event for the cell's on_output either
    cell.feed(message("display_data", data={"text/plain": "'shown'"}, metadata={}))
    cell.feed(capture("w1", ""))
    cell.feed(stdout("after\n"))
    assert cell.finish() == [{"output_type": "stream", "name": "stdout", "text": "before\nafter\n"}]
    assert cell.captures.finish() == {
        "w1": [
            {"output_type": "stream", "name": "stdout", "text": "inside\n"},
            {"output_type": "display_data", "data": {"text/plain": "'shown'"}, "metadata": {}},
        ]
    }


def test_nested_widgets_and_other_requests_and_other_comm_messages() -> None:
    cell = CellOutputs()
    cell.feed(capture("outer", PARENT["msg_id"]))
    cell.feed(capture("inner", PARENT["msg_id"]))
    cell.feed(stdout("in inner\n"))
    cell.feed(capture("inner", ""))
    cell.feed(stdout("in outer\n"))
    cell.feed(capture("outer", ""))
    # Another request's msg_id, or a comm message of another widget (no msg_id): no capture.
    cell.feed(capture("other", "another-request"))
    cell.feed(
        message("comm_msg", comm_id="slider", data={"method": "update", "state": {"value": 3}})
    )
    cell.feed(stdout("cell\n"))
    assert cell.finish() == [{"output_type": "stream", "name": "stdout", "text": "cell\n"}]
    captured = cell.captures.finish()
    assert captured["inner"][0]["text"] == "in inner\n"
    assert captured["outer"][0]["text"] == "in outer\n"
    assert "other" not in captured


def test_the_widget_state_keeps_each_cells_captures_in_order() -> None:
    first = merge_widget_state(
        {}, {"w1": [{"output_type": "stream", "name": "stdout", "text": "a"}]}
    )
    second = merge_widget_state(
        {"widgets": first}, {"w1": [{"output_type": "stream", "name": "stdout", "text": "b"}]}
    )
    model = second[WIDGET_STATE_MIME]["state"]["w1"]
    assert model["model_name"] == "OutputModel"
    assert [o["text"] for o in model["state"]["outputs"]] == ["a", "b"]
    assert second[WIDGET_STATE_MIME]["version_major"] == 2


OPEN = """from comm import create_comm
out = create_comm(target_name="jupyter.widget", data={"state": {"_model_name": "OutputModel",
    "_model_module": "@jupyter-widgets/output", "outputs": [], "msg_id": ""}, "buffer_paths": []})
"""
CAPTURE = """import sys
print("before")
sys.stdout.flush(); sys.stderr.flush()
out.send({"method": "update", "buffer_paths": [],
          "state": {"msg_id": get_ipython().kernel.get_parent()["header"]["msg_id"]}})
print("inside")
sys.stdout.flush(); sys.stderr.flush()
out.send({"method": "update", "state": {"msg_id": ""}, "buffer_paths": []})
print("after")
"""


def test_a_session_records_the_capture_in_the_widget_and_a_replay_is_same(
    tmp_path: Path,
) -> None:
    with Session(work_dir=tmp_path, name="widgets") as session:
        session.execute(OPEN)
        assert session.execute(CAPTURE).stdout == "before\nafter\n"
    path = tmp_path / "widgets.ipynb"
    raw = json.loads(path.read_text())
    (shown,) = raw["cells"][1]["outputs"]
    assert (shown["name"], "".join(shown["text"])) == ("stdout", "before\nafter\n")
    (model,) = raw["metadata"]["widgets"][WIDGET_STATE_MIME]["state"].values()
    (inside,) = model["state"]["outputs"]
    assert (inside["name"], "".join(inside["text"])) == ("stdout", "inside\n")
    report = replay(path)
    assert [c.status for c in report.cells] == ["same", "same"]
    # A record that kept the capture in the cell (as jupyter-exec did before) now differs.
    shown["text"] = "before\ninside\nafter\n"
    path.write_text(json.dumps(raw))
    assert [c.status for c in replay(path, output=tmp_path / "b.ipynb").cells] == [
        "same",
        "different",
    ]
