"""Scale cases: warm pools, many concurrent sessions, pooled kernel memory, remote kernels.

Each function takes a :class:`~benchmarks.core.Config` and returns rows, with
the raw jupyter_client floor measured in the same run where a floor exists.
``SCALE_CASES`` lists them for registration; ``python -m benchmarks.scale_cases``
runs them alone and prints the table.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil

from benchmarks.core import Config, Row, median, percentile, progress, render_table, scratch_dir
from benchmarks.floor import AsyncFloor
from jupyter_exec import AsyncSession, Execution
from jupyter_exec.manager import AsyncSessionManager

__all__ = [
    "SCALE_CASES",
    "concurrent_throughput",
    "pool_first_result",
    "pooled_kernel_memory",
    "remote_round_trip",
]

MS = 1000.0
MB = 1024.0 * 1024.0


def _check(execution: Execution, what: str) -> Execution:
    if not execution.ok:
        raise RuntimeError(f"{what}: cell failed: {execution.status} {execution.error}")
    return execution


async def _floor_first_result(root: Path) -> float:
    """The floor's time to a first result: start a kernel, wait until ready, run ``1``."""
    start = time.perf_counter()
    floor = await AsyncFloor(root).start()
    await floor.execute("1")
    elapsed = time.perf_counter() - start
    await floor.close()
    return elapsed


# -- 1. time to first result from a warm pool ------------------------------------------------


def pool_first_result(cfg: Config) -> list[Row]:
    """A new session from a warm pool: ``manager.session(name)`` + first ``execute("1")``.

    The pool is full before each acquisition (a pool refills in the
    background; the case measures acquisition, not refill). Floor: a new
    kernel with raw jupyter_client until its first result, which is what a
    session costs without a pool.
    """
    repeats = 6 if cfg.quick else 20

    async def run() -> tuple[list[float], list[float], list[float]]:
        firsts: list[float] = []
        attach: list[float] = []
        floors: list[float] = []
        with scratch_dir("pool") as root:
            async with AsyncSessionManager(root_dir=str(root / "m"), pool_size=2) as manager:
                for i in range(repeats):
                    await manager.wait_for_pools()
                    await asyncio.sleep(0.3)  # let the refill's start settle
                    start = time.perf_counter()
                    session = await manager.session(f"s{i}")
                    got = time.perf_counter()
                    _check(await session.execute("1"), "pool first result")
                    firsts.append(time.perf_counter() - start)
                    attach.append(got - start)
                    if not manager.list()[-1].from_pool:
                        raise RuntimeError("the session did not come from the pool")
                    await manager.close_session(f"s{i}")
                    if i < max(3, repeats // 4):
                        floors.append(await _floor_first_result(root))
                    progress(f"pool: {i + 1}/{repeats}")
        return firsts, attach, floors

    firsts, attach, floors = asyncio.run(run())
    return [
        Row(
            "new session from warm pool, first result (p50)",
            median(firsts) * MS,
            median(floors) * MS,
            "ms",
            f"n={len(firsts)}; p90 {percentile(firsts, 90) * MS:.1f} ms; of which acquire+attach "
            f"p50 {median(attach) * MS:.1f} ms; floor = new kernel until first result "
            f"(n={len(floors)}); target < 50 ms",
            {"ours": firsts, "attach": attach, "floor": floors},
        )
    ]


# -- 2. many sessions at once ----------------------------------------------------------------


async def _drive(run_cell: Callable[[], Awaitable[Any]], cells: int) -> None:
    for _ in range(cells):
        await run_cell()


def concurrent_throughput(cfg: Config) -> list[Row]:
    """20 sessions each running 100 trivial cells at once: aggregate cells per second.

    Ours: 20 sessions of one ``AsyncSessionManager``, notebooks recorded.
    Floor: 20 raw ``AsyncKernelManager`` kernels driven by an nbclient-style
    loop, concurrently on one event loop. Kernels are started before timing.
    """
    sessions, cells = (10, 30) if cfg.quick else (20, 100)
    total = sessions * cells

    async def ours(root: Path, record: bool) -> float:
        async with AsyncSessionManager(root_dir=str(root)) as manager:
            made = []
            for i in range(sessions):  # sequential starts: 2 cores
                made.append(await manager.session(f"c{i}", notebook=None if record else False))
            for s in made:
                _check(await s.execute("1"), "warm-up")
            start = time.perf_counter()
            await asyncio.gather(*(_drive(lambda s=s: s.execute("1"), cells) for s in made))
            return time.perf_counter() - start

    async def floor(root: Path) -> float:
        root.mkdir(parents=True, exist_ok=True)
        floors = []
        for _ in range(sessions):
            floors.append(await AsyncFloor(root).start())
        try:
            for f in floors:
                await f.execute("1")
            start = time.perf_counter()
            await asyncio.gather(*(_drive(lambda f=f: f.execute("1"), cells) for f in floors))
            return time.perf_counter() - start
        finally:
            await asyncio.gather(*(f.close() for f in floors))

    # Rounds alternate the order (floor, ours, bare / bare, ours, floor) so a change in
    # machine load hits all three alike; each variant reports its best round.
    rounds = 1 if cfg.quick else 2
    runs: dict[str, list[float]] = {"floor": [], "ours": [], "bare": []}
    with scratch_dir("concurrent") as root:
        for r in range(rounds):
            order = ["floor", "ours", "bare"] if r % 2 == 0 else ["bare", "ours", "floor"]
            for variant in order:
                progress(f"concurrent: round {r + 1}/{rounds}, {variant}")
                where = root / f"{variant}-{r}"
                if variant == "floor":
                    runs[variant].append(asyncio.run(floor(where)))
                else:
                    runs[variant].append(asyncio.run(ours(where, record=variant == "ours")))
    t_floor, t_ours, t_bare = min(runs["floor"]), min(runs["ours"]), min(runs["bare"])
    return [
        Row(
            f"{sessions} concurrent sessions x {cells} cells, aggregate time per cell",
            t_ours / total * MS,
            t_floor / total * MS,
            "ms",
            f"ours {total / t_ours:.0f} cells/s (notebooks recorded), floor {total / t_floor:.0f} "
            f"cells/s; best of {rounds} alternating round(s); target ratio <= 1.5x",
            {"ours_s": runs["ours"], "floor_s": runs["floor"], "cells": total},
        ),
        Row(
            "  same, no notebook recording",
            t_bare / total * MS,
            t_floor / total * MS,
            "ms",
            f"ours {total / t_bare:.0f} cells/s",
            {"ours_s": runs["bare"], "floor_s": runs["floor"], "cells": total},
        ),
    ]


# -- 3. memory of idle pooled kernels --------------------------------------------------------


def _memory(pid: int) -> tuple[float, float]:
    info = psutil.Process(pid).memory_full_info()
    return float(info.rss), float(getattr(info, "pss", info.uss))


def pooled_kernel_memory(cfg: Config) -> list[Row]:
    """RSS and PSS of each idle pooled kernel process, against an idle floor kernel."""
    size = 2 if cfg.quick else 4

    async def run() -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
        with scratch_dir("memory") as root:
            async with AsyncSessionManager(root_dir=str(root / "m"), pool_size=size) as manager:
                await manager.wait_for_pools()
                await asyncio.sleep(1.0)
                pool = manager.pool()
                assert pool is not None
                ours = [_memory(int(w.km.provisioner.process.pid)) for w in pool._ready]
                floors = [await AsyncFloor(root).start() for _ in range(2)]
                for f in floors:
                    await f.execute("1")
                await asyncio.sleep(1.0)
                theirs = [_memory(int(f.km.provisioner.process.pid)) for f in floors]
                await asyncio.gather(*(f.close() for f in floors))
        return ours, theirs

    ours, theirs = asyncio.run(run())
    return [
        Row(
            "idle pooled kernel, RSS (median)",
            median([r for r, _ in ours]) / MB,
            median([r for r, _ in theirs]) / MB,
            "MB",
            f"n={len(ours)} pooled, {len(theirs)} floor kernels (idle, after one cell)",
        ),
        Row(
            "idle pooled kernel, PSS (median)",
            median([p for _, p in ours]) / MB,
            median([p for _, p in theirs]) / MB,
            "MB",
            "PSS shares libraries among kernels: the real cost of one more pooled kernel",
        ),
    ]


# -- 4. remote kernels -----------------------------------------------------------------------


def remote_round_trip(cfg: Config) -> list[Row]:
    """Warm round trip of ``execute("1")``: remote kernels (via a real server on loopback)
    against a local session and the local raw floor, interleaved in chunks."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from remote_servers import run_server

    chunks, chunk = (4, 10) if cfg.quick else (10, 25)
    rows: list[Row] = []
    for kind in ("jupyter_server", "kernel_gateway"):
        with scratch_dir(f"remote-{kind}") as root, run_server(kind, root / "srv") as server:

            async def run(
                url: str = server.url, token: str = server.token
            ) -> dict[str, list[float]]:
                times: dict[str, list[float]] = {"remote": [], "local": [], "floor": []}
                async with (
                    AsyncSession(
                        work_dir=root / "r", backend="remote", url=url, token=token
                    ) as remote,
                    AsyncSession(work_dir=root / "l") as local,
                ):
                    floor = await AsyncFloor(root).start()
                    runners: dict[str, Callable[[], Awaitable[Any]]] = {
                        "remote": lambda: remote.execute("1"),
                        "local": lambda: local.execute("1"),
                        "floor": lambda: floor.execute("1"),
                    }
                    for run_cell in runners.values():
                        for _ in range(5):
                            await run_cell()
                    for _ in range(chunks):
                        for name, run_cell in runners.items():
                            for _ in range(chunk):
                                start = time.perf_counter()
                                await run_cell()
                                times[name].append(time.perf_counter() - start)
                    await floor.close()
                return times

            progress(f"remote: {kind}")
            times = asyncio.run(run())
            rows.append(
                Row(
                    f"remote warm round trip via {kind} (p50)",
                    median(times["remote"]) * MS,
                    median(times["floor"]) * MS,
                    "ms",
                    f"n={len(times['remote'])}; local jupyter-exec p50 "
                    f"{median(times['local']) * MS:.2f} ms; floor = local raw jupyter_client; "
                    f"remote p90 {percentile(times['remote'], 90) * MS:.1f} ms",
                    {k: v for k, v in times.items()},
                )
            )
    return rows


SCALE_CASES: list[tuple[str, Callable[[Config], list[Row]]]] = [
    ("pool", pool_first_result),
    ("concurrent", concurrent_throughput),
    ("pool-memory", pooled_kernel_memory),
    ("remote", remote_round_trip),
]
"""(name, function) for each case, in table order: register them in the ``local`` group."""


def main() -> None:
    quick = "--quick" in sys.argv
    only = {a for a in sys.argv[1:] if not a.startswith("-")}
    rows: list[Row] = []
    for name, func in SCALE_CASES:
        if only and name not in only:
            continue
        progress(f"case {name}")
        rows.extend(func(Config.make(quick)))
    print(render_table(rows))


if __name__ == "__main__":
    main()
