"""The E2B server's cost: a trivial ``run_code`` through it vs ``Session.execute`` directly.

Both run in the same process and alternate, so machine drift hits both alike:
the SDK's ``Sandbox.run_code("1 + 1")`` (HTTP, JSON lines, the server's
handler, the session) against a plain :class:`~jupyter_exec.Session` on the
same machine. ``e2b-create`` times ``Sandbox.create()`` to its first command
and to its first run_code result in API mode, local and Docker, without and
with a warm kernel pool (the way ComputeSDK compares hosted sandboxes:
sequential create, one trivial command, median and p95), against a direct
session start to its first result in the same run.

``python -m benchmarks --only e2b-run-code,e2b-create,e2b-create-docker`` (needs the ``e2b``
extra)
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.core import Config, Row, case, median, percentile, progress
from benchmarks.docker_cases import docker_available, skipped
from jupyter_exec import Session, SessionManager
from jupyter_exec.e2b import E2BConfig, E2BServer

__all__ = [
    "create_case",
    "create_docker_case",
    "files_case",
    "kill_case",
    "kill_docker_case",
    "run_code_case",
]

KEY = "benchmark-key"


class _Running:
    def __init__(self, box: dict[str, Any]) -> None:
        self.url = f"http://127.0.0.1:{box['server'].ports[0]}"
        self._box = box

    def wait_for_pools(self) -> None:
        """Until every warm pool is full again (between two sandboxes of the pool row)."""
        waiting = self._box["server"].manager.wait_for_pools()
        asyncio.run_coroutine_threadsafe(waiting, self._box["loop"]).result(120)


@contextmanager
def _server(config: E2BConfig) -> Iterator[_Running]:
    """A server on its own loop in a thread."""
    started = threading.Event()
    box: dict[str, Any] = {}

    async def serve() -> None:
        box["server"] = server = await E2BServer(config).start()
        box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
        started.set()
        await box["stop"].wait()
        await server.stop()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    thread.start()
    if not started.wait(120):
        raise RuntimeError("the E2B server did not start")
    try:
        yield _Running(box)
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(60)


@contextmanager
def _sdk_env(**values: str | None) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    try:
        _set_env(values)
        yield
    finally:
        _set_env(saved)


def _set_env(values: dict[str, str | None]) -> None:
    """Set each variable; None unsets it."""
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@case("e2b-run-code")
def run_code_case(cfg: Config) -> list[Row]:
    """A trivial run_code through the E2B server vs Session.execute directly (same run)."""
    from e2b_code_interpreter import Sandbox

    rounds = 30 if cfg.quick else 200
    with tempfile.TemporaryDirectory(prefix="bench-e2b-") as scratch:
        config = E2BConfig(root_dir=Path(scratch) / "sandboxes", ports=(0,), debug=True,
                           api_key=KEY)  # fmt: skip
        with _server(config) as running, _sdk_env(E2B_DEBUG="true", E2B_SANDBOX_URL=running.url):
            sandbox = Sandbox.create()
            with Session(work_dir=Path(scratch) / "direct", notebook=False) as session:
                for _ in range(10):  # warm both paths
                    sandbox.run_code("1 + 1")
                    session.execute("1 + 1")
                ours, floor = [], []
                progress(f"e2b-run-code: {rounds} rounds")
                for _ in range(rounds):
                    start = time.perf_counter()
                    assert sandbox.run_code("1 + 1").text == "2"
                    ours.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    session.execute("1 + 1")
                    floor.append(time.perf_counter() - start)
    return [
        Row(
            "e2b run_code (trivial)",
            median(ours) * 1000,
            median(floor) * 1000,
            "ms",
            f"floor = Session.execute; median of {rounds}; p95 {percentile(ours, 95) * 1000:.1f} "
            f"vs {percentile(floor, 95) * 1000:.1f} ms",
            {"ours": ours, "floor": floor},
        )
    ]


@case("e2b-files")
def files_case(cfg: Config) -> list[Row]:
    """Writing and reading a 64 MiB file through the E2B SDK vs the same bytes on disk directly."""
    from e2b_code_interpreter import Sandbox

    size = (8 if cfg.quick else 64) << 20
    rounds = 3 if cfg.quick else 7
    payload = os.urandom(size)
    with tempfile.TemporaryDirectory(prefix="bench-e2b-files-") as scratch:
        config = E2BConfig(root_dir=Path(scratch) / "sandboxes", ports=(0,), debug=True,
                           api_key=KEY)  # fmt: skip
        direct = Path(scratch) / "direct.bin"
        with _server(config) as running, _sdk_env(E2B_DEBUG="true", E2B_SANDBOX_URL=running.url):
            sandbox = Sandbox.create()
            times: dict[str, list[float]] = {"write": [], "read": [], "fwrite": [], "fread": []}
            progress(f"e2b-files: {rounds} rounds of {size >> 20} MiB")
            for _ in range(rounds):
                start = time.perf_counter()
                sandbox.files.write("bench.bin", payload)
                times["write"].append(time.perf_counter() - start)
                start = time.perf_counter()
                back = sandbox.files.read("bench.bin", format="bytes")
                times["read"].append(time.perf_counter() - start)
                assert len(back) == size
                start = time.perf_counter()
                direct.write_bytes(payload)
                times["fwrite"].append(time.perf_counter() - start)
                start = time.perf_counter()
                assert len(direct.read_bytes()) == size
                times["fread"].append(time.perf_counter() - start)
    mib = size / (1 << 20)

    def rate(key: str) -> float:
        return mib / median(times[key])

    return [
        Row(
            f"e2b files.write {mib:.0f} MiB (median)",
            rate("write"),
            rate("fwrite"),
            "MiB/s",
            f"higher is better; floor = the same bytes written to disk directly; {rounds} rounds",
            times,
        ),
        Row(
            f"e2b files.read {mib:.0f} MiB (median)",
            rate("read"),
            rate("fread"),
            "MiB/s",
            "higher is better; floor = the same bytes read from disk directly",
        ),
    ]


HOSTED = "ComputeSDK's hosted TTI (create + first command), median: Daytona 0.11 s, E2B 0.44 s"


@dataclass
class _Times:
    command: list[float] = field(default_factory=list)
    run_code: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)


def _direct(root: Path, backend: str, manager: SessionManager | None, i: int) -> float:
    """The floor: the same engine without E2B - a session started (from the pool, if any) to
    its first trivial result. Closing is not timed (as ComputeSDK leaves out destroy)."""
    start = time.perf_counter()
    if manager is not None:
        session = manager.session(f"direct-{i}")
    else:
        session = Session(work_dir=root / f"direct-{i}", backend=backend, timeout=120)  # type: ignore[arg-type]
    assert session.execute("1 + 1").text == "2"
    elapsed = time.perf_counter() - start
    if manager is not None:
        manager.close_session(f"direct-{i}")
        manager.wait_for_pools()
    else:
        session.close()
    return elapsed


def _sandbox_first(running: _Running, first: str) -> float:
    """``Sandbox.create()`` to its first command (``echo``) or run_code result; then kill."""
    from e2b_code_interpreter import Sandbox

    running.wait_for_pools()  # a full pool, as between a user's sandboxes
    start = time.perf_counter()
    sandbox = Sandbox.create()
    if first == "command":
        assert sandbox.commands.run('echo "benchmark"').stdout == "benchmark\n"
    else:
        assert sandbox.run_code("1 + 1").text == "2"
    elapsed = time.perf_counter() - start
    sandbox.kill()
    return elapsed


def _measure(root: Path, backend: str, pool: int, rounds: int) -> _Times:
    times = _Times()
    config = E2BConfig(root_dir=root / "e2b", ports=(0,), api_key=KEY, pool_size=pool,
                       session_options={"backend": backend})  # fmt: skip
    manager = (
        SessionManager(
            root_dir=root / "direct",
            pool_size=pool,
            session_defaults={"backend": backend, "timeout": 120},
        )
        if pool
        else None
    )
    try:
        if manager is not None:
            manager.wait_for_pools()
        with (
            _server(config) as running,
            _sdk_env(
                E2B_DEBUG=None,
                E2B_API_KEY=KEY,
                E2B_API_URL=running.url,
                E2B_SANDBOX_URL=running.url,
            ),
        ):
            _sandbox_first(running, "command")  # untimed: imports, image and page caches
            _direct(root, backend, manager, -1)
            for i in range(rounds):
                progress(f"e2b-create: {backend}, pool {pool}, {i + 1}/{rounds}")
                order = ("command", "run_code", "floor")
                for kind in order if i % 2 == 0 else order[::-1]:  # drift hits all alike
                    if kind == "floor":
                        times.floor.append(_direct(root, backend, manager, i))
                    else:
                        getattr(times, kind).append(_sandbox_first(running, kind))
    finally:
        if manager is not None:
            manager.shutdown()
    return times


def _rows(backend: str, pool: int, rounds: int, times: _Times) -> list[Row]:
    label = f"{backend}, {'warm pool of 1' if pool else 'no pool'}"
    floor = "a pooled manager session" if pool else "Session(...)"
    rows = []
    for what, values in (("first command", times.command), ("first run_code", times.run_code)):
        rows.append(
            Row(
                f"e2b create -> {what} ({label})",
                median(values),
                median(times.floor),
                "s",
                f"median of {rounds}; p95 {percentile(values, 95):.2f} s vs "
                f"{percentile(times.floor, 95):.2f} s; floor = {floor} to its first result; "
                + HOSTED,
                {"ours": values, "floor": times.floor},
            )
        )
    return rows


def _create_rows(backend: str, cfg: Config) -> list[Row]:
    rounds = 10 if cfg.quick else 30
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-e2b-") as scratch:
        for pool in (0, 1):
            root = Path(scratch) / f"{backend}-{pool}"
            rows += _rows(backend, pool, rounds, _measure(root, backend, pool, rounds))
    return rows


@case("e2b-create")
def create_case(cfg: Config) -> list[Row]:
    """``Sandbox.create()`` to the first result (API mode), measured as ComputeSDK measures
    hosted sandboxes: sequential create, one trivial command, kill (not timed); median and p95.

    Without and with a warm pool, each against the same engine without E2B (a direct
    session start to its first result) in the same run. ``e2b-create-docker``: the same
    for Docker sandboxes.
    """
    return _create_rows("local", cfg)


@case("e2b-create-docker", group="docker")
def create_docker_case(cfg: Config) -> list[Row]:
    """``e2b-create`` for Docker sandboxes (a hardened container per sandbox)."""
    if not docker_available():
        return skipped("e2b create (docker)", "no Docker engine answers")
    return _create_rows("docker", cfg)


KILL_TARGET = 1.0
"""Seconds ``Sandbox.kill()`` may take with a cell running (issue 34's target)."""

BUSY_CELL = "import time\nprint('busy', flush=True)\ntime.sleep(3600)"


def _kill_busy(sandbox: Any) -> float:
    """Start a long cell in ``sandbox``, wait for its first line, then time ``kill()``."""
    started = threading.Event()

    def run() -> None:
        try:
            sandbox.run_code(BUSY_CELL, on_stdout=lambda _: started.set(), timeout=3600,
                             request_timeout=3600)  # fmt: skip
        except Exception:  # the SDK's word that the sandbox was killed: expected
            started.set()

    cell = threading.Thread(target=run, daemon=True)
    cell.start()
    if not started.wait(120):
        raise RuntimeError("the busy cell never printed")
    start = time.perf_counter()
    sandbox.kill()
    elapsed = time.perf_counter() - start
    cell.join(60)
    return elapsed


def _kill_rows(backend: str, cfg: Config) -> list[Row]:
    from e2b_code_interpreter import Sandbox

    rounds = 5 if cfg.quick else 15
    busy: list[float] = []
    idle: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-e2b-kill-") as scratch:
        config = E2BConfig(root_dir=Path(scratch) / "e2b", ports=(0,), api_key=KEY,
                           session_options={"backend": backend})  # fmt: skip
        with (
            _server(config) as running,
            _sdk_env(
                E2B_DEBUG=None,
                E2B_API_KEY=KEY,
                E2B_API_URL=running.url,
                E2B_SANDBOX_URL=running.url,
            ),  # fmt: skip
        ):
            for i in range(rounds):
                progress(f"e2b-kill: {backend}, {i + 1}/{rounds}")
                busy.append(_kill_busy(Sandbox.create()))
                sandbox = Sandbox.create()
                assert sandbox.run_code("1 + 1").text == "2"
                start = time.perf_counter()
                sandbox.kill()
                idle.append(time.perf_counter() - start)
    return [
        Row(
            f"e2b kill() with a cell running ({backend})",
            median(busy),
            median(idle),
            "s",
            f"median of {rounds}; p95 {percentile(busy, 95):.2f} s; target <= {KILL_TARGET:g} s; "
            "floor = kill() of an idle sandbox (was ~35 s busy, then 1-2 s, before the kernel "
            "was killed instead of asked to shut down)",
            {"ours": busy, "floor": idle},
        )
    ]


@case("e2b-kill")
def kill_case(cfg: Config) -> list[Row]:
    """``Sandbox.kill()`` while a cell runs (API mode, local kernels) vs an idle sandbox's."""
    return _kill_rows("local", cfg)


@case("e2b-kill-docker", group="docker")
def kill_docker_case(cfg: Config) -> list[Row]:
    """``e2b-kill`` for Docker sandboxes."""
    if not docker_available():
        return skipped("e2b kill (docker)", "no Docker engine answers")
    return _kill_rows("docker", cfg)
