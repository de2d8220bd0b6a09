"""A large change written by a forked child (``jupyter_exec.inkernel.generations``): real
local kernels. The child's write comes back after ``kill -9`` of the kernel; cells run while
it writes and none of their generations is lost; ``close()`` waits for it; it is reaped (no
zombie); without a fork (memory short) the kernel writes as before, and the Execution of each
cell that paid for it (``state_notes``) and the log (once) say why."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec import AsyncSession
from jupyter_exec.state.generations import read_manifest, signed_on_disk
from tests.generation_helpers import (
    DEADLINE,
    flush,
    in_kernel,
    kernel_pid,
    kill_kernel,
    process_gone,
    value,
)

FORKED = "__import__('sys').modules['_jupyter_exec_generations'].forked"
"""The number of writer children the kernel forked."""
BIG = "np.ones(5_000_000)"
"""40 MB: past ``FORK_FROM``, written by a child."""


def children(pid: int) -> list[tuple[int, str]]:
    """``pid``'s child processes and their states (``Z``: a zombie)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append((int(stat.parent.name), fields[0]))
    return found


HOLD = """
import os, sys, time
g = sys.modules['_jupyter_exec_generations']
plain = g._write_file
def held(path, parts, atomic=False):
    while os.path.exists({marker!r}):  # the test lets the child's write go on
        time.sleep(0.01)
    plain(path, parts, atomic)
g._write_file = held
"""
"""Kernel code: every state file waits while ``marker`` exists (what a forked child
inherits: its write is held, the kernel itself never writes while it is)."""


async def wait_for(predicate: Callable[[], bool], what: str) -> None:
    end = asyncio.get_running_loop().time() + DEADLINE
    while not predicate():
        assert asyncio.get_running_loop().time() < end, what
        await asyncio.sleep(0.02)


async def test_a_large_change_is_written_by_a_child_and_comes_back_after_kill_9(
    sessions: Any,
) -> None:
    session = await sessions(name="child")
    await session.execute(f"import numpy as np\nbig = {BIG}\nbig[7] = 3")
    await session.execute("frame = __import__('pandas').DataFrame({'a': big})")
    signed = await flush(session)
    assert await value(session, FORKED) >= 2
    assert max(g.cells for g in signed) == 2
    names = read_manifest(session.work_dir, signed[-1], 0)["names"]
    assert {"big", "frame", "np"} <= set(names)
    pid = kernel_pid(session)
    assert [c for c in children(pid) if c[1] == "Z"] == []  # every child reaped
    await kill_kernel(session)
    died = await session.execute("big.sum()")
    assert died.status == "died"
    assert died.recovered is not None
    assert {"big", "frame"} <= set(died.recovered.names)
    assert await value(session, "(float(big.sum()), float(frame.a[7]))") == (5_000_002.0, 3.0)


WHERE = "(id({0}), {1}.__array_interface__['data'][0], {1}.nbytes)"
"""Kernel expression: an object's identity, and the address and size of one of its buffers."""


async def test_a_buffer_changed_in_place_is_stored_again(sessions: Any) -> None:
    """Same object, same buffer, same size, other bytes: the next generation holds the new
    bytes (a store that knew its chunks by identity or address would keep the old ones)."""
    session = await sessions(name="inplace")
    await session.execute(
        "import numpy as np, pandas as pd\n"
        "frame = pd.DataFrame({'a': np.ones(2_500_000), 'b': np.ones(2_500_000)})\n"
        "arr = np.ones(5_000_000)"
    )  # 40 MB each: written by a child
    await flush(session)
    column = WHERE.format("frame", "frame['b'].to_numpy()")
    array = WHERE.format("arr", "arr")
    before = (await value(session, column), await value(session, array))
    assert (await session.execute("frame.loc[:, 'b'] = 5.0\narr[::2] = 7.0")).ok
    assert (await value(session, column), await value(session, array)) == before  # in place
    signed = await flush(session)
    assert await value(session, FORKED) >= 2
    assert max(g.cells for g in signed) == 2
    await kill_kernel(session)
    back = await session.execute("1")
    assert back.recovered is not None
    assert {"frame", "arr"} <= set(back.recovered.names)
    sums = "(float(frame['a'].sum()), float(frame['b'].sum()), float(arr.sum()))"
    assert await value(session, sums) == (2_500_000.0, 12_500_000.0, 20_000_000.0)


async def test_cells_run_while_the_child_writes_and_no_generation_is_lost(
    sessions: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "hold"
    marker.touch()
    session = await sessions(name="during")
    await session.execute("import numpy as np")
    await in_kernel(session, HOLD.format(marker=str(marker)))
    await session.execute(f"big = {BIG}")  # the child forks, its write held
    pid = kernel_pid(session)
    await wait_for(lambda: bool(children(pid)), "no child was forked")
    small = await session.execute("small = 2\nsmall + 1")  # answered while the child waits
    assert small.text == "3"
    bigger = await session.execute(f"big2 = {BIG} * 2")  # queued behind the running child
    assert bigger.ok
    assert marker.exists()
    assert not [g for g in signed_on_disk(session.work_dir, "during") if g.cells >= 2]
    marker.unlink()
    signed = await flush(session)
    assert {2, 3, 4} <= {g.cells for g in signed}  # each cell's own generation
    newest = read_manifest(session.work_dir, signed[-1], 0)["names"]
    assert {"big", "small", "big2"} <= set(newest)
    assert await value(session, FORKED) == 2
    await kill_kernel(session)
    await session.execute("1")
    assert await value(session, "(float(big.sum()), small, float(big2.sum()))") == (
        5_000_000.0,
        2,
        10_000_000.0,
    )


async def test_close_waits_for_the_child_and_leaves_nothing_running(
    work_dir: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "hold"
    marker.touch()
    session = await AsyncSession(work_dir=work_dir, name="closing", timeout=DEADLINE).start()
    try:
        await session.execute("import numpy as np")
        await in_kernel(session, HOLD.format(marker=str(marker)))
        await session.execute(f"big = {BIG}")
        pid = kernel_pid(session)
        await wait_for(lambda: bool(children(pid)), "no child was forked")
        [(child, _state)] = children(pid)
        closing = asyncio.ensure_future(session.close())
        await asyncio.sleep(0)
        assert not process_gone(child)  # held: close cannot have waited for it yet
        marker.unlink()
        await closing
    finally:
        await session.close()
    assert process_gone(child)
    assert process_gone(pid)
    newest = signed_on_disk(work_dir, "closing")[-1]
    assert newest.cells == 2  # the child's generation, written and signed before close ended
    assert "big" in read_manifest(work_dir, newest, 0)["names"]
    folder = work_dir / ".closing_state"
    listing = sorted((p.name, p.stat().st_size) for p in folder.rglob("*"))
    await asyncio.sleep(0.2)  # nothing of the session is left to write there
    assert sorted((p.name, p.stat().st_size) for p in folder.rglob("*")) == listing


@pytest.mark.parametrize(
    ("setting", "reason"),
    [("MEMORY_MARGIN = 1 << 60", "memory short"), ("fork_writes = False", "no os.fork")],
    ids=["memory-short", "no-fork"],
)
async def test_without_a_fork_the_kernel_writes_and_the_execution_says_why(
    sessions: Any, caplog: pytest.LogCaptureFixture, setting: str, reason: str
) -> None:
    caplog.set_level(logging.WARNING, logger="jupyter_exec")
    session = await sessions(name="short")
    plain = await session.execute("import numpy as np")
    assert plain.state_notes == ()
    await in_kernel(session, f"import sys\nsys.modules['_jupyter_exec_generations'].{setting}")
    for k in range(2):
        done = await session.execute(f"big{k} = {BIG} * {k}")
        assert done.ok
        [note] = done.state_notes  # each cell that paid for the write says why
        assert "not by a child" in note
        assert reason in note
        assert done.to_dict()["state_notes"] == [note]
    small = await session.execute("small = 1")  # a small change: written as usual, no note
    assert small.state_notes == ()
    signed = await flush(session)
    assert await value(session, FORKED) == 0
    assert {"big0", "big1"} <= set(read_manifest(session.work_dir, signed[-1], 0)["names"])
    said = [r.getMessage() for r in caplog.records if "not by a child" in r.getMessage()]
    assert len(said) == 1, said  # said once, not for every cell
    assert reason in said[0]
    await kill_kernel(session)
    await session.execute("1")
    assert await value(session, "float(big1.sum())") == 5_000_000.0
