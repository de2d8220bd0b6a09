"""Forking a live kernel against starting a fresh one and re-running the same cells.

What an agent does today to get a second copy of its state is replay: a new
kernel, then every cell again. A fork (:func:`jupyter_exec.forking.fork_kernel`)
copies the process copy-on-write instead. For namespaces of 10, 100 and 500 MB
(a float array made by the cells, as loading data would) each row gives:

* **time**: fork until the child answers, against kernel start + re-running
  the cells until the last one is done;
* **memory**: what the child costs on its own (its private pages, from
  ``/proc/<pid>/smaps_rollup``, after it ran one cell that touches nothing),
  against the resident memory of the fresh kernel that holds the same data;
* **undo**: a kernel started from a snapshot taken before a cell that
  rewrote the data (:mod:`jupyter_exec.snapshots`), against the same replay;
  and what taking the snapshot cost, in time and, once the cell rewrote every
  page, in memory (the worst case of copy-on-write).

The three are measured alternately in one run. The ``zygote`` case measures the
pool idea: a kernel from a snapshot of one that imported pandas, until its first
result, against a cold start and a warm (already started) kernel importing
pandas, and what each costs in proportional memory (PSS). The ``fork-docker``
case forks Docker kernels inside their container, against a new container.

``python -m benchmarks --only fork,zygote,fork-docker``
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from benchmarks.core import Config, Row, case, median, progress, scratch_dir
from jupyter_exec.forking import fork_kernel
from jupyter_exec.kernel import KernelHandle, kernel_spec_for_python, start_kernel
from jupyter_exec.snapshots import Snapshot, drop, start_from, take_snapshot

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
    from jupyter_exec.backends import docker_kernel_spec

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


_PANDAS = "import pandas as pd\nimport numpy as np"
_FIRST = "int(pd.DataFrame({'x': [1, 2, 3]}).x.sum())"


async def _first_result_from(snap: Snapshot, cwd: Path) -> tuple[float, float]:
    """(seconds until the first result, idle PSS of the kernel) for one kernel from ``snap``."""
    start = time.perf_counter()
    kernel = await start_from(snap, cwd=cwd)
    try:
        await _run(kernel, _FIRST)
        elapsed = time.perf_counter() - start
        return elapsed, _pss(_pid(kernel))
    finally:
        await kernel.shutdown(now=True)


async def _first_result_cold(cwd: Path) -> tuple[float, float, float]:
    """(cold seconds, warm seconds, PSS) for a new kernel: start + import + first result;
    the warm figure leaves out the start (a pooled kernel that was started ahead of time)."""
    start = time.perf_counter()
    kernel = await start_kernel(spec=kernel_spec_for_python(sys.executable), cwd=cwd)
    try:
        started = time.perf_counter()
        await _run(kernel, _PANDAS)
        await _run(kernel, _FIRST)
        done = time.perf_counter()
        return done - start, done - started, _pss(_pid(kernel))
    finally:
        await kernel.shutdown(now=True)


async def _measure_zygote(repeats: int, cwd: Path) -> list[Row]:
    zygote = await start_kernel(spec=kernel_spec_for_python(sys.executable), cwd=cwd)
    ours: list[tuple[float, float]] = []
    fresh: list[tuple[float, float, float]] = []
    try:
        await _run(zygote, _PANDAS)
        snap = await take_snapshot(zygote)
        try:
            for i in range(repeats):
                progress(f"zygote: repeat {i + 1}/{repeats}")
                if i % 2 == 0:
                    ours.append(await _first_result_from(snap, cwd))
                    fresh.append(await _first_result_cold(cwd))
                else:
                    fresh.append(await _first_result_cold(cwd))
                    ours.append(await _first_result_from(snap, cwd))
        finally:
            await drop(snap)
    finally:
        await zygote.shutdown(now=True)
    first = median([o[0] for o in ours])
    return [
        Row(
            "zygote: first result with pandas, vs cold start (median)",
            first,
            median([f[0] for f in fresh]),
            "s",
            f"n={repeats}; ours: a kernel from a snapshot of one that imported pandas, "
            "until its first result; floor: new kernel + import pandas + the same cell",
        ),
        Row(
            "zygote: first result with pandas, vs a warm kernel (median)",
            first,
            median([f[1] for f in fresh]),
            "s",
            "floor: an already started kernel importing pandas, then the same cell",
        ),
        Row(
            "zygote: PSS of a kernel with pandas (median)",
            median([o[1] for o in ours]) / MB,
            median([f[2] for f in fresh]) / MB,
            "MB",
            "proportional set size after the first result; ours shares pages with the zygote",
        ),
    ]


@case("zygote")
def zygote_case(cfg: Config) -> list[Row]:
    """A kernel forked from a pandas-loaded snapshot vs a cold and a warm kernel importing it."""
    with scratch_dir("zygote") as root:
        return asyncio.run(_measure_zygote(2 if cfg.quick else 5, root))
