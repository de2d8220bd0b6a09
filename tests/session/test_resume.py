"""Resume: rebuild a session's kernel state from its notebook and keep recording into it.

One module-scoped recording (five cells, one of them an error) is copied
for each test, so every test resumes its own notebook on its own kernel.
The last three pin fixes of bugs found in ``AsyncSession.resume``: a bad
notebook starts no kernel, old notebooks get cell ids, and ``until`` keeps the
record consistent (the full record kept as a backup).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_exec import AsyncSession, NotebookError, Session
from jupyter_exec.notebook.replay import replay

CELLS = [
    "x = 10",
    "x += 5\nx",
    "y = x * 2\nprint(y)",
    "1 / 0",
    "from IPython.display import HTML\nHTML('<b>hi</b>')",
]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("recording")
    # save_state=False: these tests hold the resume that runs every recorded cell again
    # (tests/state/test_generations.py holds the one that starts from the saved state).
    with Session(work_dir=root, name="analysis", timeout=60, save_state=False) as session:
        for code in CELLS:
            session.execute(code)
    return root / "analysis.ipynb"


@pytest.fixture
def notebook(recording: Path, tmp_path: Path) -> Path:
    """A private copy of the recording (notebook and its files folder)."""
    shutil.copytree(recording.parent, tmp_path / "copy")
    return tmp_path / "copy" / recording.name


def _counts(path: Path) -> list[Any]:
    return [c["execution_count"] for c in json.loads(path.read_text())["cells"]]


def test_resume_continues_state_numbering_and_recording(notebook: Path, read_notebook: Any) -> None:
    with Session.resume(notebook, timeout=60) as session:
        assert [e.status for e in session.resumed] == ["ok", "ok", "ok", "error", "ok"]
        assert session.work_dir == notebook.parent
        assert session.name == "analysis"
        execution = session.execute("x, y")
    assert execution.text == "(15, 30)"
    assert execution.execution_count == 6
    assert execution.cell_index == 5
    nb = read_notebook(notebook)
    assert [c.execution_count for c in nb.cells] == [1, 2, 3, 4, 5, 6]
    assert nb.cells[5].metadata.jupyter_exec.kernel.startswith("resumed")
    (entry,) = nb.metadata.jupyter_exec.resumed
    assert entry.cells_rerun == 5
    assert entry.failed == [4]
    # The resumed record is itself reproducible: replay agrees cell for cell.
    report = replay(notebook, timeout=60)
    assert report.reproduced, report.to_markdown()


def test_resume_until_rebuilds_a_prefix(notebook: Path) -> None:
    with Session.resume(notebook, until=2, timeout=60) as session:
        assert len(session.resumed) == 2
        assert session.execute("x").text == "15"
        assert session.execute("'y' in globals()").text == "False"


async def test_async_resume_twice_keeps_history_and_files(notebook: Path) -> None:
    async with AsyncSession.resume(notebook, timeout=60, save_state=False) as session:
        await session.execute("z = x + 1")
    async with AsyncSession.resume(notebook, timeout=60, save_state=False) as session:
        assert len(session.resumed) == 6
        execution = await session.execute("HTML(f'<i>{z}</i>')")
    assert execution.text == "<IPython.core.display.HTML object>"
    assert execution.files
    assert all(p.parent == notebook.parent / "analysis_files" for p in execution.files)
    nb = nbformat.read(notebook, as_version=4)
    assert len(nb.metadata.jupyter_exec.resumed) == 2
    assert [c.execution_count for c in nb.cells] == [1, 2, 3, 4, 5, 6, 7]


def test_resume_needs_an_existing_notebook(tmp_path: Path) -> None:
    with pytest.raises(NotebookError, match="no notebook at"):
        Session.resume(tmp_path / "missing.ipynb")


def _kernel_children() -> set[int]:
    """Live ipykernel processes started by this (test) process."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[1]) == os.getpid() and b"ipykernel" in cmdline:
            found.add(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_unreadable_notebook_starts_no_kernel(tmp_path: Path) -> None:
    path = tmp_path / "broken.ipynb"
    path.write_text("{not json")
    before = _kernel_children()
    with pytest.raises(NotebookError, match="not valid JSON"):
        Session.resume(path)
    time.sleep(0.2)
    leaked = _kernel_children() - before
    for pid in leaked:  # started by this test: stop them, then report
        os.kill(pid, signal.SIGKILL)
    assert not leaked


def test_resumed_notebook_without_ids_gets_ids(tmp_path: Path) -> None:
    path = tmp_path / "lab.ipynb"
    cell = {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": []}
    path.write_text(
        json.dumps(
            {
                "cells": [{**cell, "source": ["a = 1"]}],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 4,
            }
        )
    )
    with Session.resume(path, timeout=60) as session:
        session.execute("a")
    cells = json.loads(path.read_text())["cells"]
    assert all("id" in c for c in cells)


def test_resume_until_keeps_the_record_consistent(notebook: Path) -> None:
    with Session.resume(notebook, until=2, timeout=60) as session:
        session.execute("x")
    counts = [n for n in _counts(notebook) if n is not None]
    assert counts == sorted(set(counts))


def test_resume_until_keeps_a_backup_of_the_full_record(notebook: Path) -> None:
    before = notebook.read_text()
    with Session.resume(notebook, until=1, timeout=60) as session:
        session.execute("1 + 1")
    backups = list(notebook.parent.glob(f"{notebook.stem}.before-resume-*.ipynb"))
    assert len(backups) == 1
    assert backups[0].read_text() == before
    resumed = json.loads(notebook.read_text())["metadata"]["jupyter_exec"]["resumed"][-1]
    assert resumed["backup"] == backups[0].name
    assert resumed["dropped_cells"] > 0


def _ran(count: int, source: str, by: str) -> Any:
    cell = nbformat.v4.new_code_cell(source, execution_count=count)
    cell.metadata["jupyter_exec"] = {"run": {"seq": count, "by": by}}
    return cell


def _shared(tmp_path: Path) -> Path:
    """A notebook where a person's cell placed at the top ran last (after two agent cells)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _ran(3, "total = base + step", "person"),
        nbformat.v4.new_markdown_cell("notes"),
        _ran(1, "base = 10", "agent"),
        _ran(2, "step = 2", "agent"),
    ]
    notebook = tmp_path / "shared.ipynb"
    nbformat.write(nb, notebook)
    return notebook


def test_resume_follows_the_recorded_run_order(tmp_path: Path, read_notebook: Any) -> None:
    # A person's cell placed at the top ran last: resuming top to bottom would fail on it.
    notebook = _shared(tmp_path)
    with Session.resume(notebook, timeout=60) as session:
        assert [e.code for e in session.resumed] == ["base = 10", "step = 2", "total = base + step"]
        assert all(e.ok for e in session.resumed)
        assert session.execute("total").text == "12"
    cells = read_notebook(notebook).cells
    assert cells[-1].metadata.jupyter_exec.run.seq == 4  # numbering goes on after the record's
    assert cells[-1].metadata.jupyter_exec.run.by == "agent"


def test_resume_until_in_run_order_keeps_what_ran(tmp_path: Path, read_notebook: Any) -> None:
    notebook = _shared(tmp_path)
    with Session.resume(notebook, until=2, timeout=60) as session:
        assert [e.code for e in session.resumed] == ["base = 10", "step = 2"]
    kept = [c.source for c in read_notebook(notebook).cells]
    assert kept == ["notes", "base = 10", "step = 2"]


def test_cells_stopped_before_their_end_are_not_run_again(tmp_path: Path) -> None:
    """A cell that timed out, or whose kernel died under it, is not re-run by a resume:
    the re-run would wait out the same sleep or kill the new kernel (an MCP server
    restarted under a task re-ran its five-minute cell this way)."""
    runs = tmp_path / "runs"
    with Session(work_dir=tmp_path, name="s", timeout=60, save_state=False) as session:
        assert session.execute("a = 1").ok
        slow = "open('runs', 'a').write('x')\nimport time\ntime.sleep(600)"
        assert session.execute(slow, timeout=2).status == "timeout"
        assert session.execute("import os; os._exit(1)").status == "died"
        assert session.execute("b = 2").ok
    before = runs.read_text() if runs.exists() else None
    with Session.resume(tmp_path / "s.ipynb", timeout=60, save_state=False) as session:
        assert session.resumed_cells == [1, 4]
        assert session.execute("print(a, b)").stdout.strip() == "1 2"
    assert (runs.read_text() if runs.exists() else None) == before  # the slow cell never ran
    notebook = json.loads((tmp_path / "s.ipynb").read_text())
    entry = notebook["metadata"]["jupyter_exec"]["resumed"][-1]
    assert entry["not_rerun"] == [2, 3]
    assert entry["cells_rerun"] == 2
    assert "[2, 3] not re-run" in notebook["cells"][-1]["metadata"]["jupyter_exec"]["kernel"]


def test_an_interrupted_cell_of_a_notebook_from_elsewhere_is_not_run_again(
    tmp_path: Path,
) -> None:
    """A notebook Jupyter recorded, with a cell a person interrupted (its output a
    ``KeyboardInterrupt``), resumes without that cell; the others run again."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("a = 1"),
        nbformat.v4.new_code_cell(
            "open('runs', 'a').write('x')\nimport time\ntime.sleep(600)",
            outputs=[nbformat.v4.new_output("error", ename="KeyboardInterrupt", evalue="")],
        ),
        nbformat.v4.new_code_cell("b = a + 1"),
    ]
    path = tmp_path / "elsewhere.ipynb"
    nbformat.write(nb, path)
    with Session.resume(path, timeout=60, save_state=False) as session:
        assert session.resumed_cells == [1, 3]
        assert session.execute("print(b)").stdout.strip() == "2"
    assert not (tmp_path / "runs").exists()
