"""A real ``jupyter-exec mcp`` process and the SDK's own client, for the MCP task tests.

The process is started apart from any client, so a test can connect, go away,
connect again, SIGKILL the server and start another on the same root. Every
task request goes through the official SDK's ``ClientSession.send_request`` with
the SDK's own request and result types (``mcp.types``): the SDK carries MCP's
task protocol as types, and this is how its client speaks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import ClientSession, types

from tests.checkpoint_helpers import key_env
from tests.cli_helpers import stop_process
from tests.ports import free_port

WAIT = 120.0
"""Seconds any one awaited event may take on a loaded machine before the test fails."""


@dataclass
class McpProcess:
    process: subprocess.Popen[bytes]
    port: int
    token: str

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM killer would: nothing of the server runs after it."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)


@contextlib.contextmanager
def mcp_http(work_root: Path, token: str, *extra: str) -> Iterator[McpProcess]:
    """``jupyter-exec mcp --transport http`` on ``work_root`` until the block ends."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter_exec.mcp", "--transport", "http", "--port", str(port),
         "--work-dir", str(work_root), "--timeout", "300", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **key_env(), "JUPYTER_EXEC_MCP_TOKEN": token},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT
        while True:  # listening is the event waited for
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, "the MCP server exited at start"
            assert time.monotonic() < deadline, "the MCP server did not listen"
            time.sleep(0.1)
        yield McpProcess(process, port, token)
    finally:
        if process.poll() is None:
            stop_process(process)


@contextlib.asynccontextmanager
async def connect(server: McpProcess, token: str | None = None) -> AsyncIterator[ClientSession]:
    """A client connection (its own MCP session) to ``server``, with ``token`` (default its own)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    bearer = server.token if token is None else token
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=WAIT)
    async with (
        http,
        streamable_http_client(f"http://127.0.0.1:{server.port}/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as client,
    ):
        await client.initialize()
        yield client


async def start_task(
    client: ClientSession, code: str, session: str, ttl: int | None = 600_000
) -> types.CreateTaskResult:
    """``execute_code`` as a task (``params.task``): the answer is a CreateTaskResult."""
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(
            name="execute_code",
            arguments={"code": code, "session": session},
            task=types.TaskMetadata(ttl=ttl),
        )
    )
    return await client.send_request(request, types.CreateTaskResult)


async def get_task(client: ClientSession, task_id: str) -> types.GetTaskResult:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await client.send_request(request, types.GetTaskResult)


async def task_result(client: ClientSession, task_id: str) -> types.CallToolResult:
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    return await client.send_request(request, types.CallToolResult)


async def cancel_task(client: ClientSession, task_id: str) -> types.CancelTaskResult:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await client.send_request(request, types.CancelTaskResult)


async def list_tasks(client: ClientSession) -> types.ListTasksResult:
    return await client.send_request(types.ListTasksRequest(), types.ListTasksResult)


async def until_ended(client: ClientSession, task_id: str) -> types.GetTaskResult:
    """Poll ``tasks/get`` at the interval the server suggests until the task is terminal."""
    deadline = time.monotonic() + WAIT
    while True:
        task = await get_task(client, task_id)
        if task.status in ("completed", "failed", "cancelled"):
            return task
        assert time.monotonic() < deadline, f"task {task_id} still {task.status}"
        await asyncio.sleep((task.poll_interval or 1000) / 1000)


async def until_exists(path: Path) -> None:
    """Wait for a file a cell writes: the sign that the cell runs."""
    deadline = time.monotonic() + WAIT
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.05)


def texts(result: Any) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")
