"""The concurrency rule for session notebooks: a person's saves and the agent's cells both survive.

Unit tests drive MergingRecorder on files directly (a "person" rewrites the file as JupyterLab
would); the last test does the same through the running server's contents API, which is what
JupyterLab calls, and checks the extension puts back the agent's cells at once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nbformat
from server_helpers import on_disk, run_as_person, run_of

from jupyter_exec.engine.recorder import new_cell_id
from jupyter_exec.engine.runorder import PersonRun, match_runs
from jupyter_exec.server.live import collaboration
from jupyter_exec.server.recorder import MergingRecorder

META = {"language_info": {"name": "python"}, "jupyter_exec": {"session": "t"}}


def agent_cell(source: str) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "id": new_cell_id(),
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": source,
    }


def person_edit(path: Path, change: Any) -> None:
    """Rewrite the file as another program would (new inode, new mtime)."""
    nb = json.loads(path.read_text())
    change(nb)
    tmp = path.with_suffix(".person")
    tmp.write_text(json.dumps(nb, indent=1))
    os.replace(tmp, path)


def sources(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    return [c.source for c in nb.cells]


def person_cell(source: str) -> dict[str, Any]:
    cell = nbformat.v4.new_markdown_cell(source)
    return dict(cell)


def test_unchanged_file_is_written_as_usual(tmp_path: Path) -> None:
    rec = MergingRecorder(tmp_path / "s.ipynb", META)
    rec.save()
    rec.append(agent_cell("a = 1"))
    rec.append(agent_cell("b = 2"))
    assert sources(rec.path) == ["a = 1", "b = 2"]
    assert rec.render() == super(MergingRecorder, rec).render()


def test_person_cells_and_edits_are_kept_and_agent_cells_appended(tmp_path: Path) -> None:
    rec = MergingRecorder(tmp_path / "s.ipynb", META)
    rec.append(agent_cell("a = 1"))

    def edit(nb: dict[str, Any]) -> None:
        nb["cells"].insert(0, person_cell("# Notes by a person"))
        nb["cells"][1]["source"] = "a = 1  # checked"
        nb["metadata"]["tags"] = ["mine"]

    person_edit(rec.path, edit)
    rec.append(agent_cell("b = 2"))
    assert sources(rec.path) == ["# Notes by a person", "a = 1  # checked", "b = 2"]
    assert json.loads(rec.path.read_text())["metadata"]["tags"] == ["mine"]
    rec.append(agent_cell("c = 3"))  # the person's version stays the base on later saves
    assert sources(rec.path) == ["# Notes by a person", "a = 1  # checked", "b = 2", "c = 3"]


def test_agent_cells_dropped_by_a_stale_save_come_back_in_place(tmp_path: Path) -> None:
    rec = MergingRecorder(tmp_path / "s.ipynb", META)
    rec.append(agent_cell("a = 1"))
    stale = json.loads(rec.path.read_text())  # what the person's browser loaded
    rec.append(agent_cell("b = 2"))
    stale["cells"].append(person_cell("person"))
    rec.path.write_text(json.dumps(stale))  # "Overwrite" in JupyterLab's dialog
    assert sources(rec.path) == ["a = 1", "person"]
    assert rec.resync() is True
    assert sources(rec.path) == ["a = 1", "b = 2", "person"]
    assert rec.resync() is False  # nothing more to do: no needless rewrite


def test_a_save_that_kept_every_agent_cell_is_not_rewritten(tmp_path: Path) -> None:
    rec = MergingRecorder(tmp_path / "s.ipynb", META)
    rec.append(agent_cell("a = 1"))
    person_edit(rec.path, lambda nb: nb["cells"].append(person_cell("note")))
    before = rec.path.stat().st_mtime_ns, rec.path.read_text()
    assert rec.resync() is False
    assert (rec.path.stat().st_mtime_ns, rec.path.read_text()) == before
    rec.append(agent_cell("b = 2"))
    assert sources(rec.path) == ["a = 1", "note", "b = 2"]


def test_agent_updates_win_over_stale_copies(tmp_path: Path) -> None:
    rec = MergingRecorder(tmp_path / "s.ipynb", META)
    cell = agent_cell("display(x)")
    rec.append(cell)
    person_edit(rec.path, lambda nb: nb["cells"].append(person_cell("note")))
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "updated\n"}]
    rec.refresh(0)  # an update_display_data aimed at the agent's cell
    nb = nbformat.read(rec.path, as_version=4)
    assert nb.cells[0].outputs[0].text == "updated\n"
    assert [c.source for c in nb.cells] == ["display(x)", "note"]


def test_an_unreadable_file_does_not_lose_anything(tmp_path: Path) -> None:
    rec = MergingRecorder(tmp_path / "s.ipynb", META)
    rec.append(agent_cell("a = 1"))
    person_edit(rec.path, lambda nb: nb["cells"].append(person_cell("note")))
    rec.append(agent_cell("b = 2"))
    rec.path.write_text('{"cells": [')  # caught half-written
    rec.append(agent_cell("c = 3"))
    assert sources(rec.path) == ["a = 1", "note", "b = 2", "c = 3"]


async def test_person_saving_through_the_server_keeps_agent_cells(api, jp_fetch, session) -> None:
    sid, path = session["id"], session["notebook"]["path"]
    await api("POST", "sessions", sid, "execute", body={"code": "a = 1"})
    loaded = json.loads((await jp_fetch("api", "contents", path)).body)  # JupyterLab opens it
    await api("POST", "sessions", sid, "execute", body={"code": "b = a + 1"})

    nb = loaded["content"]
    nb["cells"].append(person_cell("written by the person"))
    body = json.dumps({"type": "notebook", "format": "json", "content": nb})
    await jp_fetch("api", "contents", path, method="PUT", body=body)  # a stale save

    saved = json.loads((await jp_fetch("api", "contents", path)).body)["content"]
    assert [c["source"] for c in saved["cells"]] == ["a = 1", "b = a + 1", "written by the person"]
    await api("POST", "sessions", sid, "execute", body={"code": "c = b"})
    saved = json.loads((await jp_fetch("api", "contents", path)).body)["content"]
    assert [c["source"] for c in saved["cells"]] == [
        "a = 1",
        "b = a + 1",
        "written by the person",
        "c = b",
    ]


# -- the run order, without collaboration ---------------------------------------------------


def test_a_persons_run_seen_during_an_agent_cell_is_placed_by_execution_count(
    tmp_path: Path,
) -> None:
    rec = MergingRecorder(tmp_path / "s.ipynb", META)
    rec.save()
    rec.cell_started()
    rec.person_ran(PersonRun("early = 1", 4, True))  # ran before the agent's In [5]
    rec.person_ran(PersonRun("late = 1", 6, True))  # queued behind it
    assert rec.person_runs == []
    assert rec.next_run_seq(5) == 2
    rec.cell_finished()
    assert [(seq, run.code) for seq, run in rec.person_runs] == [(1, "early = 1"), (3, "late = 1")]
    rec.person_ran(PersonRun("after = 1", 7, True))  # no agent cell running: numbered at once
    assert rec.person_runs[-1][0] == 4


def test_match_runs_prefers_the_shown_count_and_a_cells_first_good_run() -> None:
    cells = [
        {"cell_type": "code", "id": "p1", "source": "x = 1", "execution_count": None},
        {"cell_type": "code", "id": "p2", "source": "x = 1", "execution_count": 9},
        {"cell_type": "code", "id": "a1", "source": "y = x", "execution_count": 3},
        {"cell_type": "code", "id": "p3", "source": "y = x", "execution_count": 5},
    ]
    runs = [
        (1, PersonRun("x = 1", 9, True)),
        (2, PersonRun("y = x", 5, False)),
        (4, PersonRun("y = x", 8, True)),
        (6, PersonRun("y = x", 10, True, "ada")),
    ]
    stamps = match_runs(cells, runs, skip={"a1"})
    assert stamps == {1: {"seq": 1, "by": "person"}, 3: {"seq": 4, "by": "person"}}


async def test_without_collaboration_a_persons_run_is_stamped_in_the_file(
    api: Any, session: dict[str, Any], jp_serverapp: Any, jp_fetch: Any, root: Path
) -> None:
    # No collaboration on this server: the person works through the contents API (JupyterLab
    # without real-time collaboration), and the session writes the file, merging.
    assert collaboration(jp_serverapp) is None
    path, sid = session["notebook"]["path"], session["id"]
    assert (await api("POST", "sessions", sid, "execute", body={"code": "base = 10"}))[0] == 200
    model = json.loads((await jp_fetch("api", "contents", path)).body)["content"]
    person = "total = base * 2"
    model["cells"].insert(0, dict(nbformat.v4.new_code_cell(person)))
    body = json.dumps({"type": "notebook", "format": "json", "content": model})
    await jp_fetch("api", "contents", path, method="PUT", body=body)
    assert (await run_as_person(jp_serverapp, session["kernel"]["id"], person))["status"] == "ok"
    _, execution = await api("POST", "sessions", sid, "execute", body={"code": "total"})
    assert execution["text"] == "20"
    saved = on_disk(root, path)["cells"]
    assert [c["source"] for c in saved] == [person, "base = 10", "total"]
    assert [(run_of(c) or {}).get("by") for c in saved] == ["person", "agent", "agent"]
    assert [(run_of(c) or {}).get("seq") for c in saved] == [2, 1, 3]


def test_the_extension_imports_no_collaboration_package_until_a_room_is_found() -> None:
    # Without jupyter-collaboration installed the extension must load and run as before.
    import subprocess
    import sys

    code = (
        "import sys, jupyter_exec.server.app, jupyter_exec.server.live\n"
        "names = ('pycrdt', 'jupyter_ydoc', 'jupyter_server_ydoc')\n"
        "loaded = [m for m in names if m in sys.modules]\n"
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
