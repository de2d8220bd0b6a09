"""An MCP server with ``--sleep-after``: an idle session sleeps (listed so), and the next
``execute_code`` on it wakes it with its state, naming what did not come back."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from tests.checkpoint_helpers import key_env  # noqa: E402
from tests.generation_helpers import process_gone  # noqa: E402

pytestmark = pytest.mark.timeout(180)

DEADLINE = 90.0


def _texts(result: Any) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


@contextlib.asynccontextmanager
async def _server(work_root: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "jupyter_exec.mcp", "--work-dir", str(work_root), "--sleep-after", "0.3"],
        env=key_env(),
    )
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as client:
        await client.initialize()
        yield client


async def test_a_sleeping_session_is_listed_and_woken_by_the_next_call(tmp_path: Path) -> None:
    async with _server(tmp_path) as client:
        code = "import threading, os\nx = 40\nlock = threading.Lock()\nprint(os.getpid())"
        first = await client.call_tool("execute_code", {"code": code, "session": "nap"})
        pid = int(_texts(first).split()[-1])
        end = time.monotonic() + DEADLINE
        while "nap: local, sleeping" not in _texts(await client.call_tool("list_sessions", {})):
            assert time.monotonic() < end, "the idle session never slept"
            await asyncio.sleep(0.1)
        assert process_gone(pid)

        woken = await client.call_tool(
            "execute_code", {"code": "print(x + 2, os.getpid())", "session": "nap"}
        )
        said = _texts(woken)
        assert "[state: generation" in said
        assert "not back: lock" in said
        value, new_pid = said.splitlines()[-1].split()
        assert value == "42"
        assert int(new_pid) != pid


async def test_a_session_asleep_when_the_server_stops_comes_back_after_its_restart(
    tmp_path: Path,
) -> None:
    async with _server(tmp_path) as client:
        await client.call_tool("execute_code", {"code": "kept = 'before'", "session": "nap2"})
        end = time.monotonic() + DEADLINE
        while "nap2: local, sleeping" not in _texts(await client.call_tool("list_sessions", {})):
            assert time.monotonic() < end, "the idle session never slept"
            await asyncio.sleep(0.1)
    async with _server(tmp_path) as client:
        listed = _texts(await client.call_tool("list_sessions", {}))
        assert "nap2: local, dormant" in listed
        back = await client.call_tool("execute_code", {"code": "print(kept)", "session": "nap2"})
        assert _texts(back).splitlines()[-1] == "before"
