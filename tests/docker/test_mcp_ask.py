"""``jupyter-exec mcp --ask-person``: an undecided host is put to the person (MCP elicitation).

The real server runs in a subprocess (its proxy resolves the test names to this machine's
loopback, as in test_front_network.py), driven by the SDK's own client with an
``elicitation_callback`` that accepts, one that declines, and one with none at all; the
kernel is a real Docker kernel fetching from a loopback HTTP server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tls_servers import answering, http_server

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

mcp = pytest.importorskip("mcp")
types = pytest.importorskip("mcp.types")

WRAPPER = """\
import sys
from jupyter_exec.network import proxy
proxy.resolver_overrides.update({"asked.test": "127.0.0.1"})
from jupyter_exec.cli import main
sys.exit(main(sys.argv[1:]))
"""

_Handler = answering("hello from the asked host")


@pytest.fixture
def web_port() -> Iterator[int]:
    with http_server(_Handler, "asked.test") as port:
        yield port


@contextlib.asynccontextmanager
async def _client(
    tmp_path: Path, image: str, callback: Any | None, *extra_args: str
) -> AsyncIterator[Any]:
    wrapper = tmp_path / "cli.py"
    wrapper.write_text(WRAPPER, encoding="utf-8")
    args = [str(wrapper), "mcp", "--work-dir", str(tmp_path / "mcp"), "--env", f"docker:{image}",
            "--allow", "127.0.0.1", "--ask-person", *extra_args]  # fmt: skip
    params = mcp.StdioServerParameters(command=sys.executable, args=args)
    extra = {"elicitation_callback": callback} if callback is not None else {}
    async with (
        mcp.stdio_client(params) as streams,
        mcp.ClientSession(streams[0], streams[1], **extra) as client,
    ):
        await client.initialize()
        yield client


def _fetch(port: int) -> str:
    return (
        "import urllib.request, urllib.error\n"
        "try:\n"
        f"    url = 'http://asked.test:{port}/'\n"
        "    print(urllib.request.urlopen(url, timeout=60).read().decode())\n"
        "except urllib.error.HTTPError as e:\n"
        "    print('refused', e.code)\n"
    )


def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def _denied(port: int, why: str) -> str:
    return (
        f"[connection to asked.test:{port} denied by the session's network policy "
        f"(allowed: 127.0.0.1): {why}]"
    )


async def test_a_person_who_accepts_allows_the_host_for_the_session(
    kernel_image: str, tmp_path: Path, web_port: int
) -> None:
    asked: list[str] = []

    async def accept(context: Any, params: Any) -> Any:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"allow": True})

    async with _client(tmp_path, kernel_image, accept) as client:
        first = await client.call_tool("execute_code", {"code": _fetch(web_port)})
        assert _text(first).strip() == "hello from the asked host"
        again = await client.call_tool("execute_code", {"code": _fetch(web_port)})
        assert _text(again).strip() == "hello from the asked host"
    assert len(asked) == 1  # the answer holds for the rest of the session
    assert f"asked.test:{web_port}" in asked[0]
    assert "'default'" in asked[0]
    notebook = json.loads(next((tmp_path / "mcp" / "default").glob("*.ipynb")).read_text())
    network = notebook["cells"][0]["metadata"]["jupyter_exec"]["network"]
    assert [(n["host"], n["decision"], n["reason"]) for n in network] == [
        ("asked.test", "allowed", "allowed by the person")
    ]


async def test_a_person_who_declines_denies_the_host_and_the_model_is_told(
    kernel_image: str, tmp_path: Path, web_port: int
) -> None:
    async def decline(context: Any, params: Any) -> Any:
        return types.ElicitResult(action="decline")

    async with _client(tmp_path, kernel_image, decline) as client:
        result = await client.call_tool("execute_code", {"code": _fetch(web_port)})
    assert _text(result) == f"refused 403\n{_denied(web_port, 'the person declined')}"
    assert _Handler.seen == []


async def test_a_client_without_elicitation_cannot_allow_anything(
    kernel_image: str, tmp_path: Path, web_port: int
) -> None:
    async with _client(tmp_path, kernel_image, None) as client:
        result = await client.call_tool("execute_code", {"code": _fetch(web_port)})
    why = "the MCP client cannot ask a person (no elicitation support)"
    assert _text(result) == f"refused 403\n{_denied(web_port, why)}"
    assert _Handler.seen == []


async def test_a_question_nobody_answers_in_time_is_a_denial(
    kernel_image: str, tmp_path: Path, web_port: int
) -> None:
    async def never(context: Any, params: Any) -> Any:
        await asyncio.Event().wait()

    async with _client(tmp_path, kernel_image, never, "--ask-timeout", "1") as client:
        result = await client.call_tool("execute_code", {"code": _fetch(web_port)})
    assert (
        _text(result) == f"refused 403\n{_denied(web_port, 'the person did not answer within 1 s')}"
    )
    assert _Handler.seen == []
