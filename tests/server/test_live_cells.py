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
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import nbformat
import pytest
from lab_helpers import (
    ARTIFACTS,
    add_cell,
    chromium_page,
    jupyter_lab,
    notebook_widget,
    open_lab,
    require_browser,
    sessions_api,
)
from server_helpers import JupyterProcess, on_disk, run_as_person, run_of
from traitlets.config import Config

from jupyter_exec.engine.hooks import CellCall, CellHooks
from jupyter_exec.models import Execution
from jupyter_exec.notebook.replay import replay, replay_async
from jupyter_exec.server import livecell
from jupyter_exec.server.live import LiveCells, collaboration

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
    gates = [root / session["work_dir"] / f"go-{n}" for n in (1, 2)]
    code = "import os, time\n" + "".join(
        f"print('line {n}', flush=True)\n"
        f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.02)\n"
        for n, gate in enumerate(gates, start=1)
    )
    call = asyncio.ensure_future(api("POST", "sessions", sid, "execute", body={"code": code}))
    # The running cell is in the shared document, its output growing as it comes.
    shown = await until(lambda: [c for c in cells(doc) if text(c) == "line 1\n"], "first output")
    assert not call.done()
    assert shown[0]["source"] == code
    assert shown[0]["execution_count"] is None
    gates[0].touch()
    await until(lambda: [c for c in cells(doc) if text(c) == "line 1\nline 2\n"], "more output")
    assert not call.done()
    gates[1].touch()
    status, execution = await call
    assert status == 200
    assert execution["status"] == "ok", execution
    # (JupyterLab's room gives an empty notebook one empty cell: the agent's comes after it.)
    (cell,) = [c for c in cells(doc) if c["source"]]
    assert cell == cells(doc)[-1]
    assert text(cell) == "line 1\nline 2\n"
    assert cell["execution_count"] == execution["execution_count"]
    assert run_of(cell) == {"seq": 1, "by": "agent", "session": "agent"}
    # The agent is present in the room, under the session's name.
    room = collaboration(jp_serverapp).ywebsocket_server.rooms[doc_room(jp_serverapp, path)]
    assert room.awareness.get_local_state()["user"]["name"] == "agent"
    # The room, not the recorder, writes the file: it comes to hold the cell as the document
    # does. (The room saves a while after each change, so a save taken while the cell had
    # printed only its first line may be the one on disk first: wait for the one after.)
    saved = await until(
        lambda: [c for c in on_disk(root, path)["cells"] if text(c) == "line 1\nline 2\n"],
        "the room's save of the finished cell",
    )
    assert [c["id"] for c in saved] == [cell["id"]]
    assert run_of(saved[0]) == run_of(cell)


class WaitsAfterRecord(CellHooks):
    """A hook run between the record and the live cells' own end, that waits there as the
    state's hook does (it signs the cell's state off the event loop): until the running
    cell's stream timer, if one is pending, has fired."""

    def __init__(self, live: LiveCells) -> None:
        self.live = live
        self.waited = 0

    async def after_record(self, cell: CellCall, execution: Execution | None) -> Execution | None:
        shown = self.live._cell
        if shown is not None:
            self.waited += 1
            await until(lambda: shown._timer is None, "the live cell's stream timer")
        return execution


async def test_a_hook_that_waits_after_the_record_never_doubles_a_live_cells_output(
    api: Api,
    session: dict[str, Any],
    jp_serverapp: Any,
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, sid = session["notebook"]["path"], session["id"]
    doc = await open_in_room(jp_serverapp, path)
    # The cell's text is still gathered (not written) when its reply comes, whatever the
    # machine's speed; then a hook awaits after the record: the timer fires in that wait.
    monkeypatch.setattr(livecell, "FLUSH_DELAY", 5.0)
    server_session = jp_serverapp.web_app.settings["jupyter_exec_sessions"].get(sid).session
    (live,) = [h for h in server_session.hooks if isinstance(h, LiveCells)]
    waits = WaitsAfterRecord(live)
    server_session.hooks.remove(live)
    server_session.hooks.add(waits)
    server_session.hooks.add(live)
    code = "print('line-0', flush=True)\nprint('line-1')\nprint('line-2', end='')\nprint()"
    status, execution = await api("POST", "sessions", sid, "execute", body={"code": code})
    assert status == 200
    assert execution["status"] == "ok", execution
    assert waits.waited == 1
    (cell,) = [c for c in cells(doc) if c["source"]]
    shown = text(cell)
    assert [shown.count(f"line-{k}") for k in range(3)] == [1, 1, 1], shown
    assert shown == "line-0\nline-1\nline-2\n"
    saved = await until(
        lambda: [c for c in on_disk(root, path)["cells"] if text(c)], "the room's save"
    )
    assert [text(c) for c in saved] == ["line-0\nline-1\nline-2\n"]


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


async def test_a_failing_room_sends_the_cells_to_the_file(
    api: Api,
    session: dict[str, Any],
    jp_serverapp: Any,
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, sid = session["notebook"]["path"], session["id"]
    await open_in_room(jp_serverapp, path)

    async def broken(**kwargs: Any) -> Any:
        raise RuntimeError("the collaboration extension failed")

    monkeypatch.setattr(collaboration(jp_serverapp), "get_document", broken)
    status, execution = await api("POST", "sessions", sid, "execute", body={"code": "6 * 7"})
    assert status == 200
    assert execution["text"] == "42"
    assert [c["source"] for c in on_disk(root, path)["cells"]] == ["6 * 7"]


# -- in a real JupyterLab, in a real browser ---------------------------------------------------


@pytest.fixture
def lab_rtc(tmp_path: Path) -> Iterator[JupyterProcess]:
    """``jupyter lab`` with real-time collaboration (as installed), no toasts, app exposed."""
    with jupyter_lab(
        tmp_path,
        "--LabApp.expose_app_in_browser=True",
        "--YDocExtension.document_save_delay=0.5",
        "--YDocExtension.ystore_class=jupyter_server_ydoc.stores.TempFileYStore",
    ) as server:
        yield server


@pytest.mark.browser
def test_agent_cells_appear_live_in_jupyterlab(lab_rtc: JupyterProcess) -> None:
    sync_api = require_browser()
    expect = sync_api.expect
    lab = lab_rtc
    call = sessions_api(lab)
    session = call("POST", name="agent")
    run = f"/{session['id']}/execute"
    notebook = session["notebook"]["path"]
    label = notebook.rsplit("/", 1)[-1]
    delays: list[float] = []

    with (
        ThreadPoolExecutor(max_workers=1) as pool,  # the agent's REST calls, while it is watched
        chromium_page(sync_api, "live-failure.png", height=1000, log=lab.log) as page,
    ):
        open_lab(page, lab, f"/tree/{notebook}")
        panel = notebook_widget(page, expect, label)
        cells = panel.locator(".jp-Notebook .jp-Cell")
        indicator = panel.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
        expect(indicator).to_have_count(1, timeout=60_000)
        # The shared document is loaded (the room gives an empty notebook one empty cell).
        expect(cells).to_have_count(1, timeout=60_000)
        dialogs = page.locator(".jp-Dialog")
        page.screenshot(path=ARTIFACTS / "live-1-open.png")

        def shown(marker: str) -> Any:
            return panel.locator(".jp-Cell .jp-OutputArea-output", has_text=marker)

        def execute_and_time(code: str, marker: str) -> dict[str, Any]:
            started = time.monotonic()
            pending = pool.submit(call, "POST", run, code=code)
            expect(shown(marker)).to_be_visible(timeout=60_000)
            delays.append(time.monotonic() - started)
            result: dict[str, Any] = pending.result(timeout=120)
            assert result["status"] == "ok", result
            return result

        # The agent's cells appear as they run, without a reload.
        for k in range(5):
            execute_and_time(f"agent_var = 42\nprint('agent-line-{k}')", f"agent-line-{k}")
        page.screenshot(path=ARTIFACTS / "live-2-agent-cells.png")

        # A running cell shows its first output while it still runs, then the rest.
        gate = lab.root / session["work_dir"] / "go"
        slow = (
            "import os, time\nprint('started-running', flush=True)\n"
            f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.02)\n"
            "print('finished-running')"
        )
        pending = pool.submit(call, "POST", run, code=slow)
        expect(shown("started-running")).to_be_visible(timeout=60_000)
        running = panel.locator(".jp-Cell .jp-InputPrompt", has_text="[*]")
        expect(running).to_have_count(1)
        assert not pending.done()
        page.screenshot(path=ARTIFACTS / "live-3-running.png")
        gate.touch()
        expect(shown("finished-running")).to_be_visible(timeout=60_000)
        assert pending.result(timeout=120)["status"] == "ok"

        # A plot arrives.
        plot = (
            "%matplotlib inline\nimport matplotlib.pyplot as plt\n"
            "plt.plot([1, 2, 3], [agent_var, 0, agent_var])\nplt.title('live plot')\n"
            "plt.show()"
        )
        started = time.monotonic()
        pending = pool.submit(call, "POST", run, code=plot)
        image = panel.locator(".jp-OutputArea-output.jp-RenderedImage img")
        expect(image).to_be_visible(timeout=60_000)
        delays.append(time.monotonic() - started)
        assert pending.result(timeout=120)["status"] == "ok"
        assert image.evaluate("e => e.naturalWidth") > 100
        expect(dialogs).to_have_count(0)
        page.screenshot(path=ARTIFACTS / "live-4-plot.png")

        # The agent is a collaborator in the notebook, under the session's name.
        names = page.evaluate(
            "() => [...window.jupyterapp.shell.currentWidget.context.model.sharedModel"
            ".awareness.getStates().values()].map(s => s.user && s.user.name)"
        )
        assert "agent" in names

        # The person adds a cell at the very top and runs it on the agent's kernel.
        code = "person_var = agent_var + 1\nprint(person_var)"
        add_cell(page, expect, cells, code, count=cells.count() + 1, at_top=True)
        expect(cells.first.locator(".jp-OutputArea-output")).to_have_text("43", timeout=60_000)
        # ... and the agent goes on from what the person defined.
        execute_and_time("print(person_var * 2, 'from-agent')", "86 from-agent")
        expect(dialogs).to_have_count(0)
        page.screenshot(path=ARTIFACTS / "live-5-person-and-agent.png")

    median = statistics.median(delays)
    report = {"runs": len(delays), "median_s": round(median, 3), "delays_s": delays}
    (ARTIFACTS / "live-delay.json").write_text(json.dumps(report, indent=1))
    print(f"execute -> cell visible: median {median:.3f} s over {len(delays)} runs")

    # The file on disk (saved by the collaboration room) holds both sides' cells, validates,
    # and records the order they ran in; replayed in that order, it reproduces.
    path = lab.root / notebook

    def person_stamped() -> list[Any]:
        cells = nbformat.read(path, as_version=4).cells if path.stat().st_size else []
        return [c for c in cells if (run_of(c) or {}).get("by") == "person"]

    deadline = time.monotonic() + 60
    while not person_stamped():  # the room saves shortly after the last change
        assert time.monotonic() < deadline, "the person's run never reached the file"
        time.sleep(0.1)
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    ran = [c for c in nb.cells if c.source]  # (without the room's empty cell)
    assert ran[0].source.startswith("person_var")
    assert [(run_of(c) or {}).get("by") for c in ran] == ["person"] + ["agent"] * 8
    assert [run_of(c)["seq"] for c in ran] == [8, 1, 2, 3, 4, 5, 6, 7, 9]
    copy = path.with_name("shared-copy.ipynb")
    copy.write_bytes(path.read_bytes())
    report_of_replay = replay(copy, timeout=60)
    assert report_of_replay.reproduced, report_of_replay.to_markdown()
