"""Durable checkpoints against the only other way to get a state back: replay.

For namespaces of 10, 100 and 500 MB (60 % a NumPy array, 30 % a pandas
DataFrame, 10 % plain Python objects: small dicts), made by cells as loading
data would, each row gives:

* **checkpoint**: ``session.checkpoint()`` (the in-memory snapshot and the
  namespace written to disk by the kernel), and the bytes it wrote;
* **restore into a new session**: a fresh session started, then
  ``restore(path)`` (the host checks the manifest and every file's sha256, the
  kernel loads), against a fresh session started, then the same cells again;
* **automatic checkpoints** (``checkpoint-auto``): a small cell's time with the
  default (names tracked, no checkpoint due), with an automatic checkpoint after
  every cell of a 1 MB namespace, against ``checkpoint_every=0``.

Undo's time is the ``fork`` case's. ``python -m benchmarks --only checkpoint,checkpoint-auto``
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from benchmarks.core import Config, Row, case, median, progress, scratch_dir
from jupyter_exec import AsyncSession

__all__ = ["checkpoint_auto_case", "checkpoint_case"]

MB = 1_000_000


def _cells(megabytes: int) -> list[str]:
    floats = megabytes * MB * 6 // 10 // 8
    rows = megabytes * MB * 3 // 10 // 16
    dicts = megabytes * MB // 10 // 270  # a small dict with an int and a str: ~270 bytes
    return [
        "import numpy as np, pandas as pd",
        f"arr = np.random.default_rng(0).random({floats})",
        f"frame = pd.DataFrame({{'x': np.random.default_rng(1).random({rows}), "
        f"'n': np.arange({rows})}})",
        f"plain = [{{'k': i, 'v': str(i)}} for i in range({dicts})]",
        "check = float(arr.sum()) + float(frame.x.sum()) + len(plain)",
    ]


async def _session(work: Path, name: str, **options: object) -> AsyncSession:
    options.setdefault("checkpoint_every", 0)
    session = AsyncSession(work_dir=work, name=name, timeout=900, overwrite=True, **options)  # type: ignore[arg-type]
    return await session.start()


async def _once(megabytes: int, work: Path, k: int) -> dict[str, float]:
    found: dict[str, float] = {}
    source = await _session(work, f"src{k}")
    try:
        for code in _cells(megabytes):
            (await source.execute(code)).raise_for_error()
        expected = (await source.execute("check")).text
        start = time.perf_counter()
        made = await source.checkpoint(f"c{k}")
        found["checkpoint"] = time.perf_counter() - start
        found["size"] = made.size
    finally:
        await source.close()
    assert made.path is not None

    start = time.perf_counter()
    target = await _session(work, f"new{k}")
    try:
        await target.restore(made.path)
        found["restore"] = time.perf_counter() - start
        assert (await target.execute("check")).text == expected
    finally:
        await target.close()

    start = time.perf_counter()
    replay = await _session(work, f"replay{k}")
    try:
        for code in _cells(megabytes):
            (await replay.execute(code)).raise_for_error()
        found["replay"] = time.perf_counter() - start
    finally:
        await replay.close()
    return found


@case("checkpoint")
def checkpoint_case(cfg: Config) -> list[Row]:
    """Checkpoint to disk and restore into a new session (10/100/500 MB) vs start + replay."""
    sizes, repeats = ((10, 100), 2) if cfg.quick else ((10, 100, 500), 3)
    rows: list[Row] = []
    with scratch_dir("checkpoint") as root:
        for megabytes in sizes:
            runs = []
            for k in range(repeats):
                progress(f"checkpoint {megabytes} MB: repeat {k + 1}/{repeats}")
                runs.append(asyncio.run(_once(megabytes, root / f"{megabytes}", k)))
            notes = f"n={repeats}; 60% array, 30% DataFrame, 10% small dicts"
            rows += [
                Row(
                    f"checkpoint {megabytes} MB: snapshot + write (median)",
                    median([r["checkpoint"] for r in runs]),
                    None,
                    "s",
                    f"{notes}; session.checkpoint(): in memory and on disk",
                ),
                Row(
                    f"checkpoint {megabytes} MB: size on disk",
                    median([r["size"] for r in runs]) / MB,
                    float(megabytes),
                    "MB",
                    "floor: the namespace's nominal size",
                ),
                Row(
                    f"restore {megabytes} MB into a new session (median)",
                    median([r["restore"] for r in runs]),
                    median([r["replay"] for r in runs]),
                    "s",
                    f"{notes}; ours: start + restore(path) (sha256 checked); "
                    f"floor: start + the {len(_cells(megabytes))} cells again",
                ),
            ]
    return rows


async def _cell_times(work: Path, cells: int, mark: bool = False, **options: object) -> float:
    session = await _session(work, "auto", **options)
    try:
        (await session.execute("import numpy as np\nbase = np.zeros(125_000)")).raise_for_error()
        if mark:  # from now on each cell's changed names matter, and are reported
            await session.checkpoint("mark")
        times = []
        for i in range(cells):
            start = time.perf_counter()
            (await session.execute(f"x = {i}")).raise_for_error()
            times.append(time.perf_counter() - start)
        return median(times[2:])
    finally:
        await session.close()


@case("checkpoint-auto")
def checkpoint_auto_case(cfg: Config) -> list[Row]:
    """A small cell's time with names tracked and with an automatic checkpoint after it."""
    cells = 30 if cfg.quick else 100
    with scratch_dir("checkpoint-auto") as root:
        progress("checkpoint-auto: floor, tracked, automatic")
        floor = asyncio.run(_cell_times(root / "a", cells))
        tracked = asyncio.run(_cell_times(root / "b", cells, True, checkpoint_every=3600))
        every = asyncio.run(_cell_times(root / "c", cells, checkpoint_every=0.001))
    notes = f"n={cells}; floor: checkpoint_every=0 (nothing installed in the kernel)"
    return [
        Row(
            "cell with its changed names reported (median)",
            tracked * 1000,
            floor * 1000,
            "ms",
            f"{notes}; ours: after a checkpoint(), none due (checkpoint_every=3600)",
        ),
        Row(
            "cell + automatic checkpoint of a 1 MB namespace (median)",
            every * 1000,
            floor * 1000,
            "ms",
            f"{notes}; ours: checkpoint_every=0.001, one after every cell (worst case)",
        ),
    ]


if __name__ == "__main__":
    quick = Config.make(quick="--quick" in sys.argv)
    for row in [*checkpoint_case(quick), *checkpoint_auto_case(quick)]:
        print(f"{row.case:56} ours {row.ours} {row.unit}  floor {row.floor}  {row.notes}")
