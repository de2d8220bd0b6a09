"""Docker backend rows: cold start, warm round trip and teardown, against local kernels.

The floor for a Docker kernel is the local one: the same ``Session`` API on a
local ipykernel, measured in the same run, so the cost of the container (its
start, the ipc sockets through a bind mount, its removal) is what the ratio
shows. A machine without an engine or the kernel image gets "skipped" rows,
so ``--group all`` works anywhere.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import time
from pathlib import Path

from benchmarks.core import Config, Row, case, median, percentile, progress, scratch_dir, timed
from jupyter_exec import Session

__all__ = ["docker_available", "skipped"]

MS = 1000.0
IMAGE = "jupyter-exec/kernel:latest"


def docker_available() -> bool:
    """Whether a Docker engine answers (``docker info``) within 10 s."""
    if shutil.which("docker") is None:
        return False
    try:
        probe = subprocess.run(["docker", "info"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def _image_present() -> bool:
    probe = subprocess.run(
        ["docker", "image", "inspect", IMAGE], capture_output=True, timeout=30, check=False
    )
    return probe.returncode == 0


def skipped(case_name: str, why: str) -> list[Row]:
    """The row a Docker case returns when it cannot run here."""
    return [Row(case_name, None, None, "s", f"skipped: {why}")]


def _unavailable(case_name: str) -> list[Row] | None:
    if not docker_available():
        return skipped(case_name, "no Docker engine answers")
    if not _image_present():
        return skipped(case_name, f"no {IMAGE} image (scripts/provision-docker builds it)")
    return None


def _session(work_dir: Path, backend: str) -> Session:
    work_dir.mkdir(parents=True, exist_ok=True)
    return Session(work_dir=work_dir, backend=backend, timeout=120)  # type: ignore[arg-type]


@case("docker-start", group="docker")
def docker_start(cfg: Config) -> list[Row]:
    """Cold start (constructor until ready) and teardown of a Docker session vs a local one.

    Docker: a hardened container (``--init``, no network, read-only root,
    caps dropped, limits) with ipc sockets through a bind-mounted run dir;
    teardown includes removing the container. Runs alternate docker/local.
    """
    unavailable = _unavailable("docker session start")
    if unavailable:
        return unavailable
    times: dict[str, list[float]] = {"docker": [], "local": []}
    closes: dict[str, list[float]] = {"docker": [], "local": []}
    with scratch_dir("docker-start") as root:
        for backend in ("docker", "local"):  # untimed: imports, image cache
            _session(root / f"warm-{backend}", backend).close()
        for i in range(cfg.start_repeats):
            progress(f"docker-start: repeat {i + 1}/{cfg.start_repeats}")
            order = ("docker", "local") if i % 2 == 0 else ("local", "docker")
            for backend in order:
                folder = root / f"{backend}-{i}"
                t_start, session = timed(functools.partial(_session, folder, backend))
                t_close, _ = timed(session.close)
                times[backend].append(t_start)
                closes[backend].append(t_close)
    n = cfg.start_repeats
    return [
        Row(
            "docker session start (cold, median)",
            median(times["docker"]),
            median(times["local"]),
            "s",
            f"n={n}; floor column = a local Session in the same run",
            {"docker": times["docker"], "local": times["local"]},
        ),
        Row(
            "docker session teardown (median)",
            median(closes["docker"]),
            median(closes["local"]),
            "s",
            f"n={n}; docker includes removing the container and its run dir",
            {"docker": closes["docker"], "local": closes["local"]},
        ),
    ]


@case("docker-warm", group="docker")
def docker_warm(cfg: Config) -> list[Row]:
    """Warm round trip of ``1+1`` on a Docker session vs a local one (p50/p95, interleaved)."""
    unavailable = _unavailable("docker warm round trip")
    if unavailable:
        return unavailable
    cells = max(100, cfg.warm_cells // 2)
    samples: dict[str, list[float]] = {"docker": [], "local": []}
    with scratch_dir("docker-warm") as root:
        sessions = {b: _session(root / b, b) for b in ("docker", "local")}
        try:
            for session in sessions.values():
                for _ in range(cfg.warmup_cells):
                    session.execute("1+1")
            done = 0
            while done < cells:
                progress(f"docker-warm: cells {done + 1}-{done + cfg.warm_chunk} of {cells}")
                for backend, session in sessions.items():
                    for _ in range(cfg.warm_chunk):
                        start = time.perf_counter()
                        text = session.execute("1+1").text
                        samples[backend].append(time.perf_counter() - start)
                        if text != "2":
                            raise RuntimeError(f"{backend}: 1+1 gave {text!r}")
                done += cfg.warm_chunk
        finally:
            for session in sessions.values():
                session.close()
    docker_ms = [t * MS for t in samples["docker"]]
    local_ms = [t * MS for t in samples["local"]]
    return [
        Row(
            "docker warm 1+1 p50",
            percentile(docker_ms, 50),
            percentile(local_ms, 50),
            "ms",
            f"n={len(docker_ms)}; recording on; floor column = a local Session",
        ),
        Row(
            "docker warm 1+1 p95",
            percentile(docker_ms, 95),
            percentile(local_ms, 95),
            "ms",
            f"n={len(docker_ms)}",
        ),
    ]
