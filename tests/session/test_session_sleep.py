"""Sleep and wake with real kernels: the kernel process ends, the state comes back on the
next call, and what could not be saved is named to the caller, on sleep and on wake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_exec import AsyncSession, CheckpointError, Session, SessionClosedError
from tests.generation_helpers import kernel_pid, process_gone

DEADLINE = 60.0


async def test_sleep_stops_the_kernel_and_the_next_cell_wakes_it_with_its_state(
    tmp_path: Path,
) -> None:
    async with AsyncSession(work_dir=tmp_path, name="nap", timeout=DEADLINE) as session:
        await session.execute("rows = list(range(100))\ntotal = sum(rows)")
        await session.execute("label = 'before'")
        pid = kernel_pid(session)
        assert await session.sleep() == {}
        assert session.sleeping
        assert process_gone(pid)
        assert session.kernel_id is None
        assert "sleeping" in repr(session)

        woken = await session.execute("import os\n(total, label, os.getpid())")
        assert woken.ok, woken.error
        total, label, new_pid = eval(woken.text)
        assert (total, label) == (4950, "before")
        assert new_pid != pid
        assert not session.sleeping
        assert woken.recovered is not None
        assert woken.recovered.lost == {}
        assert {"rows", "total", "label"} <= set(woken.recovered.names)
        after = await session.execute("label")
        assert after.recovered is None  # said once, on the cell that woke it
        path = session.notebook_path
    assert path is not None
    nb = json.loads(path.read_text())
    codes = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in codes] == [1, 2, 3, 4]  # numbering goes on
    assert codes[2]["metadata"]["jupyter_exec"]["kernel"].startswith("woken from sleep")
    actions = [e["action"] for e in nb["metadata"]["jupyter_exec"]["state"]]
    assert actions == ["sleep", "wake"]


async def test_an_unpicklable_name_is_named_on_sleep_and_on_wake(tmp_path: Path) -> None:
    async with AsyncSession(work_dir=tmp_path, name="locks", timeout=DEADLINE) as session:
        await session.execute("import threading\nlock = threading.Lock()\nkept = 7")
        unsaved = await session.sleep()
        assert set(unsaved) == {"lock"}
        assert "pickle" in unsaved["lock"]
        assert await session.sleep() == unsaved  # asleep already: the same answer
        woken = await session.execute("kept * 6, 'lock' in globals()")
        assert woken.text == "(42, False)"
        assert woken.recovered is not None
        assert set(woken.recovered.lost) == {"lock"}
        assert "lock" not in woken.recovered.names


async def test_a_wake_imports_the_saved_modules_beside_reading_the_state(tmp_path: Path) -> None:
    """The modules the saved state names are imported in a thread while its chunks are
    read; one that must be imported in the main thread still comes back, there."""
    (tmp_path / "aside.py").write_text(
        "import threading\nimported_in = threading.current_thread().name\n"
    )
    (tmp_path / "mainonly.py").write_text(
        "import threading\n"
        "if threading.current_thread() is not threading.main_thread():\n"
        "    raise ImportError('the main thread only')\n"
        "imported_in = threading.current_thread().name\n"
    )
    async with AsyncSession(work_dir=tmp_path, name="mods", timeout=DEADLINE) as session:
        (await session.execute("import aside, mainonly\nkept = list(range(10))")).raise_for_error()
        assert await session.sleep() == {}
        woken = await session.execute("aside.imported_in, mainonly.imported_in, kept[-1]")
    assert woken.recovered is not None
    assert "generation" in woken.recovered.source
    assert woken.text == "('jupyter-exec imports', 'MainThread', 9)"


async def test_a_sleeping_session_closes_without_a_kernel(tmp_path: Path) -> None:
    session = await AsyncSession(work_dir=tmp_path, name="shut", timeout=DEADLINE).start()
    await session.execute("x = 1")
    await session.sleep()
    await session.close()
    assert session.closed
    assert not session.sleeping
    assert session.kernel_id is None
    with pytest.raises(SessionClosedError):
        await session.execute("x")
    assert (tmp_path / "shut.ipynb").is_file()


async def test_a_session_whose_state_cannot_come_back_refuses_to_sleep_and_keeps_running(
    tmp_path: Path,
) -> None:
    async with AsyncSession(
        work_dir=tmp_path, name="awake", timeout=DEADLINE, save_state=False
    ) as session:
        await session.execute("x = 5")
        pid = kernel_pid(session)
        with pytest.raises(CheckpointError, match="save_state is off"):
            await session.sleep()
        assert not session.sleeping
        assert not process_gone(pid)
        assert (await session.execute("x")).text == "5"


async def test_restart_and_checkpoint_wake_a_sleeping_session_too(tmp_path: Path) -> None:
    async with AsyncSession(work_dir=tmp_path, name="calls", timeout=DEADLINE) as session:
        await session.execute("x = 3")
        await session.sleep()
        made = await session.checkpoint("after-sleep")
        assert not session.sleeping
        assert "x" in made.names
        await session.sleep()
        await session.restart()
        assert not session.sleeping
        assert (await session.execute("'x' in globals()")).text == "False"


def test_the_blocking_session_sleeps_and_wakes(tmp_path: Path) -> None:
    with Session(work_dir=tmp_path, name="sync", timeout=DEADLINE) as session:
        session.execute("import threading\nx = 2\nlock = threading.Lock()")
        assert set(session.sleep()) == {"lock"}
        assert session.sleeping
        assert session.execute("x * 21").text == "42"
        assert not session.sleeping
