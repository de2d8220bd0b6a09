"""Sleep and wake: what a sleeping session's next cell costs, against its floor.

* **sleep-wake**: a session holding N MB (60 % array, 30 % DataFrame, 10 % small dicts, as
  ``checkpoint``) is put to sleep and woken by its next cell, ``repeats`` times: the sleep
  (the last generation flushed, the kernel stopped) and the woken cell (a new kernel, the
  signed generation loaded, the cell) as median and worst, against a cold session running
  the same cells again (what a culled session's next call cost before).

``python -m benchmarks --only sleep-wake`` (``JX_BENCH_SLEEP_MB``, default 400)
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from benchmarks.checkpoint_cases import _cells
from benchmarks.core import Config, Row, case, median, progress, scratch_dir
from jupyter_exec import AsyncSession

__all__ = ["sleep_wake_case"]


async def _measure(megabytes: int, repeats: int, work: Path) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {"sleep": [], "wake": [], "cold": []}
    cells = _cells(megabytes)
    session = AsyncSession(work_dir=work, name="nap", timeout=1800, checkpoint_every=0)
    async with session:
        for code in cells:
            (await session.execute(code)).raise_for_error()
        expected = (await session.execute("check")).text
        for _ in range(repeats):
            start = time.perf_counter()
            await session.sleep()
            found["sleep"].append(time.perf_counter() - start)
            start = time.perf_counter()
            woken = await session.execute("check")
            found["wake"].append(time.perf_counter() - start)
            assert woken.text == expected, woken
            assert woken.recovered is not None
            assert "generation" in woken.recovered.source
    start = time.perf_counter()
    async with AsyncSession(work_dir=work, name="cold", timeout=1800, checkpoint_every=0) as cold:
        for code in cells:
            (await cold.execute(code)).raise_for_error()
        assert (await cold.execute("check")).text == expected
    found["cold"].append(time.perf_counter() - start)
    return found


@case("sleep-wake")
def sleep_wake_case(cfg: Config) -> list[Row]:
    """A sleeping session's next cell against a cold session running its cells again."""
    megabytes = 50 if cfg.quick else int(os.environ.get("JX_BENCH_SLEEP_MB", "400"))
    repeats = 2 if cfg.quick else 5
    with scratch_dir("sleep-wake") as root:
        progress(f"sleep-wake: {megabytes} MB x {repeats}")
        found = asyncio.run(_measure(megabytes, repeats, root))
    notes = f"{megabytes} MB: 60% array, 30% DataFrame, 10% small dicts; n={repeats}"
    cold = found["cold"][0]
    return [
        Row(f"wake of a {megabytes} MB session (median)", median(found["wake"]), cold, "s",
            f"{notes}; ours: the next cell (new kernel + signed generation loaded); "
            "floor: a cold session running the cells again"),
        Row(f"wake of a {megabytes} MB session (worst)", max(found["wake"]), cold, "s", notes),
        Row(f"sleep of a {megabytes} MB session (median)", median(found["sleep"]), None, "s",
            f"{notes}; the last generation flushed and signed, the kernel stopped"),
    ]  # fmt: skip
