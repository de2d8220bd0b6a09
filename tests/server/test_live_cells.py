"""Live cells: the agent's cells in the notebook a person has open, with real-time collaboration.

The first tests run a real jupyter_server with jupyter-collaboration's server extension
(jupyter-server-ydoc) and open the session's notebook in a collaboration room, as JupyterLab
does when a person opens it; the test edits the room's shared document as that person would,
and runs the person's cells on the agent's kernel through a client of its own. The last test
does the whole thing in a real JupyterLab in headless Chromium (Playwright), with screenshots
of each step under ``artifacts/browser/`` and the delay from the REST call to the cell being
visible in the page logged (the median over the runs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from server_helpers import on_disk, run_as_person, run_of
from traitlets.config import Config

from jupyter_exec.replay import replay_async
from jupyter_exec.server.live import collaboration

Api = Callable[..., Awaitable[tuple[int, Any]]]


@pytest.fixture
def jp_server_config() -> Config:
    """The extension, and collaboration: rooms saved at once, stores in temporary files."""
    return Config(
        {
            "ServerApp": {
                "jpserver_extensions": {
                    "jupyter_exec.server": True,
                    "jupyter_server_fileid": True,
                    "jupyter_server_ydoc": True,
                }
            },
            "JupyterExecApp": {"timeout": 60.0},
            "YDocExtension": {
                "document_save_delay": 0.1,
                "ystore_class": "jupyter_server_ydoc.stores.TempFileYStore",
            },
        }
    )


async def until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Wait for ``check()`` to be truthy (a state, polled); its value."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def open_in_room(serverapp: Any, path: str) -> Any:
    """The notebook's shared document, as a person opening it in JupyterLab makes it."""
    app = collaboration(serverapp)
    assert app is not None, "jupyter-server-ydoc is not loaded"
    return await app.get_document(
        path=path, content_type="notebook", file_format="json", copy=False, create=True
    )


def cells(doc: Any) -> list[dict[str, Any]]:
    return list(doc.get()["cells"])


def text(cell: dict[str, Any]) -> str:
    return "".join(
        o["text"] if isinstance(o["text"], str) else "".join(o["text"])
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream"
    )


async def test_agent_cell_appears_while_it_runs_and_the_room_saves_it(
    api: Api, session: dict[str, Any], jp_serverapp: Any, root: Path
) -> None:
    path, sid = session["notebook"]["path"], session["id"]
    doc = await open_in_room(jp_serverapp, path)
    gate = root / session["work_dir"] / "go"
    code = (
        "import os, time\nprint('first', flush=True)\n"
        f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.02)\nprint('second')"
    )
    call = asyncio.ensure_future(api("POST", "sessions", sid, "execute", body={"code": code}))
    # The running cell is in the shared document, its first line of output with it.
    shown = await until(lambda: [c for c in cells(doc) if text(c) == "first\n"], "first output")
    assert not call.done()
    assert shown[0]["source"] == code
    assert shown[0]["execution_count"] is None
    gate.touch()
    status, execution = await call
    assert status == 200
    assert execution["status"] == "ok", execution
    # (JupyterLab's room gives an empty notebook one empty cell: the agent's comes after it.)
    (cell,) = [c for c in cells(doc) if c["source"]]
    assert cell == cells(doc)[-1]
    assert text(cell) == "first\nsecond\n"
    assert cell["execution_count"] == execution["execution_count"]
    assert run_of(cell) == {"seq": 1, "by": "agent", "session": "agent"}
    # The agent is present in the room, under the session's name.
    room = collaboration(jp_serverapp).ywebsocket_server.rooms[doc_room(jp_serverapp, path)]
    assert room.awareness.get_local_state()["user"]["name"] == "agent"
    # The room, not the recorder, writes the file: it holds the cell as the document does.
    saved = await until(
        lambda: [c for c in on_disk(root, path)["cells"] if text(c)], "the room's save"
    )
    assert [c["id"] for c in saved] == [cell["id"]]
    assert text(saved[0]) == "first\nsecond\n"
    assert run_of(saved[0]) == run_of(cell)


def doc_room(serverapp: Any, path: str) -> str:
    file_id = serverapp.web_app.settings["file_id_manager"].index(path)
    return f"json:notebook:{file_id}"


async def test_a_persons_edits_and_the_agents_cells_merge_in_the_document(
    api: Api, session: dict[str, Any], jp_serverapp: Any, root: Path
) -> None:
    path, sid = session["notebook"]["path"], session["id"]
    for code in ("a = 1", "b = 2"):
        assert (await api("POST", "sessions", sid, "execute", body={"code": code}))[0] == 200
    doc = await open_in_room(jp_serverapp, path)
    assert [c["source"] for c in cells(doc)] == ["a = 1", "b = 2"]
    # The person adds a note at the top, edits the first agent cell, deletes the second.
    with doc.ydoc.transaction():
        doc.ycells.insert(0, doc.create_ycell(dict(nbformat.v4.new_markdown_cell("my note"))))
        doc.set_cell(1, source="a = 1  # checked")
        del doc.ycells[2]
    assert (await api("POST", "sessions", sid, "execute", body={"code": "c = a + b"}))[0] == 200
    sources = [c["source"] for c in cells(doc)]
    assert sources == ["my note", "a = 1  # checked", "b = 2", "c = a + b"]
    saved = await until(
        lambda: [c["source"] for c in on_disk(root, path)["cells"]] == sources, "the merge saved"
    )
    assert saved


async def test_a_persons_cell_run_on_the_agents_kernel_takes_its_place_in_the_run_order(
    api: Api, session: dict[str, Any], jp_serverapp: Any, root: Path
) -> None:
    path, sid = session["notebook"]["path"], session["id"]
    assert (await api("POST", "sessions", sid, "execute", body={"code": "base = 10"}))[0] == 200
    doc = await open_in_room(jp_serverapp, path)
    # The person puts a cell at the top and runs it (after the agent's cell).
    person = "total = base * 2"  # (no output: the test is no front end that would show it)
    doc.ycells.insert(0, doc.create_ycell(dict(nbformat.v4.new_code_cell(person))))
    reply = await run_as_person(jp_serverapp, session["kernel"]["id"], person)
    assert reply["status"] == "ok"
    stamped = await until(lambda: run_of(cells(doc)[0]), "the person's run stamped")
    assert stamped == {"seq": 2, "by": "person", "user": "ada"}
    _, execution = await api("POST", "sessions", sid, "execute", body={"code": "total + 1"})
    assert execution["text"] == "21"
    runs = [run_of(c) for c in cells(doc)]
    assert [(r or {}).get("seq") for r in runs] == [2, 1, 3]
    # The file the room saved replays, in the order the cells ran (top to bottom it fails).
    await until(lambda: len(on_disk(root, path)["cells"]) == 3, "the room's save")
    await until(lambda: run_of(on_disk(root, path)["cells"][0]), "the stamp saved")
    notebook = root / path
    (notebook.parent / "copy.ipynb").write_text(notebook.read_text())
    report = await replay_async(notebook.parent / "copy.ipynb", timeout=60)
    assert report.reproduced, report.to_markdown()
    assert [c.number for c in report.cells] == [2, 1, 3]
