"""The local-kernel cases: jupyter-exec against the raw jupyter_client floor.

Each case starts its own kernels, alternates or interleaves jupyter-exec and
floor runs (so drift in machine load hits both alike), and returns rows.
Times are wall clock seen by the caller, ``time.perf_counter``.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from benchmarks.core import (
    Config,
    Row,
    case,
    median,
    percentile,
    progress,
    python_heap_peak,
    scratch_dir,
    timed,
)
from benchmarks.floor import AsyncFloor, BlockingFloor
from jupyter_exec import AsyncSession, Execution, Session
from jupyter_exec.engine.recorder import NotebookRecorder, new_cell_id

MS = 1000.0
MB = 1024.0 * 1024.0


def _ms(values: list[float]) -> list[float]:
    return [v * MS for v in values]


def _check(execution: Execution, what: str) -> Execution:
    """Fail loudly if a benchmark cell went wrong (a fast wrong answer is no result)."""
    if not execution.ok:
        raise RuntimeError(f"{what}: cell failed: {execution.status} {execution.error}")
    return execution


def _session(work_dir: Path, *, notebook: bool = True, timeout: float = 120.0) -> Session:
    return Session(work_dir=work_dir, notebook=None if notebook else False, timeout=timeout)


def _three_ways(root: Path, stack: ExitStack) -> tuple[BlockingFloor, Session, Session]:
    """The floor, a recording session and one recording nothing, all closed by ``stack``."""
    floor = BlockingFloor(root).start()
    stack.callback(floor.close)
    ours = _session(root / "rec")
    stack.callback(ours.close)
    plain = _session(root / "norec", notebook=False)
    stack.callback(plain.close)
    return floor, ours, plain


# -- 1. session start -------------------------------------------------------------------


@case("start")
def session_start(cfg: Config) -> list[Row]:
    """Cold start (constructor until the first execute is possible) and teardown.

    Ours: ``Session(work_dir=...)`` - creates the work dir and notebook, starts
    the kernel and waits until it is ready. Floor: ``KernelManager.start_kernel``
    + ``start_channels`` + ``wait_for_ready`` (which has a fixed ~0.2 s IOPub
    flush wait). One untimed start of each first, so module imports and
    kernelspec caches are warm for both. Runs alternate ours/floor.
    """
    ours_start: list[float] = []
    ours_close: list[float] = []
    floor_start: list[float] = []
    floor_close: list[float] = []
    with scratch_dir("start") as root:

        def run_ours(i: int, record: bool) -> None:
            t_start, session = timed(lambda: _session(root / f"ours-{i}"))
            t_close, _ = timed(session.close)
            if record:
                ours_start.append(t_start)
                ours_close.append(t_close)

        def run_floor(i: int, record: bool) -> None:
            floor = BlockingFloor(root)
            t_start, _ = timed(floor.start)
            t_close, _ = timed(floor.close)
            if record:
                floor_start.append(t_start)
                floor_close.append(t_close)

        run_ours(-1, record=False)
        run_floor(-1, record=False)
        for i in range(cfg.start_repeats):
            progress(f"start: repeat {i + 1}/{cfg.start_repeats}")
            pair = (run_ours, run_floor) if i % 2 == 0 else (run_floor, run_ours)
            for run in pair:
                run(i, record=True)
    n = cfg.start_repeats
    return [
        Row(
            "session start (cold, median)",
            median(ours_start),
            median(floor_start),
            "s",
            f"n={n}; ours = Session(...) incl. work dir + empty notebook; "
            "floor = start_kernel + wait_for_ready",
            {"ours": ours_start, "floor": floor_start},
        ),
        Row(
            "session close (median)",
            median(ours_close),
            median(floor_close),
            "s",
            f"n={n}; ours = Session.close(); floor = stop_channels + shutdown_kernel()",
            {"ours": ours_close, "floor": floor_close},
        ),
    ]


@case("first-cell")
def first_cell(cfg: Config) -> list[Row]:
    """The first ``1+1`` right after a start, against the floor's first cell (same run).

    What a new session pays once before its first answer on top of the kernel's own
    first cell: the in-kernel helpers (state, generations, stream guard, environment
    record) go to the new kernel process then. Starts are untimed; the kernels are
    started in turn (ours recording, ours ``notebook=False``, the floor), rotating
    which goes first, so load drift hits all three alike.
    """
    times: dict[str, list[float]] = {"recording": [], "notebook=False": [], "floor": []}
    with scratch_dir("first") as root:

        def run_ours(i: int, record: bool) -> float:
            session = _session(root / f"ours-{i}-{record}", notebook=record)
            try:
                took, execution = timed(lambda: session.execute("1+1"))
                _expect(_check(execution, "first cell").text, "Session first cell")
                return took
            finally:
                session.close()

        def run_floor(i: int) -> float:
            floor = BlockingFloor(root).start()
            try:
                took, messages = timed(lambda: floor.execute("1+1"))
                _expect(_floor_result(messages), "floor first cell")
                return took
            finally:
                floor.close()

        runs: list[tuple[str, Callable[[int], float]]] = [
            ("recording", lambda i: run_ours(i, True)),
            ("notebook=False", lambda i: run_ours(i, False)),
            ("floor", run_floor),
        ]
        for _name, run in runs:  # untimed: imports and kernelspec caches warm for all
            run(-1)
        for i in range(cfg.first_cell_repeats):
            progress(f"first-cell: repeat {i + 1}/{cfg.first_cell_repeats}")
            for name, run in runs[i % 3 :] + runs[: i % 3]:
                times[name].append(run(i))
    n = cfg.first_cell_repeats
    floor = median(times["floor"])
    return [
        Row(
            f"first cell after start (median): Session {name}",
            median(times[name]),
            floor,
            "s",
            f"n={n}; 1+1 right after start; floor = execute_interactive's first cell; "
            f"+{(median(times[name]) - floor) * MS:.1f} ms (target <= +30 ms)",
            {"ours": times[name], "floor": times["floor"]},
        )
        for name in ("recording", "notebook=False")
    ]


# -- 2. warm round trip -----------------------------------------------------------------


@dataclass
class _Variant:
    """One way of running a trivial cell; ``run(n)`` returns n per-cell times in seconds."""

    label: str
    run: Callable[[int], list[float]]
    times: list[float]


def _sync_runner(execute: Callable[[], Any]) -> Callable[[int], list[float]]:
    def run(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t, _ = timed(execute)
            out.append(t)
        return out

    return run


def _async_runner(
    loop: asyncio.AbstractEventLoop, execute: Callable[[], Any]
) -> Callable[[int], list[float]]:
    async def chunk(n: int) -> list[float]:
        out = []
        for _ in range(n):
            start = time.perf_counter()
            await execute()
            out.append(time.perf_counter() - start)
        return out

    return lambda n: loop.run_until_complete(chunk(n))


def _interleave(variants: list[_Variant], total: int, chunk: int, what: str) -> None:
    """Run ``total`` cells per variant in chunks, rotating which variant goes first."""
    done = 0
    round_no = 0
    while done < total:
        n = min(chunk, total - done)
        order = variants[round_no % len(variants) :] + variants[: round_no % len(variants)]
        for variant in order:
            variant.times.extend(variant.run(n))
        done += n
        round_no += 1
        if round_no % 4 == 0 or done == total:
            progress(f"{what}: {done}/{total} cells per variant")


def _warm_variants(
    cfg: Config, root: Path, stack: ExitStack, loop: asyncio.AbstractEventLoop
) -> list[_Variant]:
    code = "1+1"
    floor = BlockingFloor(root).start()
    stack.callback(floor.close)
    afloor = loop.run_until_complete(AsyncFloor(root).start())
    stack.callback(lambda: loop.run_until_complete(afloor.close()))
    variants = [
        _Variant("floor execute_interactive", _sync_runner(lambda: floor.execute(code)), []),
        _Variant("floor async loop", _async_runner(loop, lambda: afloor.execute(code)), []),
    ]
    for record in (True, False):
        tag = "recording" if record else "notebook=False"
        session = _session(root / f"sync-{tag}", notebook=record)
        stack.callback(session.close)
        _expect(session.execute(code).text, f"Session {tag}")
        variants.append(
            _Variant(f"Session {tag}", _sync_runner(functools.partial(session.execute, code)), [])
        )
        asession = AsyncSession(
            work_dir=root / f"async-{tag}", notebook=None if record else False, timeout=120
        )
        loop.run_until_complete(asession.start())
        stack.callback(loop.run_until_complete, asession.close())
        _expect(loop.run_until_complete(asession.execute(code)).text, f"AsyncSession {tag}")
        variants.append(
            _Variant(
                f"AsyncSession {tag}",
                _async_runner(loop, functools.partial(asession.execute, code)),
                [],
            )
        )
    for variant in variants:
        variant.run(cfg.warmup_cells)
    _expect(_floor_result(floor.execute(code)), "floor")
    _expect(_floor_result(loop.run_until_complete(afloor.execute(code))), "async floor")
    return variants


def _expect(text: str | None, who: str, want: str = "2") -> None:
    """Check a client really computed ``1+1`` (a fast wrong answer is no result)."""
    if text != want:
        raise RuntimeError(f"warm: {who} returned {text!r}, expected {want!r}")


@case("warm")
def warm_round_trip(cfg: Config) -> list[Row]:
    """Warm round trip of ``1+1``: p50/p95 over many cells, six clients interleaved.

    The per-block latency an agent pays on every call. Floors: blocking
    ``execute_interactive`` and an nbclient-style async loop. Ours: ``Session``
    and ``AsyncSession``, recording (the normal case: each cell is also written
    to the notebook, atomically) and ``notebook=False``. All six kernels are up
    at once and run in rotating chunks, so load drift hits all of them alike.
    """
    loop = asyncio.new_event_loop()
    with scratch_dir("warm") as root, ExitStack() as stack:
        stack.callback(loop.close)
        progress("warm: starting 6 kernels")
        variants = _warm_variants(cfg, root, stack, loop)
        _interleave(variants, cfg.warm_cells, cfg.warm_chunk, "warm")
    by_label = {v.label: _ms(v.times) for v in variants}
    blocking = by_label["floor execute_interactive"]
    async_floor = by_label["floor async loop"]
    n = cfg.warm_cells
    rows = [
        Row(
            "warm 1+1 p50: floor async loop (nbclient-style)",
            None,
            percentile(async_floor, 50),
            "ms",
            f"n={n}; p95 {percentile(async_floor, 95):.2f} ms; "
            f"vs execute_interactive p50 {percentile(blocking, 50):.2f} ms",
            {"floor": async_floor},
        )
    ]
    for label, times in by_label.items():
        if label.startswith("floor"):
            continue
        reference, ref_name = (
            (async_floor, "async loop")
            if label.startswith("Async")
            else (blocking, "execute_interactive")
        )
        for q in (50, 95):
            rows.append(
                Row(
                    f"warm 1+1 p{q}: {label}",
                    percentile(times, q),
                    percentile(reference, q),
                    "ms",
                    f"n={n}; floor = {ref_name}"
                    + (
                        f" (execute_interactive p{q} {percentile(blocking, q):.2f} ms)"
                        if ref_name != "execute_interactive"
                        else ""
                    ),
                    {"ours": times, "floor": reference} if q == 50 else {},
                )
            )
    return rows


# -- 3. a 1 MB PNG --------------------------------------------------------------------

PNG_SETUP = r"""
import random, struct, zlib
from IPython.display import Image, display

def _png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

def _noise_png(width, height):
    rows = b"".join(b"\x00" + random.randbytes(width * 3) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header)
            + _png_chunk(b"IDAT", zlib.compress(rows, 1)) + _png_chunk(b"IEND", b""))

_PNG = _noise_png(600, 580)
len(_PNG)
"""
PNG_CELL = "display(Image(data=_PNG))"


def _png_size(execution: Execution) -> int:
    return int(_check(execution, "png setup").text or "0")


@case("png")
def png_cell(cfg: Config) -> list[Row]:
    """A cell displaying a ~1 MB PNG (random noise, so incompressible).

    The PNG bytes are made once in the kernel; the timed cell only displays
    them (base64 on the wire, ~1.4 MB). Ours also decodes it, writes the .png
    into the work dir and re-saves the notebook (which grows ~1.4 MB per such
    cell). Floor: execute_interactive, outputs kept in a list.
    """
    with scratch_dir("png") as root, ExitStack() as stack:
        floor, ours, plain = _three_ways(root, stack)
        size = _png_size(ours.execute(PNG_SETUP))
        _png_size(plain.execute(PNG_SETUP))
        floor.execute(PNG_SETUP)
        times: dict[str, list[float]] = {"ours": [], "plain": [], "floor": []}
        runs: dict[str, Callable[[], Any]] = {
            "ours": lambda: _check(ours.execute(PNG_CELL), "png"),
            "plain": lambda: _check(plain.execute(PNG_CELL), "png"),
            "floor": lambda: floor.execute(PNG_CELL),
        }
        for i in range(cfg.png_repeats):
            progress(f"png: repeat {i + 1}/{cfg.png_repeats}")
            for name in _rotate(list(runs), i):
                t, result = timed(runs[name])
                times[name].append(t)
                if name == "ours":
                    _verify_png(result, size)
        notebook_mb = (ours.notebook_path.stat().st_size / MB) if ours.notebook_path else 0.0
    ours_ms, plain_ms, floor_ms = (_ms(times[k]) for k in ("ours", "plain", "floor"))
    return [
        Row(
            "1 MB PNG cell (median)",
            median(ours_ms),
            median(floor_ms),
            "ms",
            f"n={cfg.png_repeats}; PNG {size / MB:.2f} MB; ours writes the .png + notebook "
            f"(first {ours_ms[0]:.0f} ms, last {ours_ms[-1]:.0f} ms, notebook {notebook_mb:.1f} MB "
            f"at the end); notebook=False: {median(plain_ms):.1f} ms",
            {"ours": ours_ms, "notebook_false": plain_ms, "floor": floor_ms, "png_bytes": size},
        )
    ]


def _rotate(names: list[str], i: int) -> list[str]:
    k = i % len(names)
    return names[k:] + names[:k]


def _verify_png(execution: Execution, size: int) -> None:
    pngs = [p for p in execution.files if p.suffix == ".png"]
    if len(pngs) != 1 or pngs[0].stat().st_size != size:
        raise RuntimeError(f"png: expected one {size}-byte .png, got {execution.files}")


# -- 4. printing 10 MB ----------------------------------------------------------------

FLOOD_SETUP = "_BLOCK = ('x' * 1023 + '\\n') * 10\nlen(_BLOCK)"  # 10 KiB


def _flood_cell(mib: int, *, flush_every_mib: bool = False) -> str:
    """A cell printing ``mib`` MiB in 10 KiB writes (optionally flushing after each MiB)."""
    if flush_every_mib:
        return (
            f"import sys\nfor _ in range({mib}):\n"
            "    for _ in range(102):\n        print(_BLOCK, end='')\n    sys.stdout.flush()"
        )
    return f"for _ in range({mib * 1024 // 10}):\n    print(_BLOCK, end='')"


def _stream_messages(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("msg_type") == "stream")


@case("flood")
def flood_cell(cfg: Config) -> list[Row]:
    """A cell printing 10 MiB to stdout in 10 KiB writes; then memory for 10 MiB and a bigger flood.

    Ours keeps a bounded head + tail in memory and spills the full stream to a
    file in the work dir; the floor's list holds every chunk. Timed runs
    alternate. Then one extra run of each under tracemalloc gives the peak
    growth of this process's Python heap (not timed: tracemalloc is slow).
    ipykernel flushes stdout every 0.2 s, so a fast 10 MiB print arrives as ONE
    10 MiB message: its peak is jupyter_client decoding that message, alike for
    both. The bigger flood (several messages) shows whether memory stays bounded.
    """
    cell = _flood_cell(10)
    with scratch_dir("flood") as root, ExitStack() as stack:
        floor = BlockingFloor(root).start()
        stack.callback(floor.close)
        ours = _session(root / "rec")
        stack.callback(ours.close)
        _check(ours.execute(FLOOD_SETUP), "flood setup")
        floor.execute(FLOOD_SETUP)
        runs: dict[str, Callable[[], Any]] = {
            "ours": lambda: _check(ours.execute(cell), "flood"),
            "floor": lambda: floor.execute(cell),
        }
        times: dict[str, list[float]] = {"ours": [], "floor": []}
        results: dict[str, Any] = {}
        for i in range(cfg.flood_repeats):
            progress(f"flood: repeat {i + 1}/{cfg.flood_repeats}")
            for name in _rotate(list(runs), i):
                t, results[name] = timed(runs[name])
                times[name].append(t)
        spilled = _spilled_bytes(results["ours"])
        kept = len(results["ours"].stdout)
        messages = _stream_messages(results["floor"])
        progress("flood: memory (tracemalloc)")
        heap = {name: python_heap_peak(run)[0] for name, run in runs.items()}
        big = _flood_cell(cfg.flood_big_mib, flush_every_mib=True)
        progress(f"flood: memory of a {cfg.flood_big_mib} MiB print (tracemalloc)")
        big_heap = {
            "ours": python_heap_peak(lambda: _check(ours.execute(big), "big flood"))[0],
            "floor": python_heap_peak(lambda: floor.execute(big))[0],
        }
        big_messages = _stream_messages(floor.execute(big))
    ours_ms, floor_ms = _ms(times["ours"]), _ms(times["floor"])
    return [
        Row(
            "print 10 MiB cell (median)",
            median(ours_ms),
            median(floor_ms),
            "ms",
            f"n={cfg.flood_repeats}; ours keeps {kept:,} chars, spills {spilled / MB:.1f} MiB "
            f"to a file; arrives as {messages} stream message(s)",
            {"ours": ours_ms, "floor": floor_ms, "spilled_bytes": spilled},
        ),
        Row(
            "print 10 MiB: peak Python heap growth",
            heap["ours"] / MB,
            heap["floor"] / MB,
            "MB",
            "tracemalloc peak, one run, all threads; dominated by decoding the one big message",
            {"ours_bytes": heap["ours"], "floor_bytes": heap["floor"]},
        ),
        Row(
            f"print {cfg.flood_big_mib} MiB (flushed per MiB): peak Python heap growth",
            big_heap["ours"] / MB,
            big_heap["floor"] / MB,
            "MB",
            f"tracemalloc peak, one run; flushed every MiB: {big_messages} stream messages; "
            "floor keeps every message, ours a bounded head + tail",
            {"ours_bytes": big_heap["ours"], "floor_bytes": big_heap["floor"]},
        ),
    ]


def _spilled_bytes(execution: Execution) -> int:
    if not execution.truncated:
        raise RuntimeError("flood: expected a truncated stdout spilled to a file")
    return sum(p.stat().st_size for p in execution.files if p.suffix == ".txt")


# -- 5. recording cost ----------------------------------------------------------------


def _realistic_cell(i: int) -> dict[str, Any]:
    """A recorded cell as the session builds it: source, a stream, a display, a result."""
    stamp = "2025-01-01T00:00:00.000000+00:00"
    return {
        "cell_type": "code",
        "id": new_cell_id(),
        "execution_count": i + 1,
        "metadata": {
            "execution": {
                "iopub.status.busy": stamp,
                "iopub.execute_input": stamp,
                "iopub.status.idle": stamp,
            },
            "jupyter_exec": {"status": "ok", "duration": 0.0123},
        },
        "outputs": [
            {
                "output_type": "stream",
                "name": "stdout",
                "text": f"step {i}\nloss {1 / (i + 1):.5f}\n",
            },
            {
                "output_type": "display_data",
                "data": {
                    "text/plain": "<IPython.core.display.HTML object>",
                    "text/html": f"<table><tr><td>step</td><td>{i}</td></tr></table>",
                },
                "metadata": {},
            },
            {
                "output_type": "execute_result",
                "execution_count": i + 1,
                "data": {"text/plain": f"{{'step': {i}, 'value': {i * i}}}"},
                "metadata": {},
            },
        ],
        "source": f"result = train_step({i})\nprint('step', {i})\nshow(result)\n{{'step': {i}}}",
    }


_NOTEBOOK_METADATA = {
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python", "version": "3.11"},
}


def _nbformat_write_time(recorder: NotebookRecorder, path: Path, repeats: int = 3) -> float:
    node = recorder.notebook()
    return median([timed(lambda: nbformat.write(node, str(path)))[0] for _ in range(repeats)])


def _image_cell(i: int, png_b64: str) -> dict[str, Any]:
    """A realistic cell whose display is a ~1 MB PNG (base64, as Jupyter stores it)."""
    cell = _realistic_cell(i)
    cell["outputs"][1]["data"] = {"image/png": png_b64, "text/plain": "<Figure size 640x480>"}
    return cell


def _filled_recorder(path: Path, cells: list[dict[str, Any]]) -> NotebookRecorder:
    recorder = NotebookRecorder(path, _NOTEBOOK_METADATA)
    for cell in cells:
        recorder.append(cell, save=False)
    recorder.save()
    return recorder


def _timed_append(recorder: NotebookRecorder) -> float:
    """Milliseconds to append (and save) one more realistic cell."""
    cell = _realistic_cell(len(recorder))
    return timed(lambda: recorder.append(cell))[0] * MS


@case("recorder")
def recorder_cost(cfg: Config) -> list[Row]:
    """``NotebookRecorder.append()`` (serialise the cell + atomic save) at 10 and at N cells.

    Measured directly, without a kernel, with realistic cells (a stream, an
    HTML display, a result), appending in turn to a notebook of 10 cells and
    one of N cells so disk and load drift hit both alike; then to one holding
    10 cells with a 1 MB PNG each (what a plotting session looks like). The
    target is flat. Reference: ``nbformat.write`` of the same notebook, what a
    naive recorder would do per cell.
    """
    window, n = cfg.record_window, cfg.record_cells
    png_b64 = base64.b64encode(os.urandom(1_000_000)).decode("ascii")
    with scratch_dir("recorder") as root:
        progress(f"recorder: building notebooks of 10, {n} and 10 image cells")
        recorders = {
            "10": _filled_recorder(root / "small.ipynb", [_realistic_cell(i) for i in range(10)]),
            "n": _filled_recorder(root / "big.ipynb", [_realistic_cell(i) for i in range(n)]),
        }
        times: dict[str, list[float]] = {name: [] for name in recorders}
        for j in range(window):  # alternate the two small notebooks
            for name in _rotate(list(recorders), j):
                times[name].append(_timed_append(recorders[name]))
        # Separately: a 13 MB save leaves writeback behind that would slow the others.
        recorders["img"] = _filled_recorder(
            root / "images.ipynb", [_image_cell(i, png_b64) for i in range(10)]
        )
        times["img"] = [_timed_append(recorders["img"]) for _ in range(window)]
        naive = {
            name: _nbformat_write_time(r, root / f"naive-{name}.ipynb", 1 if name == "img" else 3)
            * MS
            for name, r in recorders.items()
        }
        size = {name: r.path.stat().st_size / MB for name, r in recorders.items()}
    base = median(times["10"])
    return [
        Row(
            "recorder append+save @ cell ~10 (median)",
            base,
            naive["10"],
            "ms",
            f"cells 10-{10 + window - 1}; floor = nbformat.write of the whole notebook",
            {"ours": times["10"]},
        ),
        Row(
            f"recorder append+save @ cell ~{n} (median)",
            median(times["n"]),
            naive["n"],
            "ms",
            f"cells {n}-{n + window - 1}; {median(times['n']) / base:.1f}x the cost at cell 10; "
            f"notebook {size['n']:.2f} MB; floor = nbformat.write",
            {"ours": times["n"]},
        ),
        Row(
            "recorder append+save of a small cell after 10 x 1 MB PNG cells",
            median(times["img"]),
            naive["img"],
            "ms",
            f"notebook {size['img']:.1f} MB: every save rewrites every image; "
            f"{median(times['img']) / base:.0f}x the cost at cell 10",
            {"ours": times["img"]},
        ),
    ]


E2E_SETUP = "from IPython.display import HTML, display\nstep = 0"
E2E_CELL = "step += 1\nprint('step', step)\ndisplay(HTML(f'<b>{step}</b>'))\n{'step': step}"


@case("recording-e2e")
def recording_end_to_end(cfg: Config) -> list[Row]:
    """End-to-end round trip of a realistic cell near cell 10 and near cell N.

    Each cell prints, displays HTML (saved as a file: N files by the end) and
    returns a value. Three clients interleaved: a recording Session, a
    ``notebook=False`` Session, and the floor. Flat means the late window
    costs what the early one does, for ours as for the floor.
    """
    n, window = cfg.record_cells, cfg.record_window
    early = slice(10, 10 + window)
    late = slice(n - window, n)
    with scratch_dir("e2e") as root, ExitStack() as stack:
        floor, rec, plain = _three_ways(root, stack)
        for setup in (rec.execute, plain.execute, floor.execute):
            setup(E2E_SETUP)
        variants = [
            _Variant(
                "Session recording", _sync_runner(lambda: _check(rec.execute(E2E_CELL), "e2e")), []
            ),
            _Variant("Session notebook=False", _sync_runner(lambda: plain.execute(E2E_CELL)), []),
            _Variant("floor", _sync_runner(lambda: floor.execute(E2E_CELL)), []),
        ]
        _interleave(variants, n, 20, "recording-e2e")
    rec_ms, plain_ms, floor_ms = (_ms(v.times) for v in variants)
    rows = []
    for name, part in (("10", early), (str(n - window // 2), late)):
        ours, nb_off, ref = median(rec_ms[part]), median(plain_ms[part]), median(floor_ms[part])
        rows.append(
            Row(
                f"realistic cell round trip @ cell ~{name} (median, recording)",
                ours,
                ref,
                "ms",
                f"cells {part.start}-{part.stop - 1}; notebook=False {nb_off:.2f} ms; "
                f"recording overhead {ours - nb_off:+.2f} ms",
                {"ours": rec_ms[part], "notebook_false": plain_ms[part], "floor": floor_ms[part]},
            )
        )
    return rows


# -- 6. timeout -------------------------------------------------------------------------


@case("timeout")
def timeout_cell(cfg: Config) -> list[Row]:
    """``time.sleep(100)`` under a 2 s timeout: when control returns, when the next cell runs.

    ``x`` is defined first; the next cell is ``x``, so it also shows whether
    state was kept. Ours interrupts the kernel at the deadline. The floor's
    ``execute_interactive(timeout=2)`` only stops waiting: the kernel keeps
    sleeping and the next cell queues behind it. To bound the run, the floor
    sleeps ``floor_sleep`` s instead of 100 s (with 100 s it would wait ~98 s).
    """
    with scratch_dir("timeout") as root, ExitStack() as stack:
        ours = _session(root / "rec")
        stack.callback(ours.close)
        _check(ours.execute("import time\nx = 42"), "timeout setup")
        progress("timeout: ours, sleep(100) under timeout=2")
        start = time.perf_counter()
        timed_out = ours.execute("time.sleep(100)", timeout=2)
        ours_return = time.perf_counter() - start
        after = _check(ours.execute("x"), "timeout next cell")
        ours_next = time.perf_counter() - start
        progress("timeout: ours, then a cell that kills the kernel")
        start = time.perf_counter()
        died = ours.execute("import os; os._exit(1)")
        ours_death = time.perf_counter() - start

        floor = BlockingFloor(root).start()
        stack.callback(floor.close)
        floor.execute("import time\nx = 42")
        progress(f"timeout: floor, sleep({cfg.floor_sleep:g}) under timeout=2")
        start = time.perf_counter()
        try:
            floor.execute(f"time.sleep({cfg.floor_sleep})", timeout=2)
            raised = "no TimeoutError"
        except TimeoutError:
            raised = "TimeoutError"
        floor_return = time.perf_counter() - start
        floor_after = floor.execute("x", timeout=60)
        floor_next = time.perf_counter() - start
        floor_death = _floor_death(floor)
    ours_state = "kept" if after.text == "42" else f"lost ({after.text!r})"
    floor_state = "kept" if _floor_result(floor_after) == "42" else "?"
    return [
        Row(
            "timeout 2 s: control returns after",
            ours_return,
            floor_return,
            "s",
            f"ours status={timed_out.status}; floor raised {raised}",
        ),
        Row(
            "timeout 2 s: next cell (`x`) done after",
            ours_next,
            floor_next,
            "s",
            f"from the sleep cell's start; ours state {ours_state}; floor state {floor_state}, "
            f"floor ran sleep({cfg.floor_sleep:g}) not sleep(100): it waits for the whole sleep",
            {"ours_next_cell_alone": ours_next - ours_return},
        ),
        Row(
            "timeout, then `os._exit(1)`: the death reported after",
            ours_death,
            floor_death,
            "s",
            f"default options (state on); ours status={died.status}, the result returned with "
            "a restarted kernel and the saved state loaded; floor: until `is_alive()` says no",
        ),
    ]


def _floor_death(floor: BlockingFloor) -> float:
    """The raw floor's notice of a death: send the cell, poll ``is_alive`` every 5 ms."""
    start = time.perf_counter()
    floor.kc.execute("import os; os._exit(1)")
    while floor.km.is_alive():
        if time.perf_counter() - start > 60:
            raise RuntimeError("the floor's kernel did not die within 60 s")
        time.sleep(0.005)
    return time.perf_counter() - start


def _floor_result(messages: list[dict[str, Any]]) -> str | None:
    for msg in messages:
        if msg.get("msg_type") == "execute_result":
            return str(msg["content"]["data"].get("text/plain"))
    return None
