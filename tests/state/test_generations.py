"""The namespace saved after every cell (``save_state``): real local kernels killed with
SIGKILL after a cell, during one and during a save; the next cells see every completed
cell's names, and no generation on disk is ever half written."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec import AsyncSession, InvalidArgument
from jupyter_exec.options import SessionOptions
from jupyter_exec.state.generations import read_manifest, signed_on_disk
from tests.conftest import read_valid_notebook
from tests.generation_helpers import (
    DEADLINE,
    flush,
    in_kernel,
    kernel_pid,
    kill_kernel,
    process_gone,
    state_dir,
    value,
)


def generation_files(session: AsyncSession) -> list[str]:
    return sorted(p.name for p in state_dir(session).glob("gen-*.json"))


async def test_state_is_saved_by_default_and_off_with_save_state_false(sessions: Any) -> None:
    on = await sessions(name="on")
    await on.execute("a = 1")
    assert [g.cells for g in await flush(on)] == [1]
    off = await sessions(name="off", save_state=False)
    await off.execute("a = 1")
    assert not state_dir(off).exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"save_state": "yes"}, "save_state must be True or False"),
        ({"state_budget_mb": 0}, "state_budget_mb must be at least 1"),
        ({"state_budget_mb": 1.5}, "state_budget_mb must be a whole number"),
    ],
)
def test_bad_state_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        SessionOptions(**options)


async def test_kill_9_after_a_cell_the_next_cells_see_every_completed_cell(
    sessions: Any,
) -> None:
    session = await sessions(name="after")
    await session.execute("mark = 1")
    await session.execute("other = [1, 2]")
    await session.execute("mark = 2")  # signed as it returned (a small change)
    await kill_kernel(session)
    died = await session.execute("mark")
    assert died.status == "died"
    assert died.recovered is not None
    assert {"mark", "other"} <= set(died.recovered.names)
    assert died.recovered.source == "generation 3 of .after_state"  # no cell run again
    assert died.recovered.lost == {}
    assert await value(session, "(mark, other)") == (2, [1, 2])
    nb = read_valid_notebook(session.notebook_path)  # type: ignore[arg-type]
    assert nb.metadata["jupyter_exec"]["state_folder"] == ".after_state"
    assert nb.cells[3].metadata["jupyter_exec"]["recovered"]["names"]


async def test_a_cell_that_timed_out_is_not_run_again_when_a_later_cell_kills_the_kernel(
    sessions: Any, work_dir: Path
) -> None:
    """A timed-out cell never completed: run again on the restarted kernel it would take as
    long again (the death was reported after the whole cell's time), and its half-done
    effects are not the last completed cell's state. It is named as not run again."""
    session = await sessions(name="late")
    await session.execute("x = 1")
    slow = await session.execute(
        "import os, time\n"
        "if os.path.exists('started'):\n"
        "    ran_again = True\n"
        "else:\n"
        "    open('started', 'w').close()\n"
        "    time.sleep(600)\n",
        timeout=1,
    )
    assert slow.status == "timeout"
    assert (work_dir / "started").exists()
    died = await session.execute("import os; os._exit(1)")
    assert died.status == "died"
    assert died.recovered is not None
    assert "not run again, never completed: cell 2: timeout" in died.recovered.source
    assert await value(session, "(x, 'ran_again' in globals())") == (1, False)


async def test_a_death_after_a_timeout_is_reported_at_once_with_default_options(
    sessions: Any,
) -> None:
    """The kernel's death is known as soon as the process is gone: no per-cell step (the state
    commit after the timed-out cell, the environment record) waits out the session's own
    timeout for a reply the dead kernel will never send. Once it was reported after 61 s."""
    session = await sessions(name="prompt", timeout=120)  # what a waiting hook would sit out
    await session.execute("x = 1")
    slow = await session.execute("import time; time.sleep(600)", timeout=1)
    assert slow.status == "timeout"
    started = time.monotonic()
    died = await session.execute("import os; os._exit(1)")
    took = time.monotonic() - started
    assert died.status == "died"
    # The bound leaves room for a loaded machine (measured 0.7-0.9 s beside a full test run);
    # the fault it guards against waits for the 120 s timeout.
    assert took < 30, f"the death was reported after {took:.1f} s"
    assert await value(session, "x") == 1


async def test_kill_9_during_a_cell_keeps_the_completed_cells_names(sessions: Any) -> None:
    session = await sessions(name="during")
    await session.execute("kept = 'yes'")
    await session.execute("counter = 41\ncounter += 1")
    died = await session.execute(
        "import os, signal\nhalf = 'done'\nos.kill(os.getpid(), signal.SIGKILL)"
    )
    assert died.status == "died"
    assert await value(session, "(kept, counter)") == ("yes", 42)
    assert await value(session, "'half' in globals()") is False


async def test_kill_9_during_a_save_leaves_the_previous_generation_loadable(
    sessions: Any,
) -> None:
    session = await sessions(name="midsave")
    await session.execute("import numpy as np\nsmall = 7")
    before = await flush(session)
    assert before
    # The kernel's writer stops for good once the temporary file of the next object is
    # written (as if the disk were slow): the kill lands while that file exists.
    await in_kernel(
        session,
        textwrap.dedent(
            """
            import sys, time
            g = sys.modules['_jupyter_exec_generations']
            plain = g._write_file
            def slow(path, parts, atomic=False):
                if '/objects/' in path:
                    head, tail = path.rsplit('/', 1)
                    with open(f'{head}/{g.TMP}{tail}.stuck', 'wb') as f:
                        f.write(b'half')
                    time.sleep(3600)
                plain(path, parts, atomic)
            g._write_file = slow
            """
        ),
    )
    await session.execute("big = np.ones(2_000_000)")
    objects = state_dir(session) / "objects"
    end = time.monotonic() + DEADLINE
    while not any(p.name.endswith(".stuck") for p in objects.iterdir()):
        assert time.monotonic() < end, "the writer never started"
        await asyncio.sleep(0.02)
    await kill_kernel(session)
    for made in signed_on_disk(session.work_dir, session.name):
        read_manifest(session.work_dir, made, 0)  # every signed one is whole
    for path in state_dir(session).glob("gen-*.json"):
        json.loads(path.read_text())  # no manifest is half written
    died = await session.execute("big.sum()")
    assert died.status == "died"
    assert await value(session, "(small, float(big.sum()))") == (7, 2_000_000.0)


async def test_an_unchanged_object_is_never_written_again(sessions: Any) -> None:
    session = await sessions(name="incremental")
    await session.execute("import numpy as np\nbig = np.arange(1_500_000)")  # 12 MB: 3 chunks
    signed = await flush(session)
    manifest = read_manifest(session.work_dir, signed[-1], 0)
    chunks = [c[0] for c in manifest["names"]["big"]["chunks"]]
    assert len(chunks) == 4  # its pickle stream, then its buffer in chunks of 4 MB
    paths = [state_dir(session) / "objects" / c for c in chunks]
    before = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in paths]
    for k in range(3):
        await session.execute(f"x{k} = {k}")
    signed = await flush(session)
    manifest = read_manifest(session.work_dir, signed[-1], 0)
    assert set(manifest["names"]) >= {"big", "x0", "x1", "x2"}
    assert [c[0] for c in manifest["names"]["big"]["chunks"]] == chunks
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in paths] == before
    # Changed in place, in its last chunk: that chunk is stored again, the others are not.
    await session.execute("big[-1] = 5")
    manifest = read_manifest(session.work_dir, (await flush(session))[-1], 0)
    after = [c[0] for c in manifest["names"]["big"]["chunks"]]
    assert after[:-1] == chunks[:-1]
    assert after[-1] != chunks[-1]
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in paths[:-1]] == before[:-1]


async def test_unpicklable_names_are_listed_with_their_reason(sessions: Any) -> None:
    session = await sessions(name="unpicklable")
    await session.execute("import threading\nlock = threading.Lock()\nn = 1")
    await session.execute("m = 2")  # signs the first cell's generation
    await session.execute("k = 3")
    await flush(session)
    await kill_kernel(session)
    died = await session.execute("n")
    assert died.recovered is not None
    assert set(died.recovered.lost) == {"lock"}
    assert "pickle" in died.recovered.lost["lock"]
    assert await value(session, "(n, m, k)") == (1, 2, 3)
    nb = read_valid_notebook(session.notebook_path)  # type: ignore[arg-type]
    assert "lock" in nb.cells[3].metadata["jupyter_exec"]["recovered"]["lost"]


async def test_a_big_array_comes_back_after_kill_9(sessions: Any) -> None:
    session = await sessions(name="big")
    await session.execute(
        "import numpy as np, pandas as pd\n"
        "arr = np.arange(8_000_000, dtype='float64')\n"  # 64 MB
        "df = pd.DataFrame({'a': np.arange(1_000_000), 'b': np.ones(1_000_000)})"
    )
    await session.execute("total = float(arr.sum())")
    await flush(session)
    await kill_kernel(session)
    await session.execute("arr")
    assert await value(
        session, "(float(arr.sum()) == total, int(df.a.sum()), arr.flags.writeable)"
    ) == (
        True,
        499999500000,
        True,
    )


async def test_the_budget_keeps_objects_past_it_out_and_prunes_old_generations(
    sessions: Any,
) -> None:
    session = await sessions(name="budget", state_budget_mb=1)
    await session.execute("import numpy as np\nhuge = np.ones(300_000)\nsmall = 1")
    for k in range(4):
        await session.execute(f"small = {k}")
        await flush(session)
    manifest = read_manifest(session.work_dir, session._state.durable.generations.signed[-1], 0)
    assert "huge" not in manifest["names"]
    assert "budget" in manifest["skipped"]["huge"]
    await session.execute("z = 0")  # prunes below the newest signed generation
    await flush(session)
    assert len(generation_files(session)) <= 3
    used = sum(p.stat().st_size for p in (state_dir(session) / "objects").iterdir())
    assert used <= 1 << 20


HOST = """
import asyncio, sys
from pathlib import Path
from jupyter_exec import AsyncSession
from jupyter_exec.state.generations import signed_on_disk
from tests.generation_helpers import kernel_pid

async def main():
    session = await AsyncSession(sys.argv[1], name="host", timeout=60).start()
    await session.execute("import pathlib\\nruns = pathlib.Path('runs.txt')")
    await session.execute("runs.open('a').write('1')\\nfirst = 1")
    await session.execute("runs.open('a').write('2')\\nsecond = 2")
    await session.execute("runs.open('a').write('3')\\nthird = 3")
    # Idle now: the session signs the last cell's state without a next cell or a close.
    while max((g.cells for g in signed_on_disk(Path(sys.argv[1]), "host")), default=0) < 4:
        await asyncio.sleep(0.02)
    print(kernel_pid(session), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_an_idle_session_killed_with_its_host_resumes_without_running_a_cell_again(
    work_dir: Path,
) -> None:
    work_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen(
        [sys.executable, "-c", HOST, str(work_dir)], stdout=subprocess.PIPE, env=env, text=True
    ) as host:
        try:
            assert host.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(host.stdout.readline), DEADLINE)
            orphan = int(line)
        finally:
            host.kill()  # SIGKILL: the host dies without a word
    os.kill(orphan, signal.SIGKILL)  # the host died; its kernel would linger
    while not process_gone(orphan):
        await asyncio.sleep(0.02)
    assert (work_dir / "runs.txt").read_text() == "123"
    async with AsyncSession.resume(work_dir / "host.ipynb") as session:
        assert await value(session, "(first, second, third)") == (1, 2, 3)
        assert session.resumed == []  # the last cell's state was signed while idle
        assert (work_dir / "runs.txt").read_text() == "123"
        nb = read_valid_notebook(work_dir / "host.ipynb")
        assert nb.metadata["jupyter_exec"]["resumed"][-1]["state_cells"] == 4
        assert kernel_pid(session) != orphan


async def test_resume_after_a_clean_close_runs_no_cell_again(work_dir: Path) -> None:
    async with AsyncSession(work_dir=work_dir, name="clean", timeout=DEADLINE) as session:
        await session.execute("import pathlib\nruns = pathlib.Path('runs.txt')")
        await session.execute("runs.open('a').write('1')\nfirst = 1")
        await session.execute("import numpy as np\narr = np.arange(100_000)")
    async with AsyncSession.resume(work_dir / "clean.ipynb", timeout=DEADLINE) as resumed:
        assert resumed.resumed == []  # the state after the last cell was signed on close
        assert await value(resumed, "(first, int(arr.sum()), runs.name)") == (
            1,
            4999950000,
            "runs.txt",
        )
    assert (work_dir / "runs.txt").read_text() == "1"


async def test_a_cell_that_changes_an_array_right_away_never_changes_the_saved_one(
    sessions: Any,
) -> None:
    session = await sessions(name="inplace")
    await session.execute("import numpy as np\nbig = np.zeros(4_000_000)")  # 32 MB
    await session.execute("big[:] = 1")  # at once: the writer may still be reading it
    first, *_ = [g for g in await flush(session) if g.cells == 1]
    entry = read_manifest(session.work_dir, first, 0)["names"]["big"]
    data = b""
    for address, digest, size in entry["chunks"]:
        chunk = (state_dir(session) / "objects" / address).read_bytes()
        assert (hashlib.sha256(chunk).hexdigest(), len(chunk)) == (digest, size)
        data += chunk
    buffer = data[entry["parts"][0] :]
    assert len(buffer) == 32_000_000
    assert buffer.count(0) == len(buffer)  # zeros, as the first cell left them


async def test_an_idle_session_signs_its_last_cell_so_a_kill_9_runs_nothing_again(
    sessions: Any,
) -> None:
    session = await sessions(name="idle")
    await session.execute("import pathlib\nruns = pathlib.Path('runs.txt')")
    await session.execute("runs.open('a').write('1')\nmark = 1")
    # No next cell and no close: the idle session asks for the state its writer finished.
    while max((g.cells for g in signed_on_disk(session.work_dir, "idle")), default=0) < 2:
        await asyncio.sleep(0.02)
    await kill_kernel(session)
    died = await session.execute("mark")
    assert died.status == "died"
    assert died.recovered is not None
    assert "mark" in died.recovered.names
    assert await value(session, "mark") == 1
    assert (session.work_dir / "runs.txt").read_text() == "1"  # the last cell did not run again
