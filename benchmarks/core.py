"""The benchmark framework: rows, the case registry, statistics and the table.

A *case* is a function ``(Config) -> list[Row]`` registered with :func:`case`
under a group (``"local"`` runs by default; ``"docker"`` is reserved for the
Docker backend rows, see :mod:`benchmarks.docker_cases`). Each case measures
jupyter-exec and, where one exists, the raw jupyter_client floor in the same
process and the same run, so the two numbers in a row are comparable.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "CASES",
    "Case",
    "Config",
    "Row",
    "case",
    "median",
    "percentile",
    "progress",
    "python_heap_peak",
    "render_table",
    "scratch_dir",
    "timed",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Config:
    """How hard to push: ``quick`` is a CI-sized smoke run, the default a full run."""

    quick: bool = False
    start_repeats: int = 5
    first_cell_repeats: int = 11
    warm_cells: int = 500
    warm_chunk: int = 25
    warmup_cells: int = 20
    png_repeats: int = 8
    flood_repeats: int = 4
    flood_big_mib: int = 100
    record_cells: int = 1_000
    record_window: int = 40
    floor_sleep: float = 12.0

    @classmethod
    def make(cls, quick: bool) -> Config:
        if not quick:
            return cls()
        return cls(
            quick=True,
            start_repeats=2,
            first_cell_repeats=5,
            warm_cells=100,
            warm_chunk=20,
            warmup_cells=10,
            png_repeats=3,
            flood_repeats=2,
            flood_big_mib=40,
            record_cells=150,
            record_window=20,
            floor_sleep=5.0,
        )


@dataclass
class Row:
    """One line of the table: jupyter-exec's number, the floor's, and what they mean.

    ``ours`` and ``floor`` are in ``unit``; ``ratio`` is ours / floor (lower is
    better for times). ``extra`` carries raw numbers for the JSON output.
    """

    case: str
    ours: float | None
    floor: float | None
    unit: str
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.ours is None or self.floor is None or self.floor == 0:
            return None
        return self.ours / self.floor

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "ours": self.ours,
            "floor": self.floor,
            "unit": self.unit,
            "ratio": self.ratio,
            "notes": self.notes,
            "extra": self.extra,
        }


@dataclass(frozen=True)
class Case:
    """A registered benchmark case."""

    name: str
    group: str
    func: Callable[[Config], list[Row]]

    @property
    def summary(self) -> str:
        doc = (self.func.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""


CASES: dict[str, Case] = {}
"""Every registered case, in registration order (the order of the table)."""


def case(name: str, group: str = "local") -> Callable[[Callable[[Config], list[Row]]], Any]:
    """Register ``func`` as case ``name`` in ``group``."""

    def register(func: Callable[[Config], list[Row]]) -> Callable[[Config], list[Row]]:
        if name in CASES:
            raise ValueError(f"benchmark case {name!r} registered twice")
        CASES[name] = Case(name, group, func)
        return func

    return register


# -- measuring ------------------------------------------------------------------------


def progress(message: str) -> None:
    """A progress line on stderr (the table goes to stdout)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def timed(func: Callable[[], T]) -> tuple[float, T]:
    """Seconds ``func()`` took (wall clock, ``perf_counter``) and its result."""
    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: list[float]) -> float:
    return statistics.median(values)


def python_heap_peak(func: Callable[[], T]) -> tuple[float, T]:
    """Peak growth of this process's Python heap (bytes) while ``func`` runs, via tracemalloc.

    Counts every thread's allocations (the blocking Session works on a loop
    thread). tracemalloc slows allocation, so never use it on a timed run.
    """
    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        result = func()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return float(peak - baseline), result


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A temporary folder for work dirs and notebooks, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"jx-bench-{prefix}-") as path:
        yield Path(path)


# -- reporting ------------------------------------------------------------------------


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:.2f} ms" if value < 100 else f"{value:.0f} ms"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "MB":
        return f"{value:.1f} MB"
    return f"{value:g} {unit}".strip()


def render_table(rows: list[Row]) -> str:
    """The rows as a markdown table: case | jupyter-exec | floor | ratio | notes."""
    lines = [
        "| case | jupyter-exec | floor | ratio | notes |",
        "|---|---:|---:|---:|---|",
    ]
    for row in rows:
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        notes = row.notes.replace("|", "/")
        lines.append(
            f"| {row.case} | {_fmt(row.ours, row.unit)} | {_fmt(row.floor, row.unit)} "
            f"| {ratio} | {notes} |"
        )
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on, for the header and the JSON file."""
    from importlib.metadata import version

    import zmq

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "jupyter_exec": version("jupyter-exec"),
        "jupyter_client": version("jupyter_client"),
        "ipykernel": version("ipykernel"),
        "pyzmq": version("pyzmq"),
        "libzmq": zmq.zmq_version(),
    }
