"""A host killed at random moments of a burst never loses a completed long cell's state.

Issue 33's promise, tried as a crash would try it: a process runs a burst of cells on a real
local kernel (small cells, a 20 MB array, one cell that runs for over a second) and is
SIGKILLed at a moment drawn from a seeded generator, after some result and a random pause
(so inside a cell, between cells, or while the state writer works). Whatever the moment,
once ``execute`` has returned the long cell's result, ``AsyncSession.resume`` must bring its
state back without running it again (it appends to ``runs.txt`` each time it runs), and
every cell whose result was returned must have its names back.

The moments are random but the assertion holds for each of them, so the test does not
depend on the machine's speed: a slow machine just moves the kill to another point of the
burst. The seed is printed with every failure, so a failing point can be run again alone
(``JX_HOST_KILL_SEED``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from jupyter_exec import AsyncSession
from tests.generation_helpers import DEADLINE, process_gone, value

BURST = [
    "import pathlib, time\nimport numpy as np\nruns = pathlib.Path('runs.txt')",
    "a = 1",
    "big = np.arange(2_500_000, dtype='float64')",  # 20 MB: a write the writer works on
    "b = a + 1",
    "runs.open('a').write('L')\ntime.sleep(1.2)\nlong_value = 42",  # the long cell
    "c = b + 1",
    "big[0] = 7.0",
    "d = c + 1",
]
"""The burst; cell 4 is the long one (it ran >= 1 s, so its state must survive)."""

LONG = 4
CHECKS = {1: ("a", 1), 3: ("b", 2), 4: ("long_value", 42), 5: ("c", 3), 7: ("d", 4)}
"""A name each cell leaves, with its value: back after a resume if its result was returned."""

HOST = (
    f"CELLS = {BURST!r}\n"
    + """
import asyncio, sys
from jupyter_exec import AsyncSession

async def main():
    session = await AsyncSession(sys.argv[1], name="burst", timeout=60).start()
    print("kernel", session._kernel.km.provisioner.process.pid, flush=True)
    for index, code in enumerate(CELLS):
        done = await session.execute(code)
        if not done.ok:
            print("failed", index, done.error, flush=True)
            return
        print("done", index, flush=True)  # the caller has this result: its state must last
    await asyncio.sleep(3600)

asyncio.run(main())
"""
)

POINTS = 5
"""Kill points per run: each costs a host start, a burst and a resume (about 5 s quiet)."""


def _seed() -> int:
    return int(os.environ.get("JX_HOST_KILL_SEED", "20261129"))


async def _kill_at(work_dir: Path, after: int, pause: float) -> set[int]:
    """Run the burst in a host process; SIGKILL it ``pause`` s after cell ``after``'s result
    and its kernel. The cells whose results were returned."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done: set[int] = set()
    kernel: int | None = None
    with subprocess.Popen(
        [sys.executable, "-c", HOST, str(work_dir)], stdout=subprocess.PIPE, env=env, text=True
    ) as host:
        assert host.stdout is not None
        try:
            loop = asyncio.get_running_loop()
            end = loop.time() + DEADLINE
            while after not in done:
                line = await asyncio.wait_for(asyncio.to_thread(host.stdout.readline), DEADLINE)
                assert line, "the host ended before the kill point"
                assert loop.time() < end, "the kill point never came"
                word, number, *_ = line.split()
                assert word != "failed", line
                if word == "kernel":
                    kernel = int(number)
                else:
                    done.add(int(number))
            await asyncio.sleep(pause)
        finally:
            host.send_signal(signal.SIGKILL)
            if kernel is not None:  # the host died; its kernel (holding the pipe) would linger
                with contextlib.suppress(ProcessLookupError):
                    os.kill(kernel, signal.SIGKILL)
                while not process_gone(kernel):
                    await asyncio.sleep(0.02)
        # What the host printed before it died: each "done" is a result its caller had.
        for line in host.stdout.read().splitlines():
            word, number, *_ = line.split()
            if word == "done":
                done.add(int(number))
    return done


async def test_a_host_killed_at_random_points_keeps_every_completed_long_cell(
    tmp_path: Path,
) -> None:
    chance = random.Random(_seed())
    for point in range(POINTS):
        after = chance.randrange(1, len(BURST))
        pause = chance.uniform(0.0, 1.5)
        where = f"seed {_seed()}, point {point}: killed {pause:.2f} s after cell {after}"
        work_dir = tmp_path / f"point-{point}"
        work_dir.mkdir()
        done = await _kill_at(work_dir, after, pause)
        runs = work_dir / "runs.txt"
        ran_before = runs.read_text() if runs.exists() else ""
        async with AsyncSession.resume(work_dir / "burst.ipynb", timeout=DEADLINE) as session:
            if LONG in done:
                assert ran_before == "L", where
                assert (runs.read_text() if runs.exists() else "") == "L", (
                    f"{where}: the long cell's result was returned, and the resume ran it again"
                )
            for index, (name, expected) in CHECKS.items():
                if index in done:
                    assert await value(session, name) == expected, f"{where}: {name} lost"
            if 6 in done:
                assert await value(session, "float(big[0])") == 7.0, where
