"""nbclient beside jupyter-exec and the raw floor: the warm round trip of a stateful cell.

The cell is ``x = x + 1; print(x)``: it changes kernel state and prints, so each
client has a stream to collect and an answer to check. Four clients, each with
its own kernel, all started before any timing and run in rotating chunks:

* the floor: ``BlockingKernelClient.execute_interactive``;
* nbclient: ``NotebookClient.async_execute_cell`` on a new cell per call, the
  loop nbclient runs for every cell of a notebook (outputs kept in memory, no
  file written);
* ``Session.execute`` and ``AsyncSession.execute``, recording (every cell also
  appended to the session notebook on disk, output files tracked).
"""

from __future__ import annotations

import asyncio
import subprocess
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import nbformat

from benchmarks.cases import MS, _async_runner, _interleave, _sync_runner, _Variant
from benchmarks.core import Config, Row, case, percentile, progress, scratch_dir
from benchmarks.floor import BlockingFloor
from jupyter_exec import AsyncSession, Session

CELL = "x = x + 1; print(x)"


class _NbclientLoop:
    """An nbclient kernel and notebook; each call appends one cell and executes it."""

    def __init__(self, cwd: Path) -> None:
        from nbclient import NotebookClient

        self.nb = nbformat.v4.new_notebook()
        self.client = NotebookClient(
            self.nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
        )
        self.cwd = cwd

    async def start(self) -> _NbclientLoop:
        self.client.km = self.client.create_kernel_manager()
        await self.client.async_start_new_kernel(cwd=str(self.cwd), stderr=subprocess.DEVNULL)
        await self.client.async_start_new_kernel_client()
        return self

    async def execute(self, code: str) -> Any:
        cell = nbformat.v4.new_code_cell(code)
        self.nb.cells.append(cell)
        return await self.client.async_execute_cell(cell, len(self.nb.cells) - 1)

    async def close(self) -> None:
        await self.client._async_cleanup_kernel()


def _printed(text: str | None, who: str, want: int) -> None:
    if text is None or text.strip() != str(want):
        raise RuntimeError(f"nbclient case: {who} printed {text!r}, expected {want}")


@case("nbclient")
def nbclient_round_trip(cfg: Config) -> list[Row]:
    """Warm ``x = x + 1; print(x)``: Session and AsyncSession against nbclient and the floor."""
    loop = asyncio.new_event_loop()
    with scratch_dir("nbclient") as root, ExitStack() as stack:
        stack.callback(loop.close)
        progress("nbclient: starting 4 kernels")
        floor = BlockingFloor(root).start()
        stack.callback(floor.close)
        nbc = loop.run_until_complete(_NbclientLoop(root).start())
        stack.callback(lambda: loop.run_until_complete(nbc.close()))
        session = Session(work_dir=root / "sync", timeout=120)
        stack.callback(session.close)
        asession = loop.run_until_complete(
            AsyncSession(work_dir=root / "async", timeout=120).start()
        )
        stack.callback(lambda: loop.run_until_complete(asession.close()))

        floor.execute("x = 0")
        loop.run_until_complete(nbc.execute("x = 0"))
        session.execute("x = 0")
        loop.run_until_complete(asession.execute("x = 0"))
        variants = [
            _Variant("floor execute_interactive", _sync_runner(lambda: floor.execute(CELL)), []),
            _Variant("nbclient", _async_runner(loop, lambda: nbc.execute(CELL)), []),
            _Variant("Session", _sync_runner(lambda: session.execute(CELL)), []),
            _Variant("AsyncSession", _async_runner(loop, lambda: asession.execute(CELL)), []),
        ]
        for variant in variants:
            variant.run(cfg.warmup_cells)
        _interleave(variants, cfg.warm_cells, cfg.warm_chunk, "nbclient")
        total = cfg.warmup_cells + cfg.warm_cells
        _printed(session.execute("print(x)").stdout, "Session", total)
        _printed(
            loop.run_until_complete(asession.execute("print(x)")).stdout, "AsyncSession", total
        )
        _printed(
            loop.run_until_complete(nbc.execute("print(x)")).outputs[0]["text"], "nbclient", total
        )
    times = {v.label: [t * MS for t in v.times] for v in variants}
    floor_ms, nbclient_ms = times["floor execute_interactive"], times["nbclient"]
    n = cfg.warm_cells
    rows = [
        Row(
            "warm x=x+1 p50: nbclient",
            percentile(nbclient_ms, 50),
            percentile(floor_ms, 50),
            "ms",
            f"n={n}; NotebookClient.async_execute_cell, a new cell per call; "
            f"p95 {percentile(nbclient_ms, 95):.2f} ms; floor = execute_interactive",
            {"ours": nbclient_ms, "floor": floor_ms},
        )
    ]
    for label in ("Session", "AsyncSession"):
        ours = times[label]
        for q in (50, 95):
            rows.append(
                Row(
                    f"warm x=x+1 p{q}: {label} (recording)",
                    percentile(ours, q),
                    percentile(floor_ms, q),
                    "ms",
                    f"n={n}; floor = execute_interactive; nbclient p{q} "
                    f"{percentile(nbclient_ms, q):.2f} ms "
                    f"(ours/nbclient {percentile(ours, q) / percentile(nbclient_ms, q):.2f}x)",
                    {"ours": ours} if q == 50 else {},
                )
            )
    return rows
