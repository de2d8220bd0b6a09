"""The namespace saved after every cell (``save_state``): what it adds to a cell, how fast the
kernel's writer stores, and how fast the state comes back, each against its floor.

* **state-cell**: a cell's time (median) that changes nothing, changes 1 MB and changes
  100 MB, with ``save_state`` against the same cells with ``save_state=False``; and the
  writer's rate (MB/s: the bytes of a 100 MB change over the time from the cell's end
  until its generation is written and signed, ``flush``).
* **state-back**: after ``kill -9`` of a session holding N MB (60 % array, 30 % DataFrame,
  10 % small dicts, as ``checkpoint``): the next cell's time, restart and generation loaded
  included, against a new session running the same cells again; and ``Session.resume`` of
  the notebook of a host process SIGKILLed once idle (its notebook and state folder are all
  there is) against the resume that runs every cell again (``save_state=False``); and the
  state folder's size against the namespace's.

* **state-column**: a session holding a DataFrame of ``JX_BENCH_COLUMN_MB`` (1 GB: 4 float
  columns); a cell that replaces one column (``df['d'] = df['a'] * k``), with ``save_state``
  against the same cell with ``save_state=False``; the trivial cell right after it (while
  the forked writer still writes); the bytes the change wrote to the state folder, against
  the column's size. Between two changes the state-on run waits for its writer (``flush``,
  for the bytes written); the floor pauses as long (the same cells, the same gaps): on a
  VM that hands memory freed for a second or more back to its host (free page reporting:
  this machine's), a 1 GB frame's next cell faults its fresh column in again, 0.2 s to
  1.5 s more with or without any state, which a floor run back to back would not pay.

``python -m benchmarks --only state-cell,state-back,state-column``
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.checkpoint_cases import _cells
from benchmarks.core import Config, Row, case, median, progress, scratch_dir
from jupyter_exec import AsyncSession

__all__ = ["state_back_case", "state_cell_case", "state_column_case"]

MB = 1_000_000


async def _session(work: Path, name: str, **options: object) -> AsyncSession:
    options.setdefault("checkpoint_every", 0)
    session = AsyncSession(work_dir=work, name=name, timeout=1800, overwrite=True, **options)  # type: ignore[arg-type]
    return await session.start()


async def _flush(session: AsyncSession) -> None:
    kernel = session._kernel
    assert kernel is not None
    await session._state.durable.generations.flush(session, kernel)


async def _cell_times(work: Path, cells: int, save: bool) -> dict[str, float]:
    session = await _session(work, "cells", save_state=save)
    found: dict[str, float] = {}
    try:
        setup = "import numpy as np\nsrc1 = np.ones(125_000)\nsrc100 = np.ones(12_500_000)"
        (await session.execute(setup)).raise_for_error()
        if save:
            await _flush(session)
        for label, code in (
            ("nothing", "1"),
            ("1MB", "one = src1.copy()"),
            ("100MB", "big = src100.copy()"),
        ):
            times, rates = [], []
            for _ in range(cells if label != "100MB" else max(3, cells // 10)):
                start = time.perf_counter()
                (await session.execute(code)).raise_for_error()
                end = time.perf_counter()
                times.append(end - start)
                if save and label != "nothing":
                    await _flush(session)
                    rates.append((100 if label == "100MB" else 1) / (time.perf_counter() - end))
            found[label] = median(times[1:])
            if rates:
                found[f"rate-{label}"] = median(rates)
    finally:
        await session.close()
    return found


@case("state-cell")
def state_cell_case(cfg: Config) -> list[Row]:
    """What saving the state after every cell adds to a cell, and the writer's rate."""
    cells = 20 if cfg.quick else 60
    with scratch_dir("state-cell") as root:
        runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        for k in range(2):  # alternated, the lower median kept: load on the machine hits both
            for save in (False, True):
                progress(f"state-cell: save_state={save} ({k + 1}/2)")
                runs[save].append(asyncio.run(_cell_times(root / f"{save}{k}", cells, save)))
        floor = {key: min(r[key] for r in runs[False]) for key in runs[False][0]}
        ours = {key: min(r[key] for r in runs[True]) for key in ("nothing", "1MB", "100MB")}
        ours["rate-100MB"] = max(r["rate-100MB"] for r in runs[True])
    notes = f"n={cells}, 2 runs alternated; floor: the same cell with save_state=False"
    return [
        Row("cell that changes nothing (median)", ours["nothing"] * 1000,
            floor["nothing"] * 1000, "ms", notes),
        Row("cell that changes 1 MB (median)", ours["1MB"] * 1000, floor["1MB"] * 1000,
            "ms", notes),
        Row("cell that changes 100 MB (median)", ours["100MB"] * 1000,
            floor["100MB"] * 1000, "ms", f"{notes}; written by a forked child after the reply"),
        Row("background write of a 100 MB change (median)", ours["rate-100MB"], None,
            "MB/s", "the same 100 MB again: hashed in the forked child, no new chunk written, then "
            "signed by the host"),
    ]  # fmt: skip


async def _back(megabytes: int, work: Path) -> dict[str, float]:
    found: dict[str, float] = {}
    cells = _cells(megabytes)
    source = await _session(work, "src")
    try:
        for code in cells:
            (await source.execute(code)).raise_for_error()
        expected = (await source.execute("check")).text
        await _flush(source)
        pid = source._kernel.km.provisioner.process.pid  # type: ignore[union-attr]
        os.kill(pid, signal.SIGKILL)
        while os.path.exists(f"/proc/{pid}") and "Z" not in _state(pid):
            await asyncio.sleep(0.01)
        start = time.perf_counter()
        died = await source.execute("check")
        assert died.status == "died", died
        found["back"] = time.perf_counter() - start
        assert (await source.execute("check")).text == expected
        folder = work / ".src_state"
        found["disk"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / MB
    finally:
        await source.close()

    start = time.perf_counter()
    again = await _session(work, "again")
    try:
        for code in cells:
            (await again.execute(code)).raise_for_error()
        found["rerun"] = time.perf_counter() - start
    finally:
        await again.close()

    notebook = await _host_killed(cells, work)
    start = time.perf_counter()
    async with AsyncSession.resume(notebook, timeout=1800) as resumed:
        found["resume"] = time.perf_counter() - start
        assert resumed.resumed == [], "the idle host had signed its last cell's state"
        assert (await resumed.execute("check")).text == expected
    start = time.perf_counter()
    async with AsyncSession.resume(notebook, timeout=1800, save_state=False) as resumed:
        found["resume-floor"] = time.perf_counter() - start
    return found


HOST = """
import asyncio, json, sys
from pathlib import Path
from jupyter_exec import AsyncSession
from jupyter_exec.state.generations import signed_on_disk

async def main():
    work, cells = Path(sys.argv[1]), json.loads(sys.argv[2])
    session = await AsyncSession(work, name="host", timeout=1800, checkpoint_every=0).start()
    for code in cells:
        (await session.execute(code)).raise_for_error()
    while max((g.cells for g in signed_on_disk(work, "host")), default=0) < len(cells):
        await asyncio.sleep(0.01)  # idle: the session signs its last cell's state itself
    print(session._kernel.km.provisioner.process.pid, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def _host_killed(cells: list[str], work: Path) -> Path:
    """Run ``cells`` in a host process, wait until it is idle with its state signed, then
    SIGKILL it (and its orphaned kernel): what a resume after a host death starts from."""
    folder = work / "host"
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-c", HOST, str(folder), json.dumps(cells)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, text=True) as host:
        try:
            assert host.stdout is not None
            kernel = int(await asyncio.to_thread(host.stdout.readline))
        finally:
            host.kill()
    os.kill(kernel, signal.SIGKILL)
    while os.path.exists(f"/proc/{kernel}") and "Z" not in _state(kernel):
        await asyncio.sleep(0.01)
    return folder / "host.ipynb"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return "X"


@case("state-back")
def state_back_case(cfg: Config) -> list[Row]:
    """The state back after kill -9 and after the host died, against running the cells again."""
    megabytes = 100 if cfg.quick else int(os.environ.get("JX_BENCH_STATE_MB", "1000"))
    with scratch_dir("state-back") as root:
        progress(f"state-back: {megabytes} MB")
        found = asyncio.run(_back(megabytes, root))
    notes = f"{megabytes} MB: 60% array, 30% DataFrame, 10% small dicts"
    return [
        Row(f"state back after kill -9, {megabytes} MB", found["back"], found["rerun"], "s",
            f"{notes}; ours: the next cell (restart + signed generation loaded); "
            "floor: a new session running the cells again"),
        Row(f"resume after the host died, {megabytes} MB", found["resume"],
            found["resume-floor"], "s",
            f"{notes}; the host SIGKILLed once idle; ours: Session.resume of its notebook "
            "and state folder (the newest signed generation + the cells after it); floor: "
            "save_state=False (every cell again)"),
        Row(f"state on disk, {megabytes} MB session", found["disk"], float(megabytes), "MB",
            "floor: the namespace's nominal size"),
    ]  # fmt: skip


def _written_files(folder: Path) -> dict[str, int]:
    """The state folder's files and their sizes (objects and manifests)."""
    found: dict[str, int] = {}
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                found[str(path)] = path.stat().st_size
        except OSError:  # pruned meanwhile
            continue
    return found


async def _column_times(
    work: Path, rows: int, cells: int, save: bool, pauses: list[float]
) -> dict[str, float]:
    """The cells' times; with ``save``, the time each wait for the writer took is added to
    ``pauses``, else each of those pauses is slept in its place (the same gaps)."""
    session = await _session(work, "column", save_state=save)
    change, after, written = [], [], []
    gaps = iter(list(pauses))

    async def settle() -> None:  # (not timed: the child's write, for the bytes it wrote)
        if not save:
            await asyncio.sleep(next(gaps))
            return
        started = time.perf_counter()
        await _flush(session)
        pauses.append(time.perf_counter() - started)

    try:
        setup = (
            "import numpy as np, pandas as pd\n"
            f"df = pd.DataFrame(np.random.rand({rows}, 4), columns=list('abcd'))"
        )
        (await session.execute(setup)).raise_for_error()
        (await session.execute("df['d'] = df['a'] * 0.5")).raise_for_error()  # its own block
        await settle()
        folder = work / ".column_state"
        for k in range(cells):
            before = _written_files(folder) if save else {}
            start = time.perf_counter()
            (await session.execute(f"df['d'] = df['a'] * {k}")).raise_for_error()
            end = time.perf_counter()
            (await session.execute("1 + 1")).raise_for_error()
            after.append(time.perf_counter() - end)
            change.append(end - start)
            await settle()
            if save:
                now = _written_files(folder)
                written.append(sum(v for p, v in now.items() if p not in before) / MB)
    finally:
        await session.close()
    found = {"change": median(change), "after": median(after)}
    if written:
        found["written"] = median(written)
    return found


@case("state-column")
def state_column_case(cfg: Config) -> list[Row]:
    """One column of a big DataFrame changed, with the per-cell state on and off."""
    megabytes = 100 if cfg.quick else int(os.environ.get("JX_BENCH_COLUMN_MB", "1000"))
    rows = megabytes * MB // 32
    cells = 3 if cfg.quick else 5
    with scratch_dir("state-column") as root:
        runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        for k in range(2):  # alternated, the lower median kept: load on the machine hits both
            pauses: list[float] = []  # the state-on run's, then the floor's
            for save in (True, False):
                progress(f"state-column: {megabytes} MB, save_state={save} ({k + 1}/2)")
                found = asyncio.run(_column_times(root / f"{save}{k}", rows, cells, save, pauses))
                runs[save].append(found)
        off = {key: min(r[key] for r in runs[False]) for key in ("change", "after")}
        on = {key: min(r[key] for r in runs[True]) for key in ("change", "after", "written")}
    column = rows * 8 / MB
    notes = (
        f"{megabytes} MB DataFrame ({rows} x 4 float64), df['d'] = df['a'] * k, n={cells}, "
        "2 runs alternated; floor: save_state=False, pausing between changes as long as the "
        "state-on run waited for its writer"
    )
    return [
        Row(f"cell changing one column of {megabytes} MB (median)", on["change"] * 1000,
            off["change"] * 1000, "ms", f"{notes}; target <= 1.1x"),
        Row("the trivial cell right after it (median)", on["after"] * 1000,
            off["after"] * 1000, "ms", "1 + 1 while the forked writer writes; target <= 50 ms"),
        Row("bytes the change wrote to the state (median)", on["written"], column, "MB",
            "new chunks + manifest; floor: the column's size; target <= 2x"),
    ]  # fmt: skip
