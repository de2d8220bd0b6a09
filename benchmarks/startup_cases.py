"""How fast the command line and the servers start: a fresh process each time, as a user runs them.

* ``cli-version``: ``jupyter-exec --version`` (``python -m jupyter_exec``) to its exit,
  against ``python -c pass``, the interpreter's own start: what is left is what the
  command imports.
* ``e2b-first-answer``: ``jupyter-exec e2b`` spawned until its first HTTP answer
  (``GET /health``), against a bare tornado app answering that route, spawned the
  same way: what is left is the server's own imports and start.
* ``mcp-first-answer``: ``jupyter-exec mcp --transport http`` until its first HTTP
  answer on ``/mcp``, against the MCP SDK's own server with no tool, served by
  uvicorn the same way: most of both is importing the SDK.

Ours and the floor alternate, so machine drift hits both alike; each row is
the median, with the p95 in its notes. Targets (issue 34): ``--version`` under
0.3 s and each server answering within 1 s of its start, on a quiet machine.

``python -m benchmarks --only cli-version,e2b-first-answer,mcp-first-answer``
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

from benchmarks.core import Config, Row, case, median, percentile, progress

__all__ = ["e2b_first_answer_case", "mcp_first_answer_case", "version_case"]

DEADLINE = 120.0
"""Seconds a server gets to answer before the run is a failure, not a number."""

_TORNADO_FLOOR = """\
import asyncio, sys
import tornado.web

class Health(tornado.web.RequestHandler):
    def get(self):
        self.set_status(204)

async def main():
    tornado.web.Application([(r"/health", Health)]).listen(int(sys.argv[1]), "127.0.0.1")
    await asyncio.Event().wait()

asyncio.run(main())
"""
"""The E2B row's floor: one tornado app and one route, what any tornado server costs."""

_MCP_FLOOR = """\
import sys
import uvicorn
from mcp.server.mcpserver import MCPServer

app = MCPServer("floor").streamable_http_app(host="127.0.0.1")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
"""The MCP row's floor: the SDK's server with no tool, served by uvicorn as ours is."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _first_answer(argv: Sequence[str], port: int, path: str, headers: dict[str, str]) -> float:
    """Seconds from spawning ``argv`` to its first HTTP answer on ``port`` (any status)."""
    env = {**os.environ, "E2B_API_KEY": "bench-key", "JUPYTER_EXEC_MCP_TOKEN": "bench-token"}
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{' '.join(argv)} exited with {process.returncode}")
            if time.perf_counter() - start > DEADLINE:
                raise RuntimeError(f"{' '.join(argv)} did not answer in {DEADLINE:.0f} s")
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
            try:
                connection.request("GET", path, headers=headers)
                connection.getresponse().read()
                return time.perf_counter() - start
            except OSError:  # not listening yet
                time.sleep(0.005)
            finally:
                connection.close()
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _alternate(
    rounds: int, ours: Callable[[], float], floor: Callable[[], float]
) -> tuple[list[float], list[float]]:
    mine, base = [], []
    for _ in range(rounds):
        mine.append(ours())
        base.append(floor())
    return mine, base


def _row(name: str, ours: list[float], floor: list[float], notes: str) -> Row:
    return Row(
        name,
        median(ours),
        median(floor),
        "s",
        f"median of {len(ours)}; p95 {percentile(ours, 95):.2f} s vs "
        f"{percentile(floor, 95):.2f} s; {notes}",
        extra={"ours": ours, "floor": floor},
    )


def _exits(argv: Sequence[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


@case("cli-version")
def version_case(cfg: Config) -> list[Row]:
    """``jupyter-exec --version`` to its exit vs ``python -c pass`` (fresh processes)."""
    rounds = 5 if cfg.quick else 20
    progress(f"cli-version: {rounds} rounds")
    _exits([sys.executable, "-m", "jupyter_exec", "--version"])  # warm the file cache
    ours, floor = _alternate(
        rounds,
        lambda: _exits([sys.executable, "-m", "jupyter_exec", "--version"]),
        lambda: _exits([sys.executable, "-c", "pass"]),
    )
    return [_row("jupyter-exec --version", ours, floor, "floor = python -c pass; target 0.3 s")]


@case("e2b-first-answer")
def e2b_first_answer_case(cfg: Config) -> list[Row]:
    """``jupyter-exec e2b`` from spawn to its first HTTP answer vs a bare tornado app."""
    rounds = 3 if cfg.quick else 10
    progress(f"e2b-first-answer: {rounds} rounds")
    with tempfile.TemporaryDirectory(prefix="jx-bench-start-") as scratch:

        def ours() -> float:
            port = _free_port()
            argv = [sys.executable, "-m", "jupyter_exec", "e2b", "--port", str(port),
                    "--envd-port", "0", "--root-dir", os.path.join(scratch, str(port))]  # fmt: skip
            return _first_answer(argv, port, "/health", {})

        def floor() -> float:
            port = _free_port()
            return _first_answer([sys.executable, "-c", _TORNADO_FLOOR, str(port)], port,
                                 "/health", {})  # fmt: skip

        mine, base = _alternate(rounds, ours, floor)
    notes = "floor = a bare tornado app with one route, spawned alike; target 1 s"
    return [_row("jupyter-exec e2b: spawn -> first HTTP answer", mine, base, notes)]


@case("mcp-first-answer")
def mcp_first_answer_case(cfg: Config) -> list[Row]:
    """``jupyter-exec mcp --transport http`` from spawn to its first answer vs the bare SDK."""
    rounds = 3 if cfg.quick else 10
    progress(f"mcp-first-answer: {rounds} rounds")
    auth = {"Authorization": "Bearer bench-token"}
    with tempfile.TemporaryDirectory(prefix="jx-bench-start-") as scratch:

        def ours() -> float:
            port = _free_port()
            argv = [sys.executable, "-m", "jupyter_exec", "mcp", "--transport", "http", "--port",
                    str(port), "--work-dir", os.path.join(scratch, str(port))]  # fmt: skip
            return _first_answer(argv, port, "/mcp", auth)

        def floor() -> float:
            port = _free_port()
            return _first_answer([sys.executable, "-c", _MCP_FLOOR, str(port)], port, "/mcp", {})

        mine, base = _alternate(rounds, ours, floor)
    notes = "floor = the MCP SDK's server with no tool, on uvicorn alike; target 1 s"
    return [_row("jupyter-exec mcp (HTTP): spawn -> first HTTP answer", mine, base, notes)]
