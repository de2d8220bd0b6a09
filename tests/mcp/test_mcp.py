"""The MCP server, driven by the official SDK's own client over stdio and streamable HTTP.

One server process per transport serves every test of this module; the tests
use distinct session names so they do not depend on each other's state.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from tests.checkpoint_helpers import key_env  # noqa: E402
from tests.cli_helpers import stop_process  # noqa: E402
from tests.ports import free_port  # noqa: E402

pytestmark = pytest.mark.timeout(180)

TOKEN = "test-token-of-this-module"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_error(result: Any) -> bool:
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


def _mime(item: Any) -> str:
    return str(getattr(item, "mime_type", getattr(item, "mimeType", "")))


def _texts(result: Any) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


@contextlib.asynccontextmanager
async def _stdio(work_root: Path, *extra: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "jupyter_exec.mcp",
            "--work-dir",
            str(work_root),
            "--timeout",
            "30",
            *extra,
        ],
        env=key_env(),
    )
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as client:
        await client.initialize()
        yield client


async def test_every_tool_over_stdio(tmp_path: Path) -> None:
    async with _stdio(tmp_path) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert tools >= {
            "execute_code",
            "list_sessions",
            "restart_session",
            "interrupt_session",
            "close_session",
            "read_notebook",
            "list_files",
            "read_file",
        }

        result = await client.call_tool(
            "execute_code", {"code": "x = 6 * 7\nprint('x is', x)", "session": "a"}
        )
        assert not _is_error(result)
        assert "x is 42" in _texts(result)

        # State persists, and a plot comes back as image content (shown and saved both).
        plot = (
            "import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n"
            "import matplotlib.pyplot as plt\n"
            "fig, ax = plt.subplots(); ax.scatter(range(x), range(x))\n"
            "fig.savefig('scatter.png'); plt.show()"
        )
        result = await client.call_tool("execute_code", {"code": plot, "session": "a"})
        images = [c for c in result.content if c.type == "image"]
        assert images, _texts(result)
        assert all(_mime(i) == "image/png" for i in images)
        assert base64.b64decode(images[0].data).startswith(PNG_MAGIC)
        assert "scatter.png" in _texts(result)
        assert (tmp_path / "a" / "scatter.png").is_file()

        # Shell runs in the same session's cwd; errors come back short and clean.
        result = await client.call_tool(
            "execute_code", {"code": "ls scatter.png && exit 2", "session": "a", "language": "bash"}
        )
        assert "scatter.png" in _texts(result)
        assert "exited with status 2" in _texts(result)
        assert _is_error(result)  # a failing cell is a failed call
        result = await client.call_tool("execute_code", {"code": "1/0", "session": "a"})
        assert _is_error(result)
        assert "ZeroDivisionError: division by zero" in _texts(result)
        assert "\x1b[" not in _texts(result)

        listing = _texts(await client.call_tool("list_sessions", {}))
        assert "a: local, alive" in listing

        files = _texts(await client.call_tool("list_files", {"session": "a"}))
        assert "scatter.png" in files
        assert "a.ipynb" in files

        fetched = await client.call_tool("read_file", {"session": "a", "path": "scatter.png"})
        assert fetched.content[0].type == "image"
        escaped = await client.call_tool("read_file", {"session": "a", "path": "../a/../../x"})
        assert _is_error(escaped)
        assert "outside the work dir" in _texts(escaped)

        notebook = _texts(await client.call_tool("read_notebook", {"session": "a"}))
        assert "x = 6 * 7" in notebook
        assert "x is 42" in notebook

        # Interrupt a running call from a concurrent one; the session keeps its state.
        started = time.monotonic()
        running = asyncio.create_task(
            client.call_tool(
                "execute_code", {"code": "import time; time.sleep(60)", "session": "a"}
            )
        )
        await asyncio.sleep(1.5)
        await client.call_tool("interrupt_session", {"session": "a"})
        interrupted = await asyncio.wait_for(running, 20)
        assert time.monotonic() - started < 20
        assert "KeyboardInterrupt" in _texts(interrupted)
        assert "42" in _texts(await client.call_tool("execute_code", {"code": "x", "session": "a"}))

        restarted = await client.call_tool("restart_session", {"session": "a"})
        assert "restarted" in _texts(restarted)
        after = await client.call_tool("execute_code", {"code": "x", "session": "a"})
        assert "NameError" in _texts(after)

        closed = await client.call_tool("close_session", {"session": "a"})
        assert "closed" in _texts(closed)
        missing = await client.call_tool("read_notebook", {"session": "a"})
        assert _is_error(missing)
        assert "no session named 'a'" in _texts(missing)


async def test_timeout_returns_promptly_over_stdio(tmp_path: Path) -> None:
    async with _stdio(tmp_path) as client:
        started = time.monotonic()
        result = await client.call_tool(
            "execute_code", {"code": "y = 1\nwhile True: pass", "session": "t", "timeout": 1}
        )
        assert time.monotonic() - started < 15
        assert "ExecutionTimeout" in _texts(result)
        result = await client.call_tool("execute_code", {"code": "y + 1", "session": "t"})
        assert "2" in _texts(result)


async def _until_listed(client: ClientSession, text: str, timeout: float = 60.0) -> str:
    """list_sessions' text once it contains ``text`` (pools fill and culls happen meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        listing = _texts(await client.call_tool("list_sessions", {}))
        if text in listing:
            return listing
        assert time.monotonic() < deadline, listing
        await asyncio.sleep(0.2)


async def test_pool_serves_the_first_call_and_the_session_limit_holds(tmp_path: Path) -> None:
    async with _stdio(tmp_path, "--pool-size", "1", "--max-sessions", "1") as client:
        await _until_listed(client, "1/1 kernels ready")
        called = time.time()
        code = "import os, psutil\nprint(psutil.Process(os.getpid()).create_time(), os.getcwd())"
        result = await client.call_tool("execute_code", {"code": code, "session": "a"})
        assert not _is_error(result), _texts(result)
        created, cwd = _texts(result).split()
        # The kernel existed before the call was made, and now runs in the session's work dir.
        assert float(created) < called
        assert Path(cwd).resolve() == (tmp_path / "a").resolve()
        listing = _texts(await client.call_tool("list_sessions", {}))
        assert "a: local, alive" in listing
        assert "kernel from the warm pool" in listing
        assert "In [1]" in _texts(await client.call_tool("read_notebook", {"session": "a"}))

        # --max-sessions 1: a second session is refused with a clear tool error ...
        refused = await client.call_tool("execute_code", {"code": "1", "session": "b"})
        assert _is_error(refused)
        message = _texts(refused)
        assert "cannot start session 'b'" in message
        assert "--max-sessions" in message
        assert "close_session" in message
        assert not (tmp_path / "b").exists()
        # ... while the open one goes on, and closing it makes room.
        kept = await client.call_tool("execute_code", {"code": "1 + 1", "session": "a"})
        assert _texts(kept).strip() == "2"
        await client.call_tool("close_session", {"session": "a"})
        result = await client.call_tool("execute_code", {"code": "print('b')", "session": "b"})
        assert _texts(result).strip() == "b"


async def test_idle_sessions_are_culled(tmp_path: Path) -> None:
    async with _stdio(tmp_path, "--cull-idle", "1") as client:
        result = await client.call_tool("execute_code", {"code": "z = 1", "session": "c"})
        assert not _is_error(result), _texts(result)
        await _until_listed(client, "no sessions yet", timeout=30)
        assert "z = 1" in (tmp_path / "c" / "c.ipynb").read_text()  # the record stays
        missing = await client.call_tool("read_notebook", {"session": "c"})
        assert "no session named 'c'" in _texts(missing)
        # The name can be used again: a fresh kernel, the old notebook kept.
        again = await client.call_tool("execute_code", {"code": "z", "session": "c"})
        assert "NameError" in _texts(again)
        assert (tmp_path / "c" / "c-2.ipynb").is_file()


@contextlib.asynccontextmanager
async def _http(
    work_root: Path, *extra: str, refusals: bool = False
) -> AsyncIterator[ClientSession]:
    """A server over streamable HTTP in its own process, and the SDK's client connected to it."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_exec.mcp",
            "--transport",
            "http",
            "--port",
            str(port),
            "--work-dir",
            str(work_root),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "JUPYTER_EXEC_MCP_TOKEN": TOKEN},
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            await asyncio.sleep(0.2)
        url = f"http://127.0.0.1:{port}/mcp"
        if refusals:
            await _refusals(url, port)
        try:
            from mcp.client.streamable_http import streamable_http_client as connect
        except ImportError:  # mcp 1.x
            from mcp.client.streamable_http import (  # type: ignore[attr-defined,no-redef]
                streamablehttp_client as connect,
            )
        import httpx2

        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
        async with (
            http,
            connect(url, http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as client,
        ):
            await client.initialize()
            yield client
    finally:
        stop_process(process)
        if process.stderr is not None:
            process.stderr.close()


async def test_streamable_http_round_trip(tmp_path: Path) -> None:
    async with _http(tmp_path, refusals=True) as client:
        result = await client.call_tool("execute_code", {"code": "print(2 + 3)"})
        assert _texts(result).strip() == "5"
        assert not _is_error(result)
        assert "default: local, alive" in _texts(await client.call_tool("list_sessions", {}))


async def _refusals(url: str, port: int) -> None:
    """No token, a wrong token, a foreign Host or Origin: each refused before any tool runs."""
    import httpx2

    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    good = {**accept, "Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(timeout=10) as http:
        assert (await http.post(url, json=hello, headers=accept)).status_code == 401
        wrong = {**accept, "Authorization": "Bearer not-the-token"}
        assert (await http.post(url, json=hello, headers=wrong)).status_code == 401
        rebinding = {**good, "Host": f"attacker.example:{port}"}
        assert (await http.post(url, json=hello, headers=rebinding)).status_code in (400, 403, 421)
        cross_site = {**good, "Origin": "http://attacker.example"}
        assert (await http.post(url, json=hello, headers=cross_site)).status_code in (400, 403)
        # The probe is not a test that cannot fail: the same request with the token is served.
        assert (await http.post(url, json=hello, headers=good)).status_code == 200


def test_http_refuses_non_loopback(tmp_path: Path) -> None:
    from jupyter_exec.cli import main

    assert (
        main(["mcp", "--transport", "http", "--host", "0.0.0.0", "--work-dir", str(tmp_path)]) == 2
    )


def test_ask_person_needs_docker_kernels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Asking about hosts means a network policy, which only a Docker kernel has."""
    from jupyter_exec.cli import main

    assert main(["mcp", "--ask-person", "--work-dir", str(tmp_path)]) == 2
    assert "--ask-person" in capsys.readouterr().err
    assert not (tmp_path / "default").exists()


def test_ask_person_answers_go_out_on_the_running_call() -> None:
    """The proxy's question reaches the context of the session's running call, and only then."""
    from jupyter_exec.mcp.ask import ElicitingAsk
    from jupyter_exec.network.policy import NetworkRequest

    asker = ElicitingAsk(timeout=5)
    request = NetworkRequest("web.test", 80, "s", 0)
    between = asyncio.run(asker(request))
    assert (between.allowed, between.reason) == (
        False,
        "no tool call was running to ask a person through",
    )
    with asker.running("other", object()):
        assert not asyncio.run(asker(request)).allowed
    assert asker._calls == {}
    assert repr(asker) == "ElicitingAsk(timeout=5)"


def test_help_has_examples() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_exec.mcp", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "examples:" in out
    assert "mcpServers" in out


# -- a session's state: fork, undo, checkpoint, restore -----------------------------------------


async def _value(client: ClientSession, session: str, expression: str) -> str:
    result = await client.call_tool("execute_code", {"code": expression, "session": session})
    assert not _is_error(result), _texts(result)
    return _texts(result).strip()


async def _fails(client: ClientSession, tool: str, arguments: dict[str, Any], words: str) -> str:
    """The call is a failed tool result (isError) whose text says ``words``."""
    result = await client.call_tool(tool, arguments)
    assert _is_error(result), (tool, _texts(result))
    assert words in _texts(result), _texts(result)
    return _texts(result)


async def test_state_tools_over_stdio(tmp_path: Path) -> None:
    async with _stdio(tmp_path, "--undo-steps", "3") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert tools >= {"fork_session", "undo", "checkpoint", "restore_checkpoint",
                         "list_checkpoints"}  # fmt: skip

        # fork: two sessions from p's live state; each diverges, p stays as it was
        await _value(client, "p", "x = 1\ndata = list(range(5))")
        forked = await client.call_tool("fork_session", {"session": "p", "n": 2})
        assert not _is_error(forked), _texts(forked)
        assert "'p-fork-1', 'p-fork-2'" in _texts(forked)
        await _value(client, "p-fork-1", "x += 10; data.append('one')")
        await _value(client, "p-fork-2", "x += 100")
        assert await _value(client, "p", "x, len(data)") == "(1, 5)"
        assert await _value(client, "p-fork-1", "x, len(data)") == "(11, 6)"
        assert await _value(client, "p-fork-2", "x, len(data)") == "(101, 5)"
        listing = _texts(await client.call_tool("list_sessions", {}))
        assert "p-fork-1: local, alive" in listing
        assert "p-fork-2: local, alive" in listing
        assert (tmp_path / "p" / "p-fork-1.ipynb").is_file()  # its own notebook, in p's work dir
        named = await client.call_tool("fork_session", {"session": "p", "name": "alt"})
        assert "'alt'" in _texts(named)
        assert await _value(client, "alt", "x") == "1"
        await _fails(client, "fork_session", {"session": "p", "name": "alt"}, "alt")
        await _fails(client, "fork_session", {"session": "p", "n": 0}, "n must be")
        await _fails(client, "fork_session", {"session": "nobody"}, "no session named 'nobody'")

        # undo: the state from before the last cells
        await _value(client, "u", "y = 1")
        await _value(client, "u", "y = 2")
        undone = await client.call_tool("undo", {"session": "u"})
        assert not _is_error(undone), _texts(undone)
        assert await _value(client, "u", "y") == "1"
        await _fails(client, "undo", {"session": "u", "n": 9}, "step(s) available")
        await _fails(client, "undo", {"session": "nobody"}, "no session named 'nobody'")

        # checkpoint and restore, by name
        await _value(client, "c", "z = [1]")
        taken = await client.call_tool("checkpoint", {"session": "c", "name": "start"})
        assert not _is_error(taken), _texts(taken)
        await _value(client, "c", "z.append(2)")
        listed = _texts(await client.call_tool("list_checkpoints", {"session": "c"}))
        assert listed.startswith("start: after 1 cell(s), taken ")
        restored = await client.call_tool(
            "restore_checkpoint", {"session": "c", "checkpoint": "start"}
        )
        assert not _is_error(restored), _texts(restored)
        assert await _value(client, "c", "z") == "[1]"
        auto = _texts(await client.call_tool("checkpoint", {"session": "c"}))
        assert "'checkpoint-2'" in auto  # numbered after the checkpoints it has
        await _fails(client, "checkpoint", {"session": "c", "name": "start"}, "exists")
        await _fails(client, "restore_checkpoint", {"session": "c", "checkpoint": "nope"}, "'nope'")
        await _fails(client, "list_checkpoints", {"session": "nobody"}, "no session named")
        empty = _texts(await client.call_tool("list_checkpoints", {"session": "u"}))
        assert "no checkpoints yet" in empty


async def test_state_tools_over_http(tmp_path: Path) -> None:
    async with _http(tmp_path, "--max-sessions", "3") as client:
        await _value(client, "h", "w = 'parent'")
        forked = _texts(await client.call_tool("fork_session", {"session": "h", "name": "h2"}))
        assert "'h2'" in forked
        await _value(client, "h2", "w = 'child'")
        assert await _value(client, "h", "w") == "'parent'"
        # the server's limit counts forks: two more would make four sessions
        await _fails(client, "fork_session", {"session": "h", "n": 2}, "--max-sessions")
        assert "h2-1" not in _texts(await client.call_tool("list_sessions", {}))
        # undo is off unless the server was started with --undo-steps
        await _fails(client, "undo", {"session": "h"}, "--undo-steps")
        assert not _is_error(await client.call_tool("checkpoint", {"session": "h2"}))
        await _value(client, "h2", "w = 'later'")
        back = await client.call_tool(
            "restore_checkpoint", {"session": "h2", "checkpoint": "checkpoint-1"}
        )
        assert not _is_error(back), _texts(back)
        assert await _value(client, "h2", "w") == "'child'"
