"""``execute_code`` as an MCP task: started, polled, fetched, cancelled, across clients, restarts.

A real ``jupyter-exec mcp`` process, driven by the official SDK's client
(``tests/mcp_tasks_helpers.py``). A cell that must still be running when the
test looks at it waits for a file the test writes (``go``), and a cell the test
must know to be running writes one (``started``): no test depends on how fast
the machine is.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters, stdio_client, types  # noqa: E402
from mcp.client.extension import NotificationBinding  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from tests.checkpoint_helpers import key_env  # noqa: E402
from tests.cli_helpers import stop_process  # noqa: E402
from tests.mcp_tasks_helpers import (  # noqa: E402
    WAIT,
    cancel_task,
    connect,
    get_task,
    list_tasks,
    mcp_http,
    start_task,
    task_result,
    texts,
    until_ended,
    until_exists,
)

pytestmark = pytest.mark.timeout(400)

TOKEN = "test-token-of-the-task-tests"

GATED = (
    "import os, time\n"
    "open('started', 'w').close()\n"
    "while not os.path.exists('go'):\n"
    "    time.sleep(0.05)\n"
    "answer = 6 * 7\n"
    "print('done', answer)"
)
"""A cell that runs until the test lets it end."""


async def test_a_long_cell_runs_as_a_task_polled_to_its_result(tmp_path: Path) -> None:
    with mcp_http(tmp_path, TOKEN) as server:
        async with connect(server) as client:
            init = client.initialize_result
            assert init is not None
            assert init.protocol_version == "2025-11-25"
            tasks_cap = init.capabilities.tasks
            assert tasks_cap is not None
            assert tasks_cap.requests is not None
            assert tasks_cap.requests.tools is not None
            assert tasks_cap.requests.tools.call is not None
            listed = {t.name: t for t in (await client.list_tools()).tools}
            execution = listed["execute_code"].execution
            assert execution is not None
            assert execution.task_support == "optional"
            assert listed["list_sessions"].execution is None  # the others run as plain calls

            created = await start_task(client, GATED, "long")
            task_id = created.task.task_id
            assert created.task.status == "working"
            assert created.task.ttl == 600_000
            await until_exists(tmp_path / "long" / "started")
            assert (await get_task(client, task_id)).status == "working"  # it waits for go
            listed_ids = [t.task_id for t in (await list_tasks(client)).tasks]
            assert task_id in listed_ids

            (tmp_path / "long" / "go").touch()
            ended = await until_ended(client, task_id)
            assert ended.status == "completed", ended.status_message
            result = await task_result(client, task_id)
            assert not result.is_error
            assert "done 42" in texts(result)
            assert result.meta is not None
            assert result.meta["io.modelcontextprotocol/related-task"] == {"taskId": task_id}

            after = await client.call_tool(
                "execute_code", {"code": "print(answer)", "session": "long"}
            )
            assert texts(after).strip() == "42"  # the task's cell ran in the session's kernel

            with pytest.raises(MCPError) as refused:
                await cancel_task(client, task_id)
            assert refused.value.error.code == -32602  # terminal: nothing to cancel


async def test_a_task_outlives_its_client(tmp_path: Path) -> None:
    with mcp_http(tmp_path, TOKEN) as server:
        async with connect(server) as first:
            task_id = (await start_task(first, GATED, "away")).task.task_id
        # The client that made it is gone; the cell goes on.
        await until_exists(tmp_path / "away" / "started")
        async with connect(server) as second:
            assert (await get_task(second, task_id)).status == "working"
            waiting = asyncio.create_task(task_result(second, task_id))  # blocks until the end
            assert (await get_task(second, task_id)).status == "working"  # sent after it
            assert not waiting.done()  # the cell has not ended: no result yet
            (tmp_path / "away" / "go").touch()
            result = await asyncio.wait_for(waiting, WAIT)
            assert "done 42" in texts(result)
            assert (await get_task(second, task_id)).status == "completed"


async def test_a_task_survives_a_sigkill_or_is_reported_lost(tmp_path: Path) -> None:
    with mcp_http(tmp_path, TOKEN) as server:
        async with connect(server) as client:
            finished = (await start_task(client, "kept = 'yes'\nprint('finished')", "s")).task
            assert (await until_ended(client, finished.task_id)).status == "completed"
            running = (await start_task(client, GATED, "s")).task
            await until_exists(tmp_path / "s" / "started")
        server.kill()  # the cell, its kernel and the server end here

    with mcp_http(tmp_path, TOKEN) as server:
        async with connect(server) as client:
            kept = await task_result(client, finished.task_id)
            assert "finished" in texts(kept)  # a result recorded before the kill is served

            lost = await get_task(client, running.task_id)
            assert lost.status == "failed"
            assert lost.status_message is not None
            assert lost.status_message.startswith("lost: the MCP server stopped")
            assert "'s'" in lost.status_message
            result = await task_result(client, running.task_id)
            assert result.is_error
            assert "import os, time ..." in texts(result)  # what it was running
            assert "not in the notebook" in texts(result)
            ids = {t.task_id: t.status for t in (await list_tasks(client)).tasks}
            assert ids == {finished.task_id: "completed", running.task_id: "failed"}

            back = await client.call_tool("execute_code", {"code": "print(kept)", "session": "s"})
            assert texts(back).strip().endswith("yes")  # the session is back from its notebook


async def test_a_task_its_server_stops_under_ends_interrupted_and_recorded(
    tmp_path: Path,
) -> None:
    code = "import time\nprint('got this far', flush=True)\nopen('started', 'w').close()\n"
    code += "time.sleep(300)"
    with mcp_http(tmp_path, TOKEN) as server:
        async with connect(server) as client:
            task_id = (await start_task(client, code, "t")).task.task_id
            await until_exists(tmp_path / "t" / "started")
        began = time.monotonic()
        stop_process(server.process)  # SIGTERM, as a process manager stops it
        print(f"the server stopped {time.monotonic() - began:.2f} s after SIGTERM")

    with mcp_http(tmp_path, TOKEN) as server:
        async with connect(server) as client:
            task = await get_task(client, task_id)
            assert task.status == "failed"
            assert task.status_message is not None
            assert task.status_message.startswith("stopped: the MCP server stopped")
            result = texts(await task_result(client, task_id))
            assert "got this far" in result  # what the cell printed before the stop
            assert "KeyboardInterrupt" in result
            notebook = texts(await client.call_tool("read_notebook", {"session": "t"}))
            assert "KeyboardInterrupt" in notebook  # recorded, interrupted, in the notebook


async def test_cancel_interrupts_the_kernel(tmp_path: Path) -> None:
    code = "import time\nbefore = 1\nopen('started', 'w').close()\ntime.sleep(300)\nafter = 1"
    with mcp_http(tmp_path, TOKEN) as server:
        async with connect(server) as client:
            task_id = (await start_task(client, code, "c")).task.task_id
            await until_exists(tmp_path / "c" / "started")
            started = time.monotonic()
            cancelled = await cancel_task(client, task_id)
            answered = time.monotonic() - started
            assert cancelled.status == "cancelled"
            result = await task_result(client, task_id)
            ended = time.monotonic() - started
            print(f"tasks/cancel answered in {answered:.2f} s; the result in {ended:.2f} s")
            assert "KeyboardInterrupt" in texts(result)  # the kernel was interrupted
            assert (await get_task(client, task_id)).status == "cancelled"  # and stays so
            notebook = texts(await client.call_tool("read_notebook", {"session": "c"}))
            assert "KeyboardInterrupt" in notebook  # recorded as interrupted
            state = await client.call_tool(
                "execute_code", {"code": "print(before, 'after' in dir())", "session": "c"}
            )
            assert texts(state).strip() == "1 False"  # same kernel, state kept, cell cut short


async def test_tasks_over_stdio_notify_their_status(tmp_path: Path) -> None:
    seen: list[types.TaskStatusNotificationParams] = []
    arrived = asyncio.Event()

    async def on_status(params: types.TaskStatusNotificationParams) -> None:
        seen.append(params)
        arrived.set()

    binding = NotificationBinding(
        method="notifications/tasks/status",
        params_type=types.TaskStatusNotificationParams,
        handler=on_status,
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "jupyter_exec.mcp", "--work-dir", str(tmp_path), "--timeout", "300"],
        env=key_env(),
    )
    async with (
        stdio_client(params) as streams,
        ClientSession(streams[0], streams[1], notification_bindings=[binding]) as client,
    ):
        await client.initialize()
        task_id = (await start_task(client, GATED, "io")).task.task_id
        await until_exists(tmp_path / "io" / "started")
        assert not seen
        (tmp_path / "io" / "go").touch()
        await asyncio.wait_for(arrived.wait(), WAIT)
        assert (seen[0].task_id, seen[0].status) == (task_id, "completed")
        assert "done 42" in texts(await task_result(client, task_id))

        with pytest.raises(MCPError) as refused:
            await _as_task(client, "list_sessions", {})
        assert refused.value.error.code == -32601  # only execute_code runs as a task
        with pytest.raises(MCPError) as unknown:
            await get_task(client, "0" * 32)
        assert unknown.value.error.code == -32602


async def _as_task(client: ClientSession, name: str, arguments: dict[str, Any]) -> Any:
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(
            name=name, arguments=arguments, task=types.TaskMetadata(ttl=1000)
        )
    )
    return await client.send_request(request, types.CreateTaskResult)
