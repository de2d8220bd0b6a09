"""Forking a live kernel against starting a fresh one and re-running the same cells.

What an agent does today to get a second copy of its state is replay: a new
kernel, then every cell again. A fork (:func:`jupyter_exec.state.forking.fork_kernel`)
copies the process copy-on-write instead. For namespaces of 10, 100 and 500 MB
(a float array made by the cells, as loading data would) each row gives:

* **time**: fork until the child answers, against kernel start + re-running
  the cells until the last one is done;
* **memory**: what the child costs on its own (its private pages, from
  ``/proc/<pid>/smaps_rollup``, after it ran one cell that touches nothing),
  against the resident memory of the fresh kernel that holds the same data;
* **undo**: a kernel started from a snapshot taken before a cell that
  rewrote the data (:mod:`jupyter_exec.state.snapshots`), against the same replay;
  and what taking the snapshot cost, in time and, once the cell rewrote every
  page, in memory (the worst case of copy-on-write).

The three are measured alternately in one run. The ``zygote`` case measures the
zygote pool (:mod:`jupyter_exec.manager.zygote`): a new session of a manager
whose kernels are forked ahead of time from a zygote that imported numpy,
pandas and matplotlib, until the result of a pandas cell, against a manager
with a plain warm pool and one with no pool (in turns, same run); and the
proportional memory (PSS) of an idle pooled child against a fresh kernel that
imported the same. The ``fork-docker`` case forks Docker kernels inside their
container, against a new container.

``python -m benchmarks --only fork,zygote,fork-docker``
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.core import Config, Row, case, median, progress, scratch_dir
from jupyter_exec.engine.kernel import KernelHandle, kernel_spec_for_python, start_kernel
from jupyter_exec.manager import AsyncSessionManager
from jupyter_exec.state.forking import fork_kernel
from jupyter_exec.state.snapshots import drop, start_from, take_snapshot

__all__ = ["fork_case", "fork_docker_case", "zygote_case"]

MB = 1_000_000


def _cells(megabytes: int) -> list[str]:
    return [
        "import numpy as np",
        f"data = np.random.default_rng(0).random({megabytes * MB // 8})",
        "total = float(data.sum())",
    ]


async def _run(handle: KernelHandle, code: str) -> None:
    msg_id = handle.kc.execute(code)
    deadline = time.monotonic() + 600
    while True:
        msg = await handle.iopub.get(max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "error":
            raise RuntimeError(f"benchmark cell failed: {msg['content']['evalue']}")
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return


def _memory(pid: int) -> tuple[float, float]:
    """(private bytes, resident bytes) of ``pid``."""
    private = resident = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Private_Clean", "Private_Dirty"):
            private += int(rest.split()[0]) * 1024
        elif key == "Rss":
            resident = int(rest.split()[0]) * 1024
    return float(private), float(resident)


def _pss(pid: int) -> float:
    """Proportional set size of ``pid``: its private pages plus its share of shared ones."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key == "Pss":
            return float(int(rest.split()[0]) * 1024)
    return 0.0


def _pid(handle: KernelHandle) -> int:
    return int(handle.km.provisioner.process.pid)  # type: ignore[union-attr]


async def _fork_once(parent: KernelHandle, cwd: Path) -> tuple[float, float]:
    start = time.perf_counter()
    child = await fork_kernel(parent, cwd=cwd)
    elapsed = time.perf_counter() - start
    try:
        await _run(child, "total")
        private, _ = _memory(_pid(child))
    finally:
        await child.shutdown(now=True)
    return elapsed, private


async def _undo_once(parent: KernelHandle, cwd: Path) -> tuple[float, float, float]:
    """(take seconds, undo seconds, snapshot private bytes after the cell rewrote the data)."""
    start = time.perf_counter()
    snap = await take_snapshot(parent)
    took = time.perf_counter() - start
    try:
        await _run(parent, "data[:] = 0.5")  # the cell to undo: rewrites every page
        await _run(parent, "0")  # the snapshot's copy-on-write has happened by now
        private, _ = _memory(snap.pid)
        start = time.perf_counter()
        undone = await start_from(snap, cwd=cwd)
        undo = time.perf_counter() - start
        try:
            await _run(undone, "assert float(data.sum()) == total")
        finally:
            await undone.shutdown(now=True)
    finally:
        await drop(snap)
    await _run(parent, "data[:] = np.random.default_rng(0).random(len(data))")  # as before
    return took, undo, private


async def _replay_once(megabytes: int, cwd: Path) -> tuple[float, float]:
    start = time.perf_counter()
    fresh = await start_kernel(spec=kernel_spec_for_python(sys.executable), cwd=cwd)
    try:
        for code in _cells(megabytes):
            await _run(fresh, code)
        elapsed = time.perf_counter() - start
        _, resident = _memory(_pid(fresh))
    finally:
        await fresh.shutdown(now=True)
    return elapsed, resident


async def _measure(megabytes: int, repeats: int, cwd: Path) -> list[Row]:
    parent = await start_kernel(spec=kernel_spec_for_python(sys.executable), cwd=cwd)
    forks: list[tuple[float, float]] = []
    undos: list[tuple[float, float, float]] = []
    replays: list[tuple[float, float]] = []
    try:
        for code in _cells(megabytes):
            await _run(parent, code)
        for i in range(repeats):
            progress(f"fork {megabytes} MB: repeat {i + 1}/{repeats}")
            order = ("fork", "undo", "replay") if i % 2 == 0 else ("replay", "undo", "fork")
            for which in order:
                if which == "fork":
                    forks.append(await _fork_once(parent, cwd))
                elif which == "undo":
                    undos.append(await _undo_once(parent, cwd))
                else:
                    replays.append(await _replay_once(megabytes, cwd))
    finally:
        await parent.shutdown(now=True)
    notes = f"n={repeats}; floor = new kernel + the {len(_cells(megabytes))} cells again"
    return [
        Row(
            f"fork {megabytes} MB namespace (median)",
            median([f[0] for f in forks]),
            median([r[0] for r in replays]),
            "s",
            f"{notes}; fork until the child answers kernel_info",
        ),
        Row(
            f"fork {megabytes} MB: memory of the copy (median)",
            median([f[1] for f in forks]) / MB,
            median([r[1] for r in replays]) / MB,
            "MB",
            "ours: the child's private pages after one cell; floor: the fresh kernel's RSS",
        ),
        Row(
            f"undo {megabytes} MB: kernel from a snapshot (median)",
            median([u[1] for u in undos]),
            median([r[0] for r in replays]),
            "s",
            f"{notes}; ours: start_from(snapshot) until the kernel answers",
        ),
        Row(
            f"snapshot {megabytes} MB: take (median)",
            median([u[0] for u in undos]),
            None,
            "s",
            f"n={repeats}; take_snapshot() until the snapshot process exists",
        ),
        Row(
            f"snapshot {megabytes} MB: memory after a cell rewrote the data",
            median([u[2] for u in undos]) / MB,
            None,
            "MB",
            "the snapshot's private pages once the live kernel wrote every page (worst case)",
        ),
    ]


@case("fork")
def fork_case(cfg: Config) -> list[Row]:
    """Fork and undo of a kernel holding 10/100/500 MB vs a fresh kernel re-running the cells."""
    sizes, repeats = ((10, 100), 2) if cfg.quick else ((10, 100, 500), 3)
    rows: list[Row] = []
    with scratch_dir("fork") as root:
        for megabytes in sizes:
            rows.extend(asyncio.run(_measure(megabytes, repeats, root)))
    return rows


if __name__ == "__main__":
    for row in fork_case(Config.make(quick="--quick" in sys.argv)):
        print(
            f"{row.case:44} ours {row.ours:10.3f} {row.unit}  floor {row.floor:10.3f}  {row.notes}"
        )


async def _docker_kernel(cwd: Path) -> KernelHandle:
    from jupyter_exec.session.backends import docker_kernel_spec

    return await start_kernel(spec=docker_kernel_spec({}), cwd=cwd, startup_timeout=300)


async def _docker_replay_once(megabytes: int, cwd: Path) -> float:
    start = time.perf_counter()
    fresh = await _docker_kernel(cwd)
    try:
        for code in _cells(megabytes):
            await _run(fresh, code)
        return time.perf_counter() - start
    finally:
        await fresh.shutdown(now=True)


async def _measure_docker(megabytes: int, repeats: int, cwd: Path) -> list[Row]:
    parent = await _docker_kernel(cwd)
    forks: list[tuple[float, float]] = []
    replays: list[float] = []
    try:
        for code in _cells(megabytes):
            await _run(parent, code)
        for i in range(repeats):
            progress(f"docker fork {megabytes} MB: repeat {i + 1}/{repeats}")
            if i % 2 == 0:
                forks.append(await _fork_once(parent, cwd))
                replays.append(await _docker_replay_once(megabytes, cwd))
            else:
                replays.append(await _docker_replay_once(megabytes, cwd))
                forks.append(await _fork_once(parent, cwd))
    finally:
        await parent.shutdown(now=True)
    return [
        Row(
            f"docker fork {megabytes} MB namespace (median)",
            median([f[0] for f in forks]),
            median(replays),
            "s",
            f"n={repeats}; fork inside the container; floor = new container kernel + the "
            f"{len(_cells(megabytes))} cells again",
        ),
        Row(
            f"docker fork {megabytes} MB: memory of the copy (median)",
            median([f[1] for f in forks]) / MB,
            None,
            "MB",
            "the child's private pages after one cell (counted in the same container's limit)",
        ),
    ]


@case("fork-docker", group="docker")
def fork_docker_case(cfg: Config) -> list[Row]:
    """Fork of a Docker kernel holding 100/500 MB, inside its container, vs a new container."""
    from benchmarks.docker_cases import docker_available, skipped

    if not docker_available():
        return skipped("fork-docker", "no Docker engine answers")
    sizes, repeats = ((100,), 2) if cfg.quick else ((100, 500), 3)
    rows: list[Row] = []
    with scratch_dir("fork-docker") as root:
        for megabytes in sizes:
            work = root / f"work-{megabytes}"
            work.mkdir()
            rows.extend(asyncio.run(_measure_docker(megabytes, repeats, work)))
    return rows


_FIRST_CELL = "import pandas as pd\nint(pd.DataFrame({'x': [1, 2, 3]}).x.sum())"


async def _first_result(manager: AsyncSessionManager, name: str) -> tuple[float, int]:
    """(seconds from asking the manager for a new session to its first result, kernel pid)."""
    start = time.perf_counter()
    session = await manager.session(name)
    execution = await session.execute(_FIRST_CELL)
    elapsed = time.perf_counter() - start
    if execution.text != "6":
        raise RuntimeError(f"benchmark cell failed: {execution.error}")
    pid = int(session._kernel.km.provisioner.process.pid)  # type: ignore[union-attr]
    return elapsed, pid


def _ready_pids(pool: Any) -> list[int]:
    return [int(w.km.provisioner.process.pid) for w in pool._ready]


async def _measure_zygote(repeats: int, root: Path, size: int) -> list[Row]:
    """Zygote pool vs warm pool vs cold start, each a manager of its own, in turns."""
    managers = {
        "zygote": AsyncSessionManager(root_dir=str(root / "zygote"), zygote_size=size),
        "warm": AsyncSessionManager(root_dir=str(root / "warm"), pool_size=size),
        "cold": AsyncSessionManager(root_dir=str(root / "cold"), pools=[]),
    }
    times: dict[str, list[float]] = {name: [] for name in managers}
    pss: dict[str, list[float]] = {"child": [], "zygote": [], "fresh": []}
    private: dict[str, list[float]] = {"child": [], "fresh": []}
    try:
        for manager in managers.values():
            await manager.start()
        for manager in managers.values():
            await manager.wait_for_pools(timeout=600)
        zygote_pool = managers["zygote"].pool()
        assert zygote_pool is not None
        # Idle children: what each costs while it waits (pages shared with the zygote and
        # each other), the zygote's own share, and a fresh kernel that imported the same.
        pss["child"] = [_pss(pid) for pid in _ready_pids(zygote_pool)]
        private["child"] = [_memory(pid)[0] for pid in _ready_pids(zygote_pool)]
        pss["zygote"] = [_pss(zygote_pool.zygote_pid)]  # type: ignore[attr-defined]
        for i in range(repeats):
            progress(f"zygote: repeat {i + 1}/{repeats}")
            order = list(managers) if i % 2 == 0 else list(reversed(managers))
            for which in order:
                manager = managers[which]
                elapsed, pid = await _first_result(manager, f"s{i}")
                times[which].append(elapsed)
                if which == "cold":
                    await managers["cold"].get(f"s{i}").execute("import numpy, matplotlib")
                    pss["fresh"].append(_pss(pid))
                    private["fresh"].append(_memory(pid)[0])
                await manager.close_session(f"s{i}")
                await manager.wait_for_pools(timeout=600)  # the next take finds a full pool
    finally:
        for manager in managers.values():
            await manager.shutdown()
    ms = {name: [t * 1000 for t in values] for name, values in times.items()}
    first = median(ms["zygote"])
    notes = (
        f"n={repeats}; manager.session(new name) until the result of "
        "'import pandas as pd; pd.DataFrame(...).x.sum()'"
    )
    return [
        Row(
            "zygote pool: new session to first result with pandas, vs cold start (median)",
            first,
            median(ms["cold"]),
            "ms",
            f"{notes}; floor: no pool (kernel start + import)",
            {"zygote": ms["zygote"], "cold": ms["cold"]},
        ),
        Row(
            "zygote pool: new session to first result with pandas, vs a warm pool (median)",
            first,
            median(ms["warm"]),
            "ms",
            f"{notes}; floor: a plain warm pool (started kernel, imports pandas)",
            {"warm": ms["warm"]},
        ),
        Row(
            "zygote pool: PSS of an idle pooled child, vs a fresh kernel (median)",
            median(pss["child"]) / MB,
            median(pss["fresh"]) / MB,
            "MB",
            f"{size} idle children of a zygote with numpy, pandas, matplotlib imported; floor: "
            "a fresh kernel that imported the same three",
            {"child": pss["child"], "fresh": pss["fresh"]},
        ),
        Row(
            "zygote pool: private memory of an idle pooled child, vs a fresh kernel (median)",
            median(private["child"]) / MB,
            median(private["fresh"]) / MB,
            "MB",
            "what one more session adds (pages of its own, from smaps_rollup); the rest of a "
            "child is shared with the zygote and the other children",
        ),
        Row(
            "zygote pool: PSS of the zygote itself",
            median(pss["zygote"]) / MB,
            None,
            "MB",
            f"paid once per pool, shared with its {size} children",
        ),
    ]


@case("zygote")
def zygote_case(cfg: Config) -> list[Row]:
    """A session from a zygote pool (pandas imported) vs a warm pool and a cold start."""
    with scratch_dir("zygote") as root:
        repeats, size = (3, 2) if cfg.quick else (7, 4)
        return asyncio.run(_measure_zygote(repeats, root, size))
