"""A real E2B server on free loopback ports, run on an event loop of its own in a thread.

The server runs on an event loop of its own in a thread, as it would in its
own process; the SDK (sync or async) reaches it over HTTP. The SDK reads its
settings from the environment when a call is made, so each test sets them
with ``monkeypatch``: debug mode, or API mode with a key, and in both cases
``E2B_SANDBOX_URL`` pointing at the server's free port (every route is
served on every port, so this one URL carries code, files and commands).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec.e2b import E2BConfig, E2BServer
from tests.checkpoint_helpers import key_env
from tests.cli_helpers import stop_process

API_KEY = "test-key-1234"


@dataclass
class Running:
    server: E2BServer
    loop: asyncio.AbstractEventLoop
    url: str
    root: Path

    def call(self, coro: Any, timeout: float = 60) -> Any:
        """Run a coroutine on the server's loop (to look at its state from a test)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


def run_server(config: E2BConfig) -> Iterator[Running]:
    started = threading.Event()
    box: dict[str, Any] = {}

    def main() -> None:
        async def serve() -> None:
            try:
                server = await E2BServer(config).start()
            except BaseException as exc:
                box["error"] = exc
                started.set()
                raise
            box["server"], box["loop"] = server, asyncio.get_running_loop()
            box["stop"] = stop = asyncio.Event()
            started.set()
            await stop.wait()
            await server.stop()

        asyncio.run(serve())

    thread = threading.Thread(target=main, name="e2b-server", daemon=True)
    thread.start()
    assert started.wait(60), "the E2B server did not start"
    if "error" in box:
        raise box["error"]
    server: E2BServer = box["server"]
    running = Running(server, box["loop"], f"http://127.0.0.1:{server.ports[0]}", config.root_dir)
    try:
        yield running
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(60)
        assert not thread.is_alive(), "the E2B server did not stop"


# -- a server process, stopped and started again (test_e2b_restart, the registry attacks) ----


@contextmanager
def e2b_process(
    root: Path, monkeypatch: pytest.MonkeyPatch, stop: str, port: int = 0
) -> Iterator[str]:
    """``jupyter-exec e2b`` in API mode on ``port`` (0: a free one); the SDK pointed at it."""
    env = {**os.environ, **key_env(), "E2B_API_KEY": API_KEY}
    env.pop("E2B_DEBUG", None)
    command = [sys.executable, "-m", "jupyter_exec", "e2b", "--no-debug", "--port", str(port),
               "--envd-port", "0", "--root-dir", str(root)]  # fmt: skip
    log = root.parent / f"{root.name}-e2b.log"
    with log.open("ab") as out:  # a file, not a pipe: a full pipe would stall the server
        server = subprocess.Popen(command, env=env, stderr=out, stdout=subprocess.DEVNULL)
    start = log.stat().st_size
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            assert server.poll() is None, log.read_text()
            found = re.search(r"ports \[(\d+)", log.read_text()[start:])
            port = int(found.group(1)) if found else None
            time.sleep(0.1)
        assert port is not None, log.read_text()
        url = f"http://127.0.0.1:{port}"
        monkeypatch.delenv("E2B_DEBUG", raising=False)
        monkeypatch.setenv("E2B_API_URL", url)
        monkeypatch.setenv("E2B_SANDBOX_URL", url)
        monkeypatch.setenv("E2B_API_KEY", API_KEY)
        yield url
    finally:
        if stop == "SIGKILL":
            server.send_signal(signal.SIGKILL)
            server.wait(30)
        else:
            stop_process(server)
