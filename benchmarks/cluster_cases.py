"""Cluster case: kernels placed over SSH by ``jupyter-exec gateway``, against the plain paths.

The loopback cluster of the tests (sshd on 127.0.0.2, tests/cluster_hosts.py)
and the real command (``python -m jupyter_exec gateway``, Kernel Gateway),
measured in the same run as a local session, a plain Jupyter Server kernel
(tests/remote_servers.py) and the raw jupyter_client floor: the cold start of
a session (its first result) and the warm round trip of ``execute("1")``,
interleaved in chunks so load hits every path alike.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks.core import Config, Row, case, median, percentile, progress, scratch_dir
from benchmarks.floor import AsyncFloor
from jupyter_exec import AsyncSession

__all__ = ["gateway_cluster"]

MS = 1000.0


def _start_gateway(cluster: Any, log: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    out = log.with_suffix(".out")
    with out.open("wb") as stdout, log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_exec", "gateway", "--hosts", cluster.hosts[0],
             "--ssh-port", str(cluster.port), "--ssh-user", cluster.user, "--remote-dir",
             str(cluster.remote_dir), "--python", cluster.python, "--allow-this-machine",
             "--port", "0"],
            env={**os.environ, "HOME": str(cluster.home)},
            stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
        )  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        text = out.read_text(encoding="utf-8", errors="replace")
        url = re.search(r"^url:\s+(\S+)$", text, re.MULTILINE)
        token = re.search(r"^token:\s+(\S+)$", text, re.MULTILINE)
        if url and token:
            return process, url.group(1), token.group(1)
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the gateway did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)


@case("gateway-cluster")
def gateway_cluster(cfg: Config) -> list[Row]:
    """Cold start and warm round trip through ``jupyter-exec gateway`` (one SSH host)."""
    root = Path(__file__).resolve().parent.parent
    sys.path[:0] = [str(root), str(root / "tests")]
    from remote_servers import run_server

    from tests.cluster_hosts import start_cluster

    chunks, chunk = (4, 10) if cfg.quick else (10, 25)
    starts = 2 if cfg.quick else cfg.start_repeats
    cluster = start_cluster(Path(tempfile.mkdtemp(prefix="jx-bench-cluster-")))
    try:
        with (
            scratch_dir("gateway-cluster") as work,
            run_server("jupyter_server", work / "srv") as plain,
        ):
            gateway, url, token = _start_gateway(cluster, work / "gateway.log")
            try:
                progress("gateway-cluster: cold starts and warm round trips")
                times = asyncio.run(_measure(work, url, token, plain, chunks, chunk, starts))
            finally:
                gateway.send_signal(signal.SIGTERM)
                gateway.wait(90)
    finally:
        cluster.stop()
    cold, warm = times["cold-gateway"], times["gateway"]
    return [
        Row(
            "session start via jupyter-exec gateway, SSH host (first result)",
            median(cold) * MS,
            median(times["cold-floor"]) * MS,
            "ms",
            f"n={len(cold)}; local session {median(times['cold-local']) * MS:.0f} ms; "
            f"plain Jupyter Server kernel {median(times['cold-plain']) * MS:.0f} ms; "
            "floor = local raw jupyter_client start + first result",
            times,
        ),
        Row(
            "warm round trip via jupyter-exec gateway, SSH host (p50)",
            median(warm) * MS,
            median(times["floor"]) * MS,
            "ms",
            f"n={len(warm)}; local session p50 {median(times['local']) * MS:.2f} ms; plain "
            f"Jupyter Server kernel p50 {median(times['plain']) * MS:.2f} ms; gateway p90 "
            f"{percentile(warm, 90) * MS:.1f} ms; floor = local raw jupyter_client",
            times,
        ),
    ]


async def _measure(
    work: Path, url: str, token: str, plain: Any, chunks: int, chunk: int, starts: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in ("gateway", "plain", "local", "floor")}
    openers: dict[str, Callable[[Path], AsyncSession]] = {
        "gateway": lambda d: AsyncSession(work_dir=d, backend="remote", url=url, token=token),
        "plain": lambda d: AsyncSession(
            work_dir=d, backend="remote", url=plain.url, token=plain.token
        ),
        "local": lambda d: AsyncSession(work_dir=d),
    }
    for i in range(starts):  # cold: a new session to its first result, each path in turn
        for name, opener in openers.items():
            start = time.perf_counter()
            async with opener(work / f"cold-{name}-{i}") as session:
                await session.execute("1")
                times.setdefault(f"cold-{name}", []).append(time.perf_counter() - start)
        start = time.perf_counter()
        floor = await AsyncFloor(work).start()
        await floor.execute("1")
        times.setdefault("cold-floor", []).append(time.perf_counter() - start)
        await floor.close()
    async with (
        openers["gateway"](work / "gateway") as gateway,
        openers["plain"](work / "plain") as plain_session,
        openers["local"](work / "local") as local,
    ):
        floor = await AsyncFloor(work).start()
        runners: dict[str, Callable[[], Awaitable[Any]]] = {
            "gateway": lambda: gateway.execute("1"),
            "plain": lambda: plain_session.execute("1"),
            "local": lambda: local.execute("1"),
            "floor": lambda: floor.execute("1"),
        }
        for run_cell in runners.values():
            for _ in range(5):
                await run_cell()
        for _ in range(chunks):
            for name, run_cell in runners.items():
                for _ in range(chunk):
                    start = time.perf_counter()
                    await run_cell()
                    times[name].append(time.perf_counter() - start)
        await floor.close()
    return times
