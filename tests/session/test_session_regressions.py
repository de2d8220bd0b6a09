"""Regressions of the session engine, each with a real kernel: bugs that were, and stay, fixed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_exec import (
    AsyncSession,
    ExecutionError,
    InvalidArgument,
    KernelStartError,
    Session,
    SessionClosedError,
    SessionManager,
    StorageError,
)
from jupyter_exec.state.session_state import CLOSE_FLUSH

ReadNotebook = Callable[[Path], nbformat.NotebookNode]
MakeSession = Callable[..., Session]

pytestmark = pytest.mark.timeout(180)

LONG_CELL = "print('before', flush=True)\nimport time\nfor _ in range(600):\n    time.sleep(0.1)"


def _plain(cell: Any) -> list[Any]:
    """What a person sees of a cell's outputs: the text/plain of each, in order."""
    return [o.get("data", {}).get("text/plain", o.get("text")) for o in cell.outputs]


def test_close_from_another_thread_records_the_running_cell(
    fresh_session: MakeSession, read_notebook: ReadNotebook
) -> None:
    s = fresh_session()
    printed = threading.Event()
    outcome: dict[str, BaseException] = {}

    def run() -> None:
        try:
            s.execute(LONG_CELL, on_output=lambda event: printed.set())
        except BaseException as exc:
            outcome["error"] = exc

    runner = threading.Thread(target=run)
    runner.start()
    assert printed.wait(60), "the cell never printed"
    s.close()
    runner.join(60)
    assert not runner.is_alive()
    error = outcome["error"]
    assert isinstance(error, SessionClosedError), repr(error)
    execution = error.execution
    assert execution is not None
    assert execution.status == "cancelled"
    assert execution.stdout == "before\n"
    with pytest.raises(SessionClosedError):
        execution.raise_for_error()
    assert s.notebook_path is not None
    cell = read_notebook(s.notebook_path).cells[-1]
    assert cell.source == LONG_CELL
    assert cell.metadata["jupyter_exec"]["status"] == "cancelled"
    assert cell.outputs[0]["text"] == "before\n"
    assert cell.outputs[-1]["ename"] == "SessionClosed"


async def test_close_from_another_task_records_the_running_cell(
    work_dir: Path, read_notebook: ReadNotebook
) -> None:
    s = await AsyncSession(work_dir=work_dir, timeout=120).start()
    printed = asyncio.Event()
    task = asyncio.create_task(s.execute(LONG_CELL, on_output=lambda event: printed.set()))
    await asyncio.wait_for(printed.wait(), 60)
    started = time.monotonic()
    await s.close()
    # The cut-short cell keeps its kernel busy: close asks it nothing (it waited CLOSE_FLUSH
    # for the cell's state, which the cell never made).
    assert time.monotonic() - started < CLOSE_FLUSH
    with pytest.raises(SessionClosedError) as info:
        await task
    assert info.value.execution is not None
    assert info.value.execution.cell_index == 0
    assert s.notebook_path is not None
    assert read_notebook(s.notebook_path).cells[0].metadata["jupyter_exec"]["status"] == "cancelled"


def test_an_earlier_execution_keeps_what_it_showed(session: Session) -> None:
    first = session.execute("h = display('a', display_id=True)")  # an id of its own
    session.execute("h.update('b')")
    assert first.outputs[0]["data"]["text/plain"] == "'a'"
    assert first.results[0].text == "'a'"


UPDATE_CELLS = [
    "from IPython.display import update_display\nh = display('first', display_id='x')",
    "print('between')",
    "display('second', display_id='x')\nupdate_display('third', display_id='x')",
    "update_display('fourth', display_id='x')",
]


def test_display_updates_reach_every_cell_showing_the_id_as_nbclient_does(
    fresh_session: MakeSession, read_notebook: ReadNotebook, tmp_path: Path
) -> None:
    nbclient = pytest.importorskip("nbclient")
    s = fresh_session(name="updates")
    for code in UPDATE_CELLS:
        assert s.execute(code).ok
    assert s.notebook_path is not None
    ours = read_notebook(s.notebook_path)

    theirs = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in UPDATE_CELLS])
    nbclient.NotebookClient(theirs, timeout=120, kernel_name="python3").execute(cwd=str(tmp_path))
    assert [_plain(c) for c in ours.cells] == [_plain(c) for c in theirs.cells]
    assert _plain(ours.cells[0]) == ["'fourth'"]
    assert _plain(ours.cells[2]) == ["'fourth'"]


def test_an_unknown_magic_is_an_error_with_an_error_object(session: Session) -> None:
    r = session.execute("%no_such_magic_here")
    assert r.status == "error"
    assert r.error is not None
    assert r.error.ename == "UsageError"
    assert "no_such_magic_here" in r.error.evalue
    with pytest.raises(ExecutionError):
        r.raise_for_error()


def test_code_with_a_lone_surrogate_is_refused_before_anything_is_sent(session: Session) -> None:
    before = session.execute("1").execution_count
    with pytest.raises(InvalidArgument, match=r"lone surrogate \(U\+D800\) at position 5"):
        session.execute("x = '\ud800'")
    after = session.execute("2").execution_count
    assert before is not None
    assert after == before + 1  # the refused code never reached the kernel


def test_a_failed_start_leaves_no_temporary_work_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(KernelStartError):
        Session(kernel_name="no-such-kernel-anywhere")
    with pytest.raises(InvalidArgument):
        Session(python=tmp_path / "no-such-python")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_start_removes_the_work_dir_it_created(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    with pytest.raises(KernelStartError):
        Session(work_dir=target, kernel_name="no-such-kernel-anywhere")
    assert not (tmp_path / "a").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    with pytest.raises(KernelStartError):
        Session(work_dir=kept, kernel_name="no-such-kernel-anywhere")
    assert kept.is_dir()  # not ours to remove


def test_a_failed_output_write_keeps_the_cell_and_the_session_goes_on(
    fresh_session: MakeSession, read_notebook: ReadNotebook
) -> None:
    s = fresh_session(name="full", max_output_chars=1000)
    blocker = s.work_dir / "full_files"
    blocker.write_text("a file where the outputs folder should be")  # writes there fail
    with pytest.raises(StorageError) as info:
        s.execute("from IPython.display import HTML\nprint('kept'); HTML('<b>x</b>')")
    execution = info.value.execution
    assert execution is not None
    assert execution.ok
    assert execution.stdout == "kept\n"
    assert execution.cell_index == 0
    assert "full_files" in str(info.value)  # the message names what could not be written
    assert s.execute("print('the session goes on')").ok
    assert s.notebook_path is not None
    assert len(read_notebook(s.notebook_path).cells) == 2

    blocker.unlink()  # space is back
    r = s.execute("HTML('<i>fine</i>')")
    assert [p.name for p in r.files] == ["cell-003-1.html"]


def test_session_manager_takes_a_pathlike_root(tmp_path: Path) -> None:
    with SessionManager(root_dir=tmp_path / "root") as manager:
        assert manager.root == tmp_path / "root"
        assert manager.root.is_dir()


def test_ipython_history_stays_in_memory(session: Session) -> None:
    """No SQLite write per cell (the largest cost of a warm round trip), as with nbclient."""
    r = session.execute("get_ipython().history_manager.hist_file")
    assert r.text == "':memory:'"


CTRL_C = """
import os, signal, sys, threading
from jupyter_exec import Session
s = Session(work_dir=sys.argv[1], timeout=120)
printed = threading.Event()
threading.Thread(
    target=lambda: printed.wait(60) and os.kill(os.getpid(), signal.SIGINT), daemon=True
).start()
try:
    s.execute(
        "print('go', flush=True)\\nimport time\\nfor _ in range(3000):\\n    time.sleep(0.1)",
        on_output=lambda event: printed.set(),
    )
except KeyboardInterrupt:
    print("interrupted")
print(s.execute("print('alive')").stdout.strip())
s.close()
"""


def test_ctrl_c_in_the_callers_thread_interrupts_the_cell(tmp_path: Path) -> None:
    """Ctrl-C while Session.execute waits: KeyboardInterrupt here, the cell stopped there."""
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.stdout.split() == ["interrupted", "alive"], done.stderr
