"""Peak host memory under output floods: jupyter-exec against the raw jupyter_client floor.

Each measurement runs in a fresh child process, which starts a kernel, runs
one small cell, notes its resident memory, runs the flood while a thread
samples resident memory every 5 ms, and reports the highest growth seen. The floor is
``execute_interactive`` keeping each message it receives, as any client must
hold a message at least while it handles it; jupyter-exec keeps the whole
output too (head and tail in the notebook, the rest in a spill file).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from benchmarks.core import Config, Row, case, progress, scratch_dir

MB = 1_000_000

_CHILD = textwrap.dedent(
    """
    import json, os, sys, threading, time
    who, code, work = sys.argv[1], sys.argv[2], sys.argv[3]
    page = os.sysconf("SC_PAGE_SIZE")

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    class Sampler(threading.Thread):
        def __init__(self):
            super().__init__(daemon=True)
            self.peak, self.done = rss(), threading.Event()
        def run(self):
            while not self.done.wait(0.005):
                self.peak = max(self.peak, rss())

    if who == "ours":
        from jupyter_exec import Session
        runner = Session(work_dir=work, name="flood", timeout=1800)
        run = lambda c: runner.execute(c).raise_for_error()
        stop = runner.close
    else:
        sys.path.insert(0, sys.argv[4])
        from pathlib import Path
        from benchmarks.floor import BlockingFloor
        runner = BlockingFloor(Path(work)).start()
        run = lambda c: runner.execute(c, timeout=1800)
        stop = runner.close
    try:
        run("x = 1")
        base = rss()
        sampler = Sampler()
        sampler.start()
        started = time.perf_counter()
        run(code)
        seconds = time.perf_counter() - started
        sampler.done.set()
        sampler.join()
        peak = max(sampler.peak, rss())
        print(json.dumps({"growth": peak - base, "seconds": seconds}))
    finally:
        stop()
    """
)

_FLOODS = {
    "lines": "for _ in range({n}): print('y' * 65535)",
    "line": "print('x' * ({n} << 16), end='')",
    "png": (
        "import os\nfrom IPython.display import Image, display\n"
        "display(Image(data=b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom({n} << 16), format='png'))"
    ),
}


def _measure(who: str, code: str) -> dict[str, float]:
    root = str(Path(__file__).resolve().parent.parent)  # the floor is imported from here
    with scratch_dir(f"rss-{who}") as work:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, who, code, str(work), root],
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"{who} flood failed: {proc.stderr[-2000:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@case("flood-rss")
def flood_rss(cfg: Config) -> list[Row]:
    """Peak host memory growth for 1 GiB printed in lines, in one line, and a 100 MiB PNG."""
    sizes = {"lines": 256 if cfg.quick else 1024, "line": 256 if cfg.quick else 1024, "png": 100}
    rows = []
    for kind, mib in sizes.items():
        code = _FLOODS[kind].format(n=mib * 16)  # units of 64 KiB
        label = {"lines": "lines of 64 KiB", "line": "one line", "png": "one PNG"}[kind]
        progress(f"flood-rss: {mib} MiB as {label}")
        started = time.perf_counter()
        ours = _measure("ours", code)
        floor = _measure("floor", code)
        rows.append(
            Row(
                f"flood-rss {mib} MiB {kind}",
                ours["growth"] / MB,
                floor["growth"] / MB,
                "MB",
                f"peak host RSS growth, {label}; ours {ours['seconds']:.1f} s, "
                f"floor {floor['seconds']:.1f} s ({time.perf_counter() - started:.0f} s in all)",
                extra={"ours": ours, "floor": floor},
            )
        )
    return rows
