"""Many sleeping sessions: what they hold, and many of them waking at once.

* **sleep-many**: an :class:`~jupyter_exec.AsyncSessionManager` opens N sessions (200; 20
  with ``--quick``), ten at a time, each running a cell that leaves a few MB in its
  namespace, and puts each to sleep. Rows: the kernel processes left while all N sleep
  (target 0) with the kernels' summed RSS, against the same sessions awake (measured on the
  last batch, scaled); then 20 of them woken by a cell each, all at once: how many answered
  right (target all) and the wall time until the last one did, against 20 cold sessions
  started at once running the same cells again.

``python -m benchmarks --only sleep-many`` (``JX_BENCH_SLEEPERS``, default 200)
"""

from __future__ import annotations

import asyncio
import os
import time

import psutil

from benchmarks.core import Config, Row, case, progress, scratch_dir
from jupyter_exec import AsyncSessionManager

__all__ = ["sleep_many_case"]

CELL = "import numpy as np\nvalues = np.arange(250_000, dtype='float64')\ntag = {name!r}"
CHECK = "print(tag, float(values.sum()))"
BATCH = 10
WAKES = 20


def _kernels() -> list[psutil.Process]:
    """The kernel processes below this one (what a sleeping session must not hold)."""
    me = psutil.Process(os.getpid())
    found = []
    for child in me.children(recursive=True):
        try:
            if "ipykernel" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def _rss(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue
    return total


async def _measure(sessions: int, root: str) -> dict[str, float]:
    found: dict[str, float] = {}
    expected = f"{float(sum(range(250_000)))}"
    async with AsyncSessionManager(root_dir=root, pools=[]) as manager:
        awake_rss = 0.0
        for start in range(0, sessions, BATCH):
            names = [f"s{i}" for i in range(start, min(start + BATCH, sessions))]
            progress(f"sleep-many: sessions {names[0]}..{names[-1]} of {sessions}")
            opened = await asyncio.gather(*(manager.session(n) for n in names))
            done = await asyncio.gather(
                *(s.execute(CELL.format(name=n)) for s, n in zip(opened, names, strict=True))
            )
            for execution in done:
                execution.raise_for_error()
            awake_rss = _rss(_kernels()) / len(names)  # per kernel, the last batch awake
            await asyncio.gather(*(s.sleep() for s in opened))
        left = _kernels()
        found["kernels_left"] = float(len(left))
        found["asleep_rss"] = _rss(left)
        found["awake_rss"] = awake_rss * sessions
        woken_names = [f"s{i}" for i in range(0, sessions, max(1, sessions // WAKES))][:WAKES]
        progress(f"sleep-many: waking {len(woken_names)} at once")
        started = time.perf_counter()
        answers = await asyncio.gather(
            *(manager.execute(n, CHECK) for n in woken_names), return_exceptions=True
        )
        found["wake_wall"] = time.perf_counter() - started
        found["woken"] = float(len(woken_names))
        found["woke_right"] = float(
            sum(
                1
                for n, a in zip(woken_names, answers, strict=True)
                if not isinstance(a, BaseException) and a.stdout == f"{n} {expected}\n"
            )
        )
    return found


async def _cold(count: int, root: str) -> float:
    """``count`` new sessions at once, each running the cells again: the floor of a wake."""
    async with AsyncSessionManager(root_dir=root, pools=[]) as manager:
        started = time.perf_counter()

        async def one(i: int) -> None:
            name = f"c{i}"
            (await manager.execute(name, CELL.format(name=name))).raise_for_error()
            (await manager.execute(name, CHECK)).raise_for_error()

        await asyncio.gather(*(one(i) for i in range(count)))
        return time.perf_counter() - started


@case("sleep-many")
def sleep_many_case(cfg: Config) -> list[Row]:
    """Sleeping sessions hold no kernel; twenty wake at once, each with its state."""
    sessions = 20 if cfg.quick else int(os.environ.get("JX_BENCH_SLEEPERS", "200"))
    with scratch_dir("sleep-many") as root:
        found = asyncio.run(_measure(sessions, str(root / "m")))
        progress(f"sleep-many: the floor, {int(found['woken'])} cold sessions at once")
        floor = asyncio.run(_cold(int(found["woken"]), str(root / "cold")))
    mb = 1024 * 1024
    woken = int(found["woken"])
    return [
        Row(f"{sessions} sleeping sessions: kernel processes left", found["kernels_left"],
            float(sessions), "processes",
            f"their RSS {found['asleep_rss'] / mb:.0f} MB asleep against about "
            f"{found['awake_rss'] / mb:.0f} MB awake (the last batch's kernels, scaled); "
            "target 0"),
        Row(f"{woken} of {sessions} sleeping sessions woken at once: answered right",
            found["woke_right"], float(woken), "sessions", "each prints its own tag and sum; "
            "target all"),
        Row(f"{woken} concurrent wakes: wall time until the last answer", found["wake_wall"],
            floor, "s", f"floor: {woken} cold sessions at once running the cells again"),
    ]  # fmt: skip
