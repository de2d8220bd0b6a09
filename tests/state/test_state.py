"""Fork, undo, checkpoint and restore of sessions on real local kernels (real os.fork())."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_exec import (
    AsyncSession,
    Checkpoint,
    ForkError,
    InvalidArgument,
    KernelNotAliveError,
    Session,
    SessionClosedError,
    replay_async,
)
from tests.conftest import read_valid_notebook
from tests.fork_barrier import SIBLINGS_BARRIER

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

DEADLINE = 60.0


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (no /proc entry, or a zombie about to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < end, f"timed out waiting until {what}"
        await asyncio.sleep(0.02)


def kernel_pid(session: AsyncSession) -> int:
    kernel = session._kernel
    assert kernel is not None
    return int(kernel.km.provisioner.process.pid)  # type: ignore[union-attr]


def snapshot_pids(session: AsyncSession) -> list[int]:
    state = session._state
    return [p.snapshot.pid for p in state.points] + [
        point.snapshot.pid for _, point in state.checkpoints.values()
    ]


async def value(session: AsyncSession, name: str) -> Any:
    execution = await session.execute(f"import json as _j; print(_j.dumps({name}))")
    assert execution.ok, execution.error
    return json.loads(execution.stdout)


def undone_flags(path: Path) -> list[tuple[str, bool]]:
    nb = read_valid_notebook(path)
    return [
        (str(c.source), bool(c.metadata.get("jupyter_exec", {}).get("undone")))
        for c in nb.cells
        if c.cell_type == "code"
    ]


@pytest.fixture
async def sessions(work_dir: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await start(**kwargs)``: a started AsyncSession in this test's work dir; all closed
    at the end, and every kernel and snapshot process they had must be gone."""
    made: list[AsyncSession] = []
    pids: set[int] = set()

    async def start(**kwargs: Any) -> AsyncSession:
        kwargs.setdefault("work_dir", work_dir)
        kwargs.setdefault("timeout", DEADLINE)
        session = await AsyncSession(**kwargs).start()
        made.append(session)
        return session

    def track(*more: AsyncSession) -> None:
        made.extend(more)

    start.track = track  # type: ignore[attr-defined]
    start.pids = pids  # type: ignore[attr-defined]
    yield start
    for session in made:
        if session._kernel is not None:
            pids.add(kernel_pid(session))
        pids.update(snapshot_pids(session))
        await session.close()
    for pid in pids:
        await wait_until(lambda pid=pid: process_gone(pid), f"process {pid} is gone")  # type: ignore[misc]


async def test_forks_diverge_while_the_parent_stays_unchanged(sessions: Any) -> None:
    parent = await sessions(name="main")
    await parent.execute("import random\ndata = list(range(1000))\nlabel = 'parent'")
    await parent.execute("total = sum(data)")
    forks = await parent.fork(2)
    sessions.track(*forks)
    assert [f.name for f in forks] == ["main-fork-1", "main-fork-2"]
    assert all(isinstance(f, AsyncSession) for f in forks)
    pids = {kernel_pid(parent), *(kernel_pid(f) for f in forks)}
    assert len(pids) == 3

    await forks[0].execute("data.append(-1)\nlabel = 'one'")
    await forks[1].execute("data.clear()\nlabel = 'two'")
    assert await value(forks[0], "[label, len(data), total]") == ["one", 1001, 499500]
    assert await value(forks[1], "[label, len(data), total]") == ["two", 0, 499500]
    assert await value(parent, "[label, len(data), total]") == ["parent", 1000, 499500]

    # Each fork has its own notebook: the parent's cells, then its own, and where it branched.
    parent_nb = read_valid_notebook(parent.notebook_path)  # type: ignore[arg-type]
    assert len(parent_nb.cells) == 3
    for fork, own in zip(forks, ("data.append(-1)", "data.clear()"), strict=True):
        assert fork.work_dir == parent.work_dir
        assert fork.notebook_path == parent.work_dir / f"{fork.name}.ipynb"
        nb = read_valid_notebook(fork.notebook_path)  # type: ignore[arg-type]
        branched = nb.metadata["jupyter_exec"]["fork"]
        assert branched["parent_session"] == "main"
        assert branched["parent_notebook"] == str(parent.notebook_path)
        assert branched["cell_index"] == 2
        assert nb.metadata["jupyter_exec"]["session"] == fork.name
        sources = [str(c.source) for c in nb.cells]
        assert sources[:2] == [str(c.source) for c in parent_nb.cells[:2]]
        assert sources[2].startswith(own)
        assert nb.cells[2].execution_count == 3  # the kernel's count carries over
    history = parent_nb.metadata["jupyter_exec"]["state"]
    assert history[-1]["action"] == "fork"
    assert history[-1]["forks"] == ["main-fork-1", "main-fork-2"]

    # The parent does not report the forks' notebooks as files its cells wrote, nor they its;
    # a file written in the shared work dir is seen changed by the next cell of each.
    written = await parent.execute("open('made.txt', 'w').write('x')")
    assert [p.name for p in written.files] == ["made.txt"]
    again = await forks[0].execute("1")
    assert [p.name for p in again.files] == ["made.txt"]

    for fork in forks:
        pid = kernel_pid(fork)
        await fork.close()
        await wait_until(lambda pid=pid: process_gone(pid), f"fork {pid} is gone")  # type: ignore[misc]
    assert await value(parent, "label") == "parent"  # closing the forks left the parent alone


async def test_the_forks_of_one_call_start_at_once(sessions: Any, tmp_path: Path) -> None:
    """Each fork, forked and not yet serving, waits until all four siblings exist: forks
    made one after another (each waiting for the one before to answer) never all meet."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    parent = await sessions(name="many")
    (await parent.execute(SIBLINGS_BARRIER.format(folder=str(barrier), count=4))).raise_for_error()
    forks = await parent.fork(4)
    sessions.track(*forks)
    pids = sorted(p.name for p in barrier.iterdir())
    assert sorted(str(kernel_pid(f)) for f in forks) == pids
    for fork in forks:  # every fork was alive while all the others were
        assert await value(fork, "siblings") == pids
    assert await value(parent, "'siblings' in globals()") is False


async def test_fork_names_and_bad_arguments(sessions: Any) -> None:
    parent = await sessions(name="p")
    await parent.execute("x = 1")
    [named] = await parent.fork(name="branch")
    sessions.track(named)
    assert named.name == "branch"
    assert await value(named, "x") == 1
    with pytest.raises(InvalidArgument, match="branch"):
        await parent.fork(name="branch")  # its notebook exists
    pair = await parent.fork(2, name="try")
    sessions.track(*pair)
    assert [f.name for f in pair] == ["try-1", "try-2"]
    for bad in (0, -1, 1000, True, 1.5):
        with pytest.raises(InvalidArgument, match="fork"):
            await parent.fork(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="session name"):
        await parent.fork(name="../x")
    with pytest.raises(InvalidArgument, match="own"):
        await parent.fork(name="p")


async def test_fork_says_which_work_dir_files_the_parent_is_writing(
    sessions: Any, caplog: pytest.LogCaptureFixture
) -> None:
    parent = await sessions(name="w", notebook=False)
    await parent.execute("log = open('log.txt', 'w')\nlog.write('parent\\n'); log.flush()")
    [fork] = await parent.fork()
    sessions.track(fork)
    assert fork.notebook_path is None  # the parent records no notebook: neither does the fork
    assert "log.txt" in caplog.text
    assert "share" in caplog.text
    await parent.execute("log.close()")
    caplog.clear()
    [after] = await parent.fork(name="after-close")
    sessions.track(after)
    assert "log.txt" not in caplog.text


async def test_fork_notebook_lists_the_files_the_parent_is_writing(sessions: Any) -> None:
    parent = await sessions(name="nw")
    await parent.execute("out = open('out.csv', 'a')")
    [fork] = await parent.fork()
    sessions.track(fork)
    nb = read_valid_notebook(fork.notebook_path)  # type: ignore[arg-type]
    assert nb.metadata["jupyter_exec"]["fork"]["shared_open_files"] == ["out.csv"]


async def test_fork_of_a_busy_session_waits_for_the_running_cell(sessions: Any) -> None:
    parent = await sessions(name="busy")
    started = asyncio.Event()

    def seen(_output: Any) -> None:
        started.set()

    cell = asyncio.create_task(
        parent.execute("print('go', flush=True)\nimport time\ntime.sleep(1)\ny = 5", on_output=seen)
    )
    await asyncio.wait_for(started.wait(), DEADLINE)
    [fork] = await parent.fork()
    sessions.track(fork)
    assert cell.done()
    assert (await cell).ok
    assert await value(fork, "y") == 5
    nb = read_valid_notebook(fork.notebook_path)  # type: ignore[arg-type]
    assert nb.metadata["jupyter_exec"]["fork"]["cell_index"] == 1


async def test_fork_errors_closed_dead_and_unforkable(sessions: Any) -> None:
    session = await sessions(name="errs")
    await session.execute(
        "import sys, types\n"
        "torch = types.ModuleType('torch')\n"
        "torch.cuda = types.SimpleNamespace(is_initialized=lambda: True)\n"
        "sys.modules['torch'] = torch"
    )
    with pytest.raises(ForkError, match="CUDA"):
        await session.fork()
    assert await value(session, "1 + 1") == 2  # the refused fork left the parent working
    assert not list(session.work_dir.glob("errs-fork-*"))

    os.kill(kernel_pid(session), signal.SIGKILL)
    await wait_until(lambda: not session.is_alive, "the kernel is dead")
    with pytest.raises(KernelNotAliveError, match="restart"):
        await session.fork()
    await session.close()
    for call in (session.fork(), session.undo(), session.checkpoint(), session.restore("x")):
        with pytest.raises(SessionClosedError):
            await call


async def test_undo_restores_the_state_and_marks_the_cells(sessions: Any) -> None:
    session = await sessions(name="u", undo_steps=3)
    await session.execute("a = [1]")
    await session.execute("a.append(2)")
    await session.execute("a.append(3)")
    before = kernel_pid(session)
    await session.undo(2)
    assert kernel_pid(session) != before
    await wait_until(lambda: process_gone(before), "the replaced kernel is gone")
    assert await value(session, "a") == [1]
    path = session.notebook_path
    assert path is not None
    assert undone_flags(path) == [
        ("a = [1]", False),
        ("a.append(2)", True),
        ("a.append(3)", True),
        ("import json as _j; print(_j.dumps(a))", False),
    ]
    nb = read_valid_notebook(path)
    assert nb.cells[3].metadata["jupyter_exec"]["kernel"].startswith("undo")
    assert nb.metadata["jupyter_exec"]["state"][-1]["action"] == "undo"

    # One undo point is left (before ``a = [1]``): the reading cell just run made another.
    with pytest.raises(InvalidArgument, match="2 step"):
        await session.undo(3)
    await session.undo(2)
    missing = await session.execute("a")
    assert missing.error is not None
    assert missing.error.ename == "NameError"
    for bad in (0, -2, True, "1"):
        with pytest.raises(InvalidArgument, match="whole number"):
            await session.undo(bad)  # type: ignore[arg-type]


async def test_undo_keeps_only_undo_steps_snapshots(sessions: Any) -> None:
    session = await sessions(name="k", undo_steps=2)
    await session.execute("n = 0")
    first = snapshot_pids(session)
    for _ in range(3):
        await session.execute("n += 1")
    assert len(session._state.points) == 2
    assert all(p not in snapshot_pids(session) for p in first)
    await wait_until(lambda: all(process_gone(p) for p in first), "the oldest snapshot is gone")
    with pytest.raises(InvalidArgument, match="2 step"):
        await session.undo(3)
    await session.undo(2)
    assert await value(session, "n") == 1


async def test_undo_is_off_by_default_and_brings_state_back_after_a_kernel_death(
    sessions: Any,
) -> None:
    plain = await sessions(name="plain")
    await plain.execute("x = 1")
    with pytest.raises(InvalidArgument, match="undo_steps"):
        await plain.undo()

    session = await sessions(name="dies", undo_steps=2)
    await session.execute("x = 41")
    await session.execute("x += 1")
    os.kill(kernel_pid(session), signal.SIGKILL)
    await wait_until(lambda: not session.is_alive, "the kernel is dead")
    await session.undo(1)  # the state before the last cell, from its snapshot
    assert await value(session, "x") == 41


async def test_checkpoint_restore_round_trip(sessions: Any) -> None:
    session = await sessions(name="c")
    await session.execute("rows = list(range(10))")
    loaded = await session.checkpoint("loaded")
    assert isinstance(loaded, Checkpoint)
    assert (loaded.name, loaded.cell_index, loaded.session) == ("loaded", 1, "c")
    await session.execute("rows = [r * 2 for r in rows]")
    second = await session.checkpoint()
    assert second.name == "checkpoint-2"
    await session.execute("del rows")
    assert session.checkpoints() == [loaded, second]

    await session.restore(loaded)
    assert await value(session, "rows") == list(range(10))
    await session.execute("rows.clear()")
    await session.restore("loaded")  # a checkpoint restores any number of times
    assert await value(session, "sum(rows)") == 45
    await session.restore(second)
    assert await value(session, "rows[-1]") == 18

    path = session.notebook_path
    assert path is not None
    flags = undone_flags(path)
    assert flags[0] == ("rows = list(range(10))", False)
    assert flags[1] == ("rows = [r * 2 for r in rows]", False)  # in restored "second"'s state
    assert flags[2] == ("del rows", True)
    assert flags[-1][1] is False
    actions = [e["action"] for e in read_valid_notebook(path).metadata["jupyter_exec"]["state"]]
    assert actions == ["checkpoint", "checkpoint", "restore", "restore", "restore"]

    with pytest.raises(InvalidArgument, match=r"no checkpoint 'nope'.*loaded"):
        await session.restore("nope")
    with pytest.raises(InvalidArgument, match="exists"):
        await session.checkpoint("loaded")
    with pytest.raises(InvalidArgument, match="checkpoint name"):
        await session.checkpoint("a/b")
    # Another session's checkpoint is not in this one's memory: it is loaded from its disk copy.
    other = await sessions(name="other")
    await other.execute("mine = 'other'")
    theirs = await other.checkpoint("loaded")
    await session.restore(theirs)
    assert await value(session, "[mine, 'rows' in dir()]") == ["other", False]
    assert all(undone for _, undone in undone_flags(path)[:-1])  # none of this notebook's cells


async def test_replay_and_resume_skip_undone_cells(sessions: Any, work_dir: Path) -> None:
    # No saved state (save_state=False): the resume runs every cell that was not undone.
    session = await sessions(name="r", undo_steps=2, save_state=False)
    await session.execute("v = 'kept'")
    await session.execute("v = 'undone'")
    await session.undo()
    await session.execute("w = v + '!'")
    assert await value(session, "w") == "kept!"
    path = session.notebook_path
    assert path is not None
    await session.close()

    report = await replay_async(path, output=work_dir / "again.ipynb", timeout=DEADLINE)
    statuses = [(r.source.splitlines()[0], r.status) for r in report.cells]
    assert ("v = 'undone'", "skipped") in statuses
    assert report.reproduced, report.summary()

    resumed = AsyncSession.resume(path, timeout=DEADLINE)
    async with resumed:
        assert await value(resumed, "w") == "kept!"
        assert len(resumed.resumed) == 3  # the undone cell was not re-run


def test_blocking_session_forks_undoes_and_restores(work_dir: Path) -> None:
    with Session(work_dir=work_dir, name="sync", undo_steps=1, timeout=DEADLINE) as session:
        session.execute("z = 1")
        forks = session.fork()
        try:
            assert [type(f) for f in forks] == [Session]
            forks[0].execute("z = 2")
            assert forks[0].execute("z").text == "2"
        finally:
            for fork in forks:
                fork.close()
        mark = session.checkpoint("one")
        session.execute("z = 3")
        session.undo()
        assert session.execute("z").text == "1"
        session.execute("z = 4")
        session.restore(mark)
        assert session.execute("z").text == "1"
        assert session.checkpoints() == [mark]
    assert nbformat.validate(nbformat.read(session.notebook_path, 4)) is None  # type: ignore[arg-type]


async def test_a_kernel_that_dies_in_a_cell_comes_back_with_the_state_before_it(
    sessions: Any,
) -> None:
    session = await sessions(name="crash", undo_steps=3)
    await session.execute("a = 1")
    await session.execute("b = [1, 2]")
    died = await session.execute("import os, signal\nc = 3\nos.kill(os.getpid(), signal.SIGKILL)")
    assert died.status == "died"
    assert died.error is not None
    assert "came back from its snapshot (2 name(s): a, b)" in died.error.evalue
    assert await value(session, "[a, b, 'c' in dir()]") == [1, [1, 2], False]
    path = session.notebook_path
    assert path is not None
    nb = read_valid_notebook(path)
    ours = nb.cells[2].metadata["jupyter_exec"]
    assert ours["undone"] is True
    assert ours["recovered"] == {
        "from_cell_index": 2,
        "names": ["a", "b"],
        "source": "snapshot",
        "lost": {},
    }
    assert nb.cells[3].metadata["jupyter_exec"]["kernel"].startswith("recovered")
    assert nb.metadata["jupyter_exec"]["state"][-1]["action"] == "recover"


async def test_kill_9_between_cells_brings_back_the_state_before_the_last_cell(
    sessions: Any,
) -> None:
    # The snapshots alone (with the per-cell state, the last cell's is signed as it returns:
    # test_generations.py): the newest is from before the last cell.
    session = await sessions(name="k9", undo_steps=2, save_state=False)
    await session.execute("x = 1")
    await session.execute("x = 2")
    pid = kernel_pid(session)
    os.kill(pid, signal.SIGKILL)
    await wait_until(lambda: process_gone(pid), "the kernel is gone")
    found = await session.execute("x")
    assert found.status == "died"
    assert found.error is not None
    assert "from before cell 2 came back" in found.error.evalue
    assert await value(session, "x") == 1  # "x = 2" ran after the last snapshot: it is lost
    assert undone_flags(session.notebook_path)[:3] == [  # type: ignore[arg-type]
        ("x = 1", False),
        ("x = 2", True),
        ("x", True),
    ]


async def test_without_snapshots_a_dead_kernel_restarts_empty(sessions: Any) -> None:
    session = await sessions(name="empty", save_state=False)  # nothing saved to disk either
    await session.execute("x = 1")
    died = await session.execute("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert died.status == "died"
    assert died.error is not None
    assert "its state is lost" in died.error.evalue
    gone = await session.execute("x")
    assert gone.error is not None
    assert gone.error.ename == "NameError"


async def test_a_runaway_cell_stopped_by_restart_leaves_the_state_before_it(
    sessions: Any,
) -> None:
    session = await sessions(name="runaway", undo_steps=1, interrupt_grace=0.5)
    await session.execute("kept = 'yes'")
    stuck = await session.execute(
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "kept = 'no'\nwhile True: pass",
        timeout=1,
    )
    assert stuck.status == "timeout"
    assert stuck.error is not None
    assert "came back from its snapshot" in stuck.error.evalue
    assert await value(session, "kept") == "yes"
