"""The E2B lifecycle through the SDK: ``fork(count=4)``, ``pause`` / resume and a snapshot of a
sandbox holding N MB, against the floor of a new sandbox running the same cells again.

The sandbox's namespace is the ``checkpoint`` case's (60 % a NumPy array, 30 % a pandas
DataFrame, 10 % small dicts). Rows:

* **fork(count=4)**: the SDK's ``Sandbox.fork(count=4)`` to its answer (every fork running,
  its state loaded), then each fork's first ``run_code`` is checked;
* **pause + resume**: ``pause()`` (the state saved, the kernel stopped), then ``connect`` and
  the first ``run_code`` (a new kernel, the saved state loaded);
* **snapshot**: ``create_snapshot()``, and ``Sandbox.create(<snapshot>)`` to its first result;

each against the floor: ``Sandbox.create()`` and the same cells run again (what a client
without these calls does). ``python -m benchmarks --only e2b-lifecycle``
(``JX_BENCH_E2B_MB``, default 500; ``JX_BENCH_E2B_REPEATS``, default 3;
``JX_BENCH_E2B_BACKENDS``, default ``local,docker``: Docker where there is an engine)
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from benchmarks.checkpoint_cases import _cells
from benchmarks.core import Config, Row, case, median, progress, scratch_dir
from benchmarks.docker_cases import docker_available
from benchmarks.e2b_cases import KEY, _sdk_env, _server
from jupyter_exec.e2b import E2BConfig

__all__ = ["lifecycle_case"]


def _filled(cells: list[str]) -> tuple[object, str]:
    from e2b_code_interpreter import Sandbox

    sandbox = Sandbox.create(timeout=3600)
    for code in cells:
        result = sandbox.run_code(code, timeout=1800)
        if result.error is not None:
            raise RuntimeError(f"{code}: {result.error}")
    return sandbox, sandbox.run_code("check").text or ""


def _timed(cells: list[str], repeats: int) -> dict[str, list[float]]:
    from e2b_code_interpreter import Sandbox

    found: dict[str, list[float]] = {k: [] for k in ("fork", "pause", "resume", "snapshot",
                                                     "from-snapshot", "floor")}  # fmt: skip
    start = time.perf_counter()
    sandbox, expected = _filled(cells)
    found["floor"].append(time.perf_counter() - start)
    assert isinstance(sandbox, Sandbox)
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            forks = Sandbox.fork(sandbox.sandbox_id, count=4, timeout=600)
            found["fork"].append(time.perf_counter() - start)
            for fork in forks:
                assert isinstance(fork, Sandbox), fork
                assert fork.run_code("check").text == expected
                fork.kill()
            start = time.perf_counter()
            assert sandbox.pause() is True
            found["pause"].append(time.perf_counter() - start)
            start = time.perf_counter()
            back = Sandbox.connect(sandbox.sandbox_id, timeout=3600)
            assert back.run_code("check").text == expected
            found["resume"].append(time.perf_counter() - start)
            start = time.perf_counter()
            snapshot = sandbox.create_snapshot()
            found["snapshot"].append(time.perf_counter() - start)
            start = time.perf_counter()
            copy = Sandbox.create(snapshot.snapshot_id, timeout=600)
            assert copy.run_code("check").text == expected
            found["from-snapshot"].append(time.perf_counter() - start)
            copy.kill()
            Sandbox.delete_snapshot(snapshot.snapshot_id)
    finally:
        sandbox.kill()
    return found


def _rows(backend: str, megabytes: int, found: dict[str, list[float]]) -> list[Row]:
    floor = found["floor"][0]
    n = len(found["fork"])
    notes = f"{backend}; {megabytes} MB (60% array, 30% DataFrame, 10% dicts); median of {n}"
    floor_words = "floor: Sandbox.create() and the cells run again"
    return [
        Row(f"e2b fork(count=4), {megabytes} MB, {backend}", median(found["fork"]), floor, "s",
            f"{notes}; all 4 running, state loaded (target <= 1 s); {floor_words} (once)"),
        Row(f"e2b pause, {megabytes} MB, {backend}", median(found["pause"]), None, "s",
            f"{notes}; state saved, kernel stopped"),
        Row(f"e2b resume to first result, {megabytes} MB, {backend}", median(found["resume"]),
            floor, "s", f"{notes}; connect + run_code; {floor_words}"),
        Row(f"e2b create_snapshot, {megabytes} MB, {backend}", median(found["snapshot"]), None,
            "s", f"{notes}; namespace saved, files and state copied"),
        Row(f"e2b create from snapshot to first result, {megabytes} MB, {backend}",
            median(found["from-snapshot"]), floor, "s", f"{notes}; {floor_words}"),
    ]  # fmt: skip


@case("e2b-lifecycle")
def lifecycle_case(cfg: Config) -> list[Row]:
    """fork(count=4), pause/resume and snapshots of an N MB sandbox vs re-running its cells."""
    megabytes = 20 if cfg.quick else int(os.environ.get("JX_BENCH_E2B_MB", "500"))
    repeats = 1 if cfg.quick else int(os.environ.get("JX_BENCH_E2B_REPEATS", "3"))
    rows: list[Row] = []
    wanted = os.environ.get("JX_BENCH_E2B_BACKENDS", "local,docker").split(",")
    backends = [b for b in ("local", "docker") if b in wanted]
    if "docker" in backends and not docker_available():
        backends.remove("docker")
    for backend in backends:
        with scratch_dir(f"e2b-lifecycle-{backend}") as root:
            options = {"backend": "docker"} if backend == "docker" else {}
            config = E2BConfig(root_dir=Path(root) / "sandboxes", ports=(0,), api_key=KEY,
                               session_options=options)  # fmt: skip
            progress(f"e2b-lifecycle: {backend}, {megabytes} MB x {repeats}")
            with _server(config) as running, _sdk_env(
                E2B_DEBUG=None, E2B_API_URL=running.url, E2B_SANDBOX_URL=running.url,
                E2B_API_KEY=KEY,
            ):  # fmt: skip
                rows += _rows(backend, megabytes, _timed(_cells(megabytes), repeats))
    return rows
