"""Nothing writes behind the caller's back, and a long cell's state is durable once it returns.

Real local kernels: a work dir removed right after a result (as a test's temporary folder
is) leaves no error and nothing made again; ``flush()`` waits for the state of every cell
so far; a cell that ran long is signed before its result is returned, so a host killed
right after a burst of cells resumes without running it again."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_exec import AsyncSession, Session
from jupyter_exec.state import generations
from jupyter_exec.state.generations import read_manifest, signed_on_disk
from tests.generation_helpers import DEADLINE, process_gone, value


async def test_removing_the_work_dir_right_after_a_result_raises_nothing_and_makes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What an agent framework's tests do with their temporary folder: each time, the state
    of the cell is written before ``execute`` returns, so the folder goes whole (a writer
    still at it made ``rmtree`` fail on a file it had just made) and nothing makes it again."""
    caplog.set_level(logging.INFO, logger="jupyter_exec")
    for attempt in range(20):
        work_dir = tmp_path / f"work-{attempt}"
        session = await AsyncSession(work_dir=work_dir, timeout=DEADLINE).start()
        try:
            await session.execute("a = 1")
            done = await session.execute("b = list(range(1000))\nc = {'k': 'v' * 1000}")
            assert done.ok
            shutil.rmtree(work_dir)  # raises if anything wrote there meanwhile
        finally:
            await session.close()
        assert not work_dir.exists()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_the_next_cell_runs_and_the_log_says_the_state_is_off_once_its_folder_went(
    work_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    session = await AsyncSession(work_dir=work_dir, timeout=DEADLINE, notebook=False).start()
    try:
        await session.execute("a = 1")
        shutil.rmtree(work_dir)
        caplog.set_level(logging.INFO, logger="jupyter_exec")
        after = await session.execute("b = 2\nprint(a + b)")
        assert after.ok
        assert after.stdout == "3\n"
        again = await session.execute("c = 3")
        assert again.ok
    finally:
        await session.close()
    assert not work_dir.exists()  # nothing made it again
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1, said  # said once, not for every cell
    assert "per-cell state is off" in said[0]
    assert "removed" in said[0]


async def test_flush_writes_and_signs_the_state_of_every_cell_so_far(work_dir: Path) -> None:
    async with AsyncSession(work_dir=work_dir, name="flushed", timeout=DEADLINE) as session:
        # 40 MB in a cell that runs in a few ms: written while the caller goes on.
        await session.execute("import numpy as np\nbig = np.ones(5_000_000)")
        await session.execute("small = 1")
        await session.flush()
        newest = signed_on_disk(work_dir, "flushed")[-1]
        assert newest.cells == 2
        names = read_manifest(work_dir, newest, 0)["names"]
        assert {"big", "small", "np"} <= set(names)
        for address, _sha256, _size in names["big"]["chunks"]:
            assert (work_dir / ".flushed_state" / "objects" / address).is_file()
        await session.flush()  # nothing new: returns
        assert signed_on_disk(work_dir, "flushed")[-1] == newest


def test_the_blocking_session_flushes_too(work_dir: Path) -> None:
    with Session(work_dir=work_dir, name="blocking", timeout=DEADLINE) as session:
        session.execute("x = 1")
        session.execute("y = 2")
        session.flush()
        assert signed_on_disk(work_dir, "blocking")[-1].cells == 2


async def test_flush_returns_at_once_when_the_state_is_off(work_dir: Path) -> None:
    async with AsyncSession(work_dir=work_dir, save_state=False, timeout=DEADLINE) as session:
        await session.execute("x = 1")
        await session.flush()
        assert not list(work_dir.glob(".*_state"))


async def test_a_cell_that_ran_long_is_signed_before_its_result_returns(work_dir: Path) -> None:
    async with AsyncSession(work_dir=work_dir, name="long", timeout=DEADLINE) as session:
        await session.execute("import time")
        for cells in (2, 3):  # also right after another cell (no signature due by time)
            # (past SIGN_NOW_ALWAYS: signed first however slow the machine's writes are)
            done = await session.execute(f"time.sleep(0.25)\nv{cells} = {cells}")
            assert done.ok
            # No flush, no idle time: on disk as the result comes back.
            newest = signed_on_disk(work_dir, "long")[-1]
            assert newest.cells == cells
            assert f"v{cells}" in read_manifest(work_dir, newest, 0)["names"]


async def test_a_burst_of_fast_cells_is_signed_while_it_runs_never_after_a_result(
    work_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fast cell does not wait for a signature file: the newest one is written while a
    later cell runs (every tenth of a second), and that cell returns only once it is on
    disk. Each write is made slow here, so one still going after a result would be seen."""
    writing: list[int] = []
    written: list[int] = []
    write = generations._write_quietly

    def slow_write(folder: Path, made: generations.Generation) -> None:
        writing.append(made.cells)
        try:
            time.sleep(0.2)
            write(folder, made)
            written.append(made.cells)
        finally:
            writing.remove(made.cells)

    monkeypatch.setattr(generations, "_write_quietly", slow_write)
    async with AsyncSession(work_dir=work_dir, name="burst", timeout=DEADLINE) as session:
        end = asyncio.get_running_loop().time() + DEADLINE
        cells = 0
        while len(written) < 3:  # signatures written in the burst, not at its end
            done = await session.execute(f"n = {cells}")
            cells += 1
            assert done.ok
            assert not writing, "a signature was still being written after a result"
            assert asyncio.get_running_loop().time() < end, "no signature written in the burst"
        on_disk = signed_on_disk(work_dir, "burst")
        assert on_disk[-1].cells == written[-1]
        assert written == sorted(written)


HOST = """
import asyncio, sys
from jupyter_exec import AsyncSession

async def main():
    session = await AsyncSession(sys.argv[1], name="burst", timeout=60).start()
    await session.execute(
        "import pathlib, time\\nruns = pathlib.Path('runs.txt')\\ngo = pathlib.Path('go')"
    )
    # The long cell: it says it started, then runs until the test's file is there and at
    # least a second has passed; it appends to runs.txt each time it runs.
    await session.execute(
        "runs.open('a').write('L')\\n"
        "started = time.monotonic()\\n"
        "while not go.exists() or time.monotonic() - started < 1.0:\\n"
        "    time.sleep(0.01)\\n"
        "long_value = 42"
    )
    await session.execute("fast = 1")
    pid = session._kernel.km.provisioner.process.pid
    print(pid, flush=True)  # the last result is back: the test kills this process now
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_host_killed_right_after_a_burst_resumes_without_running_its_long_cell_again(
    work_dir: Path,
) -> None:
    work_dir.mkdir()
    runs = work_dir / "runs.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen(
        [sys.executable, "-c", HOST, str(work_dir)], stdout=subprocess.PIPE, env=env, text=True
    ) as host:
        try:
            assert host.stdout is not None
            end = asyncio.get_running_loop().time() + DEADLINE
            while not (runs.exists() and runs.read_text() == "L"):  # the long cell started
                assert asyncio.get_running_loop().time() < end, "the long cell never started"
                await asyncio.sleep(0.02)
            (work_dir / "go").touch()
            line = await asyncio.wait_for(asyncio.to_thread(host.stdout.readline), DEADLINE)
            orphan = int(line)
        finally:
            host.kill()  # SIGKILL right after the last result: no idle time, no close
    os.kill(orphan, signal.SIGKILL)  # the host died; its kernel would linger
    while not process_gone(orphan):
        await asyncio.sleep(0.02)
    assert runs.read_text() == "L"
    async with AsyncSession.resume(work_dir / "burst.ipynb", timeout=DEADLINE) as session:
        assert await value(session, "(long_value, fast)") == (42, 1)
        assert runs.read_text() == "L"  # the long cell was not run again
        assert session.resumed_cells in ([], [3])  # at most the fast cell after it


async def test_a_fork_writes_its_own_state_folder(
    work_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A fork inherits its parent's writer, not its folder: its session's folder is made
    on its first write (the rule that never makes a removed folder again is per folder)."""
    caplog.set_level(logging.INFO, logger="jupyter_exec")
    async with AsyncSession(work_dir=work_dir, name="parent", timeout=DEADLINE) as parent:
        await parent.execute("a = 1")
        [child] = await parent.fork(name="child")
        try:
            assert (await child.execute("b = a + 1")).ok
            await child.flush()
            newest = signed_on_disk(work_dir, "child")[-1]
            assert {"a", "b"} <= set(read_manifest(work_dir, newest, 0)["names"])
        finally:
            await child.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
