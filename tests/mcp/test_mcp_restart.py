"""The MCP server answers for the same session names after a restart, state included.

A real ``jupyter-exec mcp`` process over streamable HTTP, driven by the official
SDK's client, stopped with SIGTERM or SIGKILL and started again on the same
work root: ``list_sessions`` shows the sessions it had as dormant, the first tool
call naming one brings it back with its state, and a closed one stays closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402

from jupyter_exec.manager.saved import registry_folder  # noqa: E402
from jupyter_exec.mcp.sessions import KIND  # noqa: E402
from tests.checkpoint_helpers import key_env  # noqa: E402
from tests.cli_helpers import stop_process  # noqa: E402
from tests.ports import free_port  # noqa: E402

pytestmark = pytest.mark.timeout(300)

TOKEN = "test-token-of-the-restart-tests"


def _texts(result: Any) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def _is_error(result: Any) -> bool:
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


@contextlib.asynccontextmanager
async def _server(work_root: Path, stop: str = "SIGTERM") -> AsyncIterator[ClientSession]:
    """The server in its own process, stopped on exit as a process manager would."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter_exec.mcp", "--transport", "http", "--port", str(port),
         "--work-dir", str(work_root), "--timeout", "60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **key_env(), "JUPYTER_EXEC_MCP_TOKEN": TOKEN},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            await asyncio.sleep(0.2)
        try:
            from mcp.client.streamable_http import streamable_http_client as connect
        except ImportError:  # mcp 1.x
            from mcp.client.streamable_http import (  # type: ignore[attr-defined,no-redef]
                streamablehttp_client as connect,
            )
        import httpx2

        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
        async with (
            http,
            connect(f"http://127.0.0.1:{port}/mcp", http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as client,
        ):
            await client.initialize()
            yield client
    finally:
        if stop == "SIGKILL":
            process.send_signal(signal.SIGKILL)
            process.wait(30)
        else:
            stop_process(process)
        if process.stderr is not None:
            process.stderr.close()


async def _run(client: ClientSession, code: str, session: str) -> str:
    result = await client.call_tool("execute_code", {"code": code, "session": session})
    assert not _is_error(result), _texts(result)
    return _texts(result).strip()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
async def test_a_named_session_comes_back_with_its_state_after_a_restart(
    tmp_path: Path, how: str
) -> None:
    async with _server(tmp_path, stop=how) as client:
        assert await _run(client, "x = 41\nprint('set')", "analysis") == "set"
        await _run(client, "y = 1", "scratch")
        closed = await client.call_tool("close_session", {"session": "scratch"})
        assert not _is_error(closed)

    async with _server(tmp_path) as client:
        listing = _texts(await client.call_tool("list_sessions", {}))
        assert "analysis: local, dormant" in listing
        assert "scratch" not in listing  # closed: it does not come back

        assert await _run(client, "print(x + 1)", "analysis") == "42"

        listing = _texts(await client.call_tool("list_sessions", {}))
        assert "analysis: local, alive" in listing
        notebook = _texts(await client.call_tool("read_notebook", {"session": "analysis"}))
        assert notebook.index("x = 41") < notebook.index("print(x + 1)")  # one record, extended
        fresh = await client.call_tool("execute_code", {"code": "y", "session": "scratch"})
        assert "NameError" in _texts(fresh)  # a closed name is a new, empty session


async def test_any_tool_naming_a_dormant_session_brings_it_back(tmp_path: Path) -> None:
    async with _server(tmp_path) as client:
        await _run(client, "open('made.txt', 'w').write('kept')\nz = 7", "files")

    async with _server(tmp_path) as client:
        listed = await client.call_tool("list_files", {"session": "files"})
        assert "made.txt" in _texts(listed), _texts(listed)
        assert await _run(client, "print(z * 6)", "files") == "42"


async def test_a_forged_mcp_registry_entry_is_skipped(tmp_path: Path) -> None:
    """An entry no server signed (a kernel or a local user wrote it) never becomes a session."""
    folder = tmp_path / registry_folder(KIND)
    folder.mkdir(parents=True)
    entry = {
        "name": "planted",
        "work_dir": "planted",
        "notebook": "planted",
        "backend": "local",
        "created": "2026-01-01T00:00:00+00:00",
    }
    (folder / "planted.json").write_text(json.dumps({"v": 1, "entry": entry, "mac": "0" * 64}))
    (tmp_path / "planted").mkdir()
    (tmp_path / "planted" / "planted.ipynb").write_text(
        json.dumps(
            {
                "nbformat": 4,
                "nbformat_minor": 5,
                "metadata": {},
                "cells": [
                    {
                        "cell_type": "code",
                        "id": "a",
                        "metadata": {},
                        "execution_count": 1,
                        "outputs": [],
                        "source": "open('pwned.txt', 'w').write('ran')",
                    }
                ],
            }
        )
    )
    async with _server(tmp_path) as client:
        listing = _texts(await client.call_tool("list_sessions", {}))
        assert "planted" not in listing
        out = await client.call_tool("execute_code", {"code": "print(1)", "session": "planted"})
        assert _texts(out).strip() == "1"  # a new session of that name, nothing re-run
    assert not (tmp_path / "planted" / "pwned.txt").exists()
