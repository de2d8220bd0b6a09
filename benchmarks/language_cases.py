"""Sessions of other languages (R, Bash, Deno, Java) against each kernel's raw floor.

For each language: the cold start (``Session(language=...)`` until a cell can run, work dir
and notebook included) and the warm round trip of a trivial cell (recorded in the notebook),
against jupyter_client's ``KernelManager(kernel_name=...)`` + ``wait_for_ready`` and
``execute_interactive`` on the same kernelspec, in the same run, alternating.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager

from benchmarks.core import Config, Row, case, median, progress, scratch_dir, timed
from jupyter_exec import Session
from jupyter_exec.engine.languages import kernel_for

MS = 1000.0

# language -> a trivial cell of it
CELLS = {"r": "1", "bash": "true", "typescript": "1", "java": "1"}


class _Floor:
    """The language's kernelspec started and driven by plain jupyter_client."""

    def __init__(self, kernel_name: str, cwd: Path) -> None:
        self.km: Any = KernelManager(kernel_name=kernel_name)
        self.cwd = cwd
        self.kc: Any = None

    def start(self) -> _Floor:
        self.km.start_kernel(cwd=str(self.cwd), stderr=subprocess.DEVNULL)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        return self

    def execute(self, code: str) -> None:
        reply = self.kc.execute_interactive(code, timeout=60, output_hook=lambda _msg: None)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"floor cell failed: {reply['content']}")

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel()


def _start_rows(language: str, cfg: Config, root: Path) -> Row:
    kernel = kernel_for(language)
    ours: list[float] = []
    floor: list[float] = []
    for i in range(-1, cfg.start_repeats):  # -1: untimed, warms caches for both
        progress(f"languages: {language} start {i + 1}/{cfg.start_repeats}")
        t_ours, session = timed(lambda i=i: Session(language=language, work_dir=root / f"o{i}"))
        session.close()
        (root / f"f{i}").mkdir()
        plain = _Floor(kernel, root / f"f{i}")
        t_floor, _ = timed(plain.start)
        plain.close()
        if i >= 0:
            ours.append(t_ours)
            floor.append(t_floor)
    return Row(
        f"{language}: session start (cold, median)",
        median(ours),
        median(floor),
        "s",
        f"n={cfg.start_repeats}; kernelspec {kernel}; ours = Session(language=...) incl. work "
        "dir + notebook; floor = start_kernel + wait_for_ready",
        {"ours": ours, "floor": floor},
    )


def _warm_row(language: str, cfg: Config, root: Path) -> Row:
    kernel = kernel_for(language)
    code = CELLS[language]
    cells = max(20, cfg.warm_cells // 5)
    (root / "floor").mkdir()
    ours_times: list[float] = []
    floor_times: list[float] = []
    with Session(language=language, work_dir=root / "ours", timeout=60) as session:
        plain = _Floor(kernel, root / "floor").start()
        try:
            for _ in range(cfg.warmup_cells):
                session.execute(code)
                plain.execute(code)
            for i in range(cells):
                progress(f"languages: {language} warm {i + 1}/{cells}")
                t_ours, run = timed(lambda: session.execute(code))
                if not run.ok:
                    raise RuntimeError(f"{language} cell failed: {run.error}")
                t_floor, _ = timed(lambda: plain.execute(code))
                ours_times.append(t_ours * MS)
                floor_times.append(t_floor * MS)
        finally:
            plain.close()
    return Row(
        f"{language}: warm round trip (median)",
        median(ours_times),
        median(floor_times),
        "ms",
        f"n={cells} cells of {code!r}, interleaved; ours records each in the notebook"
        + ("; ours also fences Deno's late results" if kernel == "deno" else ""),
        {"ours": ours_times, "floor": floor_times},
    )


@case("languages")
def languages(cfg: Config) -> list[Row]:
    """Cold start and warm round trip of R, Bash, TypeScript (Deno) and Java vs their floor."""
    rows: list[Row] = []
    for language in CELLS:
        with scratch_dir(f"lang-{language}") as root:
            rows.append(_start_rows(language, cfg, root))
        with scratch_dir(f"lang-{language}-warm") as root:
            rows.append(_warm_row(language, cfg, root))
    return rows
