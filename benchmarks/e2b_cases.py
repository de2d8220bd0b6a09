"""The E2B server's cost: a trivial ``run_code`` through it vs ``Session.execute`` directly.

Both run in the same process and alternate, so machine drift hits both alike:
the SDK's ``Sandbox.run_code("1 + 1")`` (HTTP, JSON lines, the server's
handler, the session) against a plain :class:`~jupyter_exec.Session` on the
same machine. A second row times ``Sandbox.create()`` to its first result in
API mode, without and with a warm kernel pool (the way hosted sandboxes are
compared: create, one trivial call, median and p95).

``python -m benchmarks --only e2b-run-code,e2b-create`` (needs the ``e2b`` extra)
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.core import Config, Row, case, median, percentile, progress
from jupyter_exec import Session
from jupyter_exec.e2b import E2BConfig, E2BServer

__all__ = ["create_case", "run_code_case"]

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
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
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


@case("e2b-create")
def create_case(cfg: Config) -> list[Row]:
    """Sandbox.create() to the first run_code result (API mode), with and without a warm pool."""
    from e2b_code_interpreter import Sandbox

    rounds = 3 if cfg.quick else 10
    times: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-e2b-") as scratch:
        for pool in (0, 1):
            config = E2BConfig(root_dir=Path(scratch) / f"pool{pool}", ports=(0,),
                               api_key=KEY, pool_size=pool)  # fmt: skip
            with _server(config) as running, _sdk_env(
                E2B_DEBUG=None, E2B_API_KEY=KEY, E2B_API_URL=running.url,
                E2B_SANDBOX_URL=running.url,
            ):  # fmt: skip
                times[pool] = []
                progress(f"e2b-create: pool {pool}, {rounds} sandboxes")
                for _ in range(rounds):
                    running.wait_for_pools()  # a full pool, as between a user's sandboxes
                    start = time.perf_counter()
                    sandbox = Sandbox.create()
                    assert sandbox.run_code("1 + 1").text == "2"
                    times[pool].append(time.perf_counter() - start)
                    sandbox.kill()
    return [
        Row(
            f"e2b create + first result ({label})",
            median(times[pool]),
            None,
            "s",
            f"median of {rounds}; p95 {percentile(times[pool], 95):.2f} s; hosted, as "
            "ComputeSDK measures them: Daytona 0.11 s, E2B 0.44 s (median)",
            {"seconds": times[pool]},
        )
        for pool, label in ((0, "no pool"), (1, "warm pool of 1"))
    ]
