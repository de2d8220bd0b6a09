"""A host SIGKILLed at random moments of a burst: is a completed long cell ever run again?

* **host-kill**: a host process builds a namespace of N MB (as ``checkpoint``'s cells), then
  runs a burst of small cells around one long cell (5 s), and is SIGKILLed at a moment drawn
  from a seeded generator (after some result, plus a random pause). ``Session.resume`` then
  brings the session back. Two rows: how many of the resumes ran the long cell again although
  its result had been returned (target 0), and the resume's time (median and worst) against
  the floor, a cold session running every cell again (what resuming cost without per-cell
  state).

``python -m benchmarks --only host-kill`` (``JX_BENCH_KILL_MB``, default 1024;
``JX_BENCH_KILL_POINTS``, default 20; ``JX_BENCH_KILL_SEED``)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.checkpoint_cases import _cells
from benchmarks.core import Config, Row, case, median, progress, scratch_dir
from jupyter_exec import AsyncSession

__all__ = ["host_kill_case"]

LONG_SECONDS = 5.0


def _burst(megabytes: int, long_seconds: float) -> tuple[list[str], int]:
    """The cells, and the index of the long one."""
    cells = [
        *_cells(megabytes),
        "import pathlib, time\nruns = pathlib.Path('runs.txt')",
        "a = 1",
        f"runs.open('a').write('L')\ntime.sleep({long_seconds})\nlong_value = 42",
        "b = a + 1",
        "arr[0] = 7.0",
        "c = b + 1",
    ]
    return cells, len(cells) - 4


HOST = """
import asyncio, sys
from jupyter_exec import AsyncSession

async def main():
    session = await AsyncSession(sys.argv[1], name="burst", timeout=1800).start()
    print("kernel", session._kernel.km.provisioner.process.pid, flush=True)
    for index, code in enumerate(CELLS):
        (await session.execute(code)).raise_for_error()
        print("done", index, flush=True)
    await asyncio.sleep(3600)

CELLS = %r
asyncio.run(main())
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ")[-1].startswith("Z")
    return False


def _kill_at(work: Path, cells: list[str], after: int, pause: float) -> set[int]:
    """Run the burst in a host process; SIGKILL it and its kernel ``pause`` s after cell
    ``after``'s result. The cells whose results the host had."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done: set[int] = set()
    kernel = None
    with subprocess.Popen(
        [sys.executable, "-c", HOST % (cells,), str(work)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    ) as host:
        assert host.stdout is not None
        try:
            while after not in done:
                line = host.stdout.readline()
                if not line:
                    raise RuntimeError("the host ended before the kill point")
                word, number = line.split()[:2]
                if word == "kernel":
                    kernel = int(number)
                else:
                    done.add(int(number))
            time.sleep(pause)
        finally:
            host.send_signal(signal.SIGKILL)
            if kernel is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(kernel, signal.SIGKILL)
                while not _gone(kernel):
                    time.sleep(0.02)
        done.update(int(line.split()[1]) for line in host.stdout.read().splitlines())
    return done


async def _resume(work: Path) -> float:
    start = time.perf_counter()
    async with AsyncSession.resume(work / "burst.ipynb", timeout=1800):
        took = time.perf_counter() - start
    return took


async def _cold(cells: list[str], work: Path) -> float:
    start = time.perf_counter()
    async with AsyncSession(work_dir=work, name="cold", timeout=1800, save_state=False) as cold:
        for code in cells:
            (await cold.execute(code)).raise_for_error()
    return time.perf_counter() - start


@case("host-kill")
def host_kill_case(cfg: Config) -> list[Row]:
    """Resumes after a host SIGKILL at random points: the long cell never again, and fast."""
    megabytes = 50 if cfg.quick else int(os.environ.get("JX_BENCH_KILL_MB", "1024"))
    points = 3 if cfg.quick else int(os.environ.get("JX_BENCH_KILL_POINTS", "20"))
    seed = int(os.environ.get("JX_BENCH_KILL_SEED", "33"))
    long_seconds = 1.5 if cfg.quick else LONG_SECONDS
    cells, long_index = _burst(megabytes, long_seconds)
    chance = random.Random(seed)
    resumes: list[float] = []
    again = 0
    completed = 0
    with scratch_dir("host-kill") as root:
        for point in range(points):
            after = chance.randrange(len(cells) - 6, len(cells))
            pause = chance.uniform(0.0, long_seconds + 1.0)
            progress(f"host-kill: {megabytes} MB, point {point + 1}/{points}")
            work = root / f"p{point}"
            work.mkdir()
            done = _kill_at(work, cells, after, pause)
            before = (work / "runs.txt").read_text() if (work / "runs.txt").exists() else ""
            resumes.append(asyncio.run(_resume(work)))
            if long_index in done:
                completed += 1
                again += (work / "runs.txt").read_text() != before
        floor = asyncio.run(_cold(cells, root / "cold"))
    notes = f"{megabytes} MB namespace, a {long_seconds:g} s cell, {points} points, seed {seed}"
    return [
        Row("host SIGKILL: resumes that ran a completed long cell again", again, 0, "runs",
            f"{notes}; the long cell's result had been returned in {completed} of them"),
        Row(f"host SIGKILL: resume of {megabytes} MB (median)", median(resumes), floor, "s",
            f"{notes}; floor: a cold session running every cell again"),
        Row(f"host SIGKILL: resume of {megabytes} MB (worst)", max(resumes), floor, "s", notes),
    ]  # fmt: skip
