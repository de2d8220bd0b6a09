"""The MCP server's state tools on a Docker session with a network policy (real MCP client).

After ``fork_session``, ``undo`` and ``restore_checkpoint``, the kernel serving a session
still records its connections (the notebook's cell metadata) and the policy's secret, which
the test server echoes back, is redacted from the tool's answer and the notebook. The server
runs the real ``jupyter-exec mcp`` main in a subprocess whose only addition is the test
server's name in the proxy's resolver (as in test_front_network.py); its temporary folder is
the test's, so the proxy's folder can be counted while it runs and seen gone after it exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docker.test_policy_state import (
    FETCH,
    SECRET,
    _Echo,
    _received,
    echo_ca,
    echo_port,
    echo_tls,
)

pytestmark = pytest.mark.docker

__all__ = ["echo_ca", "echo_port", "echo_tls"]  # the fixtures, shared with the Python API's test

WRAPPER = """\
import sys
from jupyter_exec.network import proxy
proxy.resolver_overrides.update({"web.test": "127.0.0.1"})
from jupyter_exec.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """The server's TMPDIR: short, since the proxy's socket path under it has a length limit."""
    folder = Path(tempfile.mkdtemp(prefix="jxt-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.asynccontextmanager
async def _mcp(tmp_path: Path, temp: Path, ca: Path, *args: str) -> AsyncIterator[Any]:
    """The server; ``ca`` is what its proxy trusts to verify the echo server (as
    ``SSL_CERT_FILE``: a policy file names no ``extra_ca``)."""
    mcp = pytest.importorskip("mcp")
    wrapper = tmp_path / "cli.py"
    wrapper.write_text(WRAPPER, encoding="utf-8")
    env = {**os.environ, "TMPDIR": str(temp), "JX_STATE_TOKEN": SECRET.removeprefix("Bearer ")}
    env["SSL_CERT_FILE"] = str(ca)
    params = mcp.StdioServerParameters(
        command=sys.executable, args=[str(wrapper), "mcp", *args], env=env
    )
    async with (
        mcp.stdio_client(params) as streams,
        mcp.ClientSession(streams[0], streams[1]) as client,
    ):
        await client.initialize()
        yield client


def _text(result: Any) -> str:
    assert not getattr(result, "isError", False), result
    return "\n".join(c.text for c in result.content if c.type == "text")


async def _echo(client: Any, session: str, port: int) -> str:
    before = len(_Echo.seen)
    code = f"print(fetch('https://web.test:{port}/echo'))"
    text = _text(await client.call_tool("execute_code", {"code": code, "session": session}))
    assert _received(before) == [SECRET]  # the proxy added it; the server saw it
    return text.strip()


def _recorded(notebook: Path, port: int) -> None:
    """The notebook's last cell: its connection kept, the secret nowhere."""
    text = notebook.read_text(encoding="utf-8")
    assert SECRET not in text
    last = json.loads(text)["cells"][-1]
    network = last["metadata"]["jupyter_exec"]["network"]
    assert [(c["host"], c["port"], c["decision"], c["secret"]) for c in network] == [
        ("web.test", port, "allowed", True)
    ]


@pytest.mark.parametrize("pool", ["0", "1"])
async def test_mcp_fork_undo_and_restore_keep_recording_and_redacting(
    kernel_image: str,
    tmp_path: Path,
    short_tmp: Path,
    echo_port: int,
    echo_ca: Path,
    pool: str,
) -> None:
    """With a warm pool too: the session takes the pooled kernel's proxy over from its lender."""
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps(
            {
                "allow": ["web.test", "127.0.0.1"],
                "secrets": {
                    "web.test": {"Authorization": {"env": "JX_STATE_TOKEN", "prefix": "Bearer "}}
                },
            }
        )
    )
    root = tmp_path / "mcp"
    redacted = "you sent [secret redacted]"
    async with _mcp(
        tmp_path, short_tmp, echo_ca, "--work-dir", str(root), "--env", f"docker:{kernel_image}",
        "--network-policy", str(policy), "--undo-steps", "3", "--pool-size", pool,
    ) as client:  # fmt: skip
        _text(await client.call_tool("execute_code", {"code": FETCH, "session": "p"}))
        assert await _echo(client, "p", echo_port) == redacted
        (notebook,) = (root / "p").glob("p.ipynb")
        _recorded(notebook, echo_port)
        _text(await client.call_tool("checkpoint", {"session": "p", "name": "fetched"}))

        _text(await client.call_tool("fork_session", {"session": "p", "name": "f"}))
        assert await _echo(client, "f", echo_port) == redacted
        _recorded(root / "p" / "f.ipynb", echo_port)

        _text(await client.call_tool("execute_code", {"code": "x = 1", "session": "p"}))
        _text(await client.call_tool("undo", {"session": "p"}))
        assert await _echo(client, "p", echo_port) == redacted
        _recorded(notebook, echo_port)

        arguments = {"session": "p", "checkpoint": "fetched"}
        _text(await client.call_tool("restore_checkpoint", arguments))
        assert await _echo(client, "p", echo_port) == redacted
        _recorded(notebook, echo_port)

        if pool == "0":  # one proxy for the session and its fork (no kernel started its own)
            assert len(list(short_tmp.glob("jxn-*"))) == 1
    assert list(short_tmp.glob("jxn-*")) == []  # closed (its folder removed) when the server ends
