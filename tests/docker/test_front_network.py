"""The network policy's front ends with a real engine: ``jupyter-exec run --allow``, the MCP
server's ``--allow``, and the agent runner telling the model which connection was refused.

A test HTTP server on this machine's loopback is reached by names mapped in the proxy's own
resolver (as in test_docker_network_policy.py). The command-line tests run the real
``jupyter-exec`` main in a subprocess whose only addition is that mapping (:data:`WRAPPER`):
the proxy runs in that process, so that is where the names must resolve.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec import AsyncSession, NetworkPolicy
from jupyter_exec.agents.agent import run_block, run_command
from jupyter_exec.agents.codeblocks import CodeBlock
from jupyter_exec.engine.environments import DockerEnv
from jupyter_exec.engine.loop_thread import run_blocking
from jupyter_exec.integrations.ag2 import SessionCodeExecutor
from jupyter_exec.integrations.ag2_sandbox import JupyterSandbox as AG2Sandbox
from jupyter_exec.integrations.deepagents import JupyterSandbox
from tests.tls_servers import answering, http_server

pytestmark = pytest.mark.docker

AG2Block = pytest.importorskip("autogen.coding.base").CodeBlock  # (its import warns)
BaseSandbox = pytest.importorskip("deepagents.backends.sandbox").BaseSandbox

WRAPPER = """\
import sys
from jupyter_exec.network import proxy
proxy.resolver_overrides.update({"web.test": "127.0.0.1", "evil.test": "127.0.0.1"})
from jupyter_exec.cli import main
sys.exit(main(sys.argv[1:]))
"""


_Handler = answering("hello from the allowed host")


@pytest.fixture
def web_port() -> Iterator[int]:
    with http_server(_Handler, "web.test", "evil.test") as port:
        yield port


def _fetch(url: str) -> str:
    """A cell that fetches ``url`` and prints what came back, swallowing any error."""
    return (
        "import urllib.request, urllib.error\n"
        "try:\n"
        f"    print(urllib.request.urlopen({url!r}, timeout=30).read().decode())\n"
        "except urllib.error.HTTPError as e:\n"
        "    print('refused', e.code)\n"
    )


def test_run_allow_reaches_a_loopback_server_through_the_policy(
    kernel_image: str, tmp_path: Path, web_port: int
) -> None:
    wrapper = tmp_path / "cli.py"
    wrapper.write_text(WRAPPER, encoding="utf-8")
    script = tmp_path / "job.py"
    script.write_text(
        _fetch(f"http://web.test:{web_port}/") + "# %%\n" + _fetch(f"http://evil.test:{web_port}/"),
        encoding="utf-8",
    )
    work = tmp_path / "work"
    done = subprocess.run(
        [sys.executable, str(wrapper), "run", str(script), "--env", f"docker:{kernel_image}",
         "--allow", "web.test", "--allow", "127.0.0.1", "--work-dir", str(work)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "hello from the allowed host" in done.stdout
    assert "refused 403" in done.stdout
    assert len(_Handler.seen) == 1  # evil.test maps to the same server: it never got there
    notebook = json.loads((work / "job.ipynb").read_text(encoding="utf-8"))
    decided = [c["metadata"]["jupyter_exec"]["network"] for c in notebook["cells"]]
    assert [(n[0]["host"], n[0]["decision"]) for n in decided] == [
        ("web.test", "allowed"),
        ("evil.test", "denied"),
    ]


async def test_the_model_is_told_which_connection_was_refused(
    kernel_image: str, tmp_path: Path, web_port: int
) -> None:
    policy = NetworkPolicy(allow=["web.test", "127.0.0.1"])
    async with AsyncSession(
        work_dir=tmp_path, backend="docker", docker={"image": kernel_image}, network=policy
    ) as session:
        code = _fetch(f"http://evil.test:{web_port}/") * 2 + _fetch(f"http://web.test:{web_port}/")
        result = await run_block(session, CodeBlock.from_code(code, "python"))
    assert result.exit_code == 0  # the code caught the refusals: only the runner tells the model
    line = (
        f"[connection to evil.test:{web_port} denied by the session's network policy "
        "(allowed: web.test, 127.0.0.1): not in the allow list]"
    )
    assert result.text == (
        f"refused 403\nrefused 403\nhello from the allowed host\n{line}"
    )  # once per host, after the output; the allowed host is not mentioned


@contextlib.asynccontextmanager
async def _mcp(wrapper: Path, *args: str) -> AsyncIterator[Any]:
    mcp = pytest.importorskip("mcp")
    params = mcp.StdioServerParameters(command=sys.executable, args=[str(wrapper), "mcp", *args])
    async with (
        mcp.stdio_client(params) as streams,
        mcp.ClientSession(streams[0], streams[1]) as client,
    ):
        await client.initialize()
        yield client


def _is_error(result: Any) -> bool:
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


@pytest.mark.parametrize("pool", ["0", "1"])
async def test_mcp_server_sessions_follow_the_servers_policy(
    kernel_image: str, tmp_path: Path, web_port: int, pool: str
) -> None:
    """With a warm pool too: pooled kernels are keyed by the policy and keep its proxy."""
    wrapper = tmp_path / "cli.py"
    wrapper.write_text(WRAPPER, encoding="utf-8")
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"allow": ["web.test"], "deny": ["evil.test"]}))
    async with _mcp(
        wrapper, "--work-dir", str(tmp_path / "mcp"), "--env", f"docker:{kernel_image}",
        "--network-policy", str(policy), "--allow", "127.0.0.1", "--pool-size", pool,
    ) as client:  # fmt: skip
        allowed = await client.call_tool(
            "execute_code", {"code": _fetch(f"http://web.test:{web_port}/")}
        )
        assert _text(allowed).strip() == "hello from the allowed host"
        denied = await client.call_tool(
            "execute_code",
            {
                "code": f"import urllib.request\nurllib.request.urlopen('http://evil.test:{web_port}/')"
            },
        )
        assert _is_error(denied)
        assert "HTTPError: HTTP Error 403" in _text(denied)
        assert _text(denied).endswith(
            f"[connection to evil.test:{web_port} denied by the session's network policy "
            "(allowed: web.test, 127.0.0.1; denied: evil.test): denied by rule 'evil.test']"
        )
        listing = _text(await client.call_tool("list_sessions", {}))
        assert "default: docker, alive" in listing
        assert "network policy (allowed: web.test, 127.0.0.1; denied: evil.test)" in listing
        local = await client.call_tool("execute_code", {"code": "1", "session": "l",
                                                        "backend": "local"})  # fmt: skip
        assert _is_error(local)
        assert "Docker only" in _text(local)
    assert len(_Handler.seen) == 1


def test_e2b_sandboxes_follow_the_servers_policy(
    tmp_path: Path, web_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import re
    import signal
    import time

    from e2b_code_interpreter import Sandbox

    wrapper = tmp_path / "cli.py"
    wrapper.write_text(WRAPPER, encoding="utf-8")
    command = [sys.executable, str(wrapper), "e2b", "--port", "0", "--envd-port", "0",
               "--backend", "docker", "--allow", "web.test", "--allow", "127.0.0.1",
               "--root-dir", str(tmp_path / "sandboxes")]  # fmt: skip
    env = {**os.environ, "E2B_DEBUG": "true"}
    with subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) as server:
        try:
            assert server.stderr is not None
            port = None
            deadline = time.monotonic() + 60
            while port is None and time.monotonic() < deadline:
                found = re.search(r"ports \[(\d+)\]", server.stderr.readline() or "-")
                port = int(found.group(1)) if found else None
                assert server.poll() is None
            monkeypatch.setenv("E2B_DEBUG", "true")
            monkeypatch.setenv("E2B_SANDBOX_URL", f"http://127.0.0.1:{port}")
            sandbox = Sandbox.create()
            allowed = sandbox.run_code(_fetch(f"http://web.test:{web_port}/"))
            assert allowed.logs.stdout == ["hello from the allowed host\n"]
            denied = sandbox.run_code(_fetch(f"http://evil.test:{web_port}/"))
            assert denied.logs.stdout == ["refused 403\n"]
            script = sandbox.commands.run(f'python -c "{_fetch(f"http://evil.test:{web_port}/")}"')
            assert script.stdout == "refused 403\n"
        finally:
            server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 128 + signal.SIGTERM
    assert len(_Handler.seen) == 1


def test_every_adapter_tells_the_model(kernel_image: str, tmp_path: Path, web_port: int) -> None:
    """AG2 0.x (cells), Deep Agents and AG2 1.x's Sandbox (commands, as processes beside the
    kernel): the refusal is in what each hands its framework, once per host."""
    policy = {"allow": ["web.test", "127.0.0.1"]}
    line = (
        f"[connection to evil.test:{web_port} denied by the session's network policy "
        "(allowed: web.test, 127.0.0.1): not in the allow list]"
    )
    evil = _fetch(f"http://evil.test:{web_port}/")
    image = DockerEnv(image=kernel_image)
    (tmp_path / "ag2").mkdir()
    with SessionCodeExecutor(tmp_path / "ag2", environment=image, network=policy) as executor:
        result = executor.execute_code_blocks([AG2Block(code=evil, language="python")])
        assert result.exit_code == 0
        assert result.output == f"refused 403\n{line}"

    sandbox = JupyterSandbox(tmp_path / "deep", environment=DockerEnv(image=kernel_image,
                             network=policy))  # fmt: skip
    assert isinstance(sandbox, BaseSandbox)
    try:
        command = f'python -c "{evil}" && python -c "{evil}"'
        response = sandbox.execute(command)
        assert response.exit_code == 0
        assert response.output == f"refused 403\nrefused 403\n{line}\n"
        notebook = json.loads(sandbox.session.notebook_path.read_text(encoding="utf-8"))
        recorded = notebook["cells"][-1]
        assert "".join(recorded["outputs"][0]["text"]) == "refused 403\nrefused 403\n"  # as written
        clean = sandbox.execute("echo fine")
        assert clean.output == "fine\n"
    finally:
        sandbox.session.close()

    async def shell() -> Any:
        box = AG2Sandbox(tmp_path / "ag2-1", environment=image, network=policy)
        try:
            session = await box.session()
            return await run_command(session, f'python -c "{evil}"')
        finally:
            await box.aclose()

    ran = run_blocking(shell())
    assert ran.output == f"refused 403\n{line}\n"
    assert [(c.host, c.decision) for c in ran.connections] == [("evil.test", "denied")]


def test_smolagents_and_langchain_tell_the_model(
    kernel_image: str, tmp_path: Path, web_port: int
) -> None:
    """The same line through smolagents' executor (its logs and its AgentError) and LangChain's
    tool, with the policy given in the environment (``DockerEnv(network=...)``)."""
    smolagents = pytest.importorskip("smolagents")
    from jupyter_exec.integrations.langchain import JupyterSessions, python_tool
    from jupyter_exec.integrations.smolagents import JupyterExecutor

    environment = DockerEnv(image=kernel_image, network={"allow": ["web.test", "127.0.0.1"]})
    line = (
        f"[connection to evil.test:{web_port} denied by the session's network policy "
        "(allowed: web.test, 127.0.0.1): not in the allow list]"
    )
    caught = _fetch(f"http://evil.test:{web_port}/")
    raised = f"import urllib.request\nurllib.request.urlopen('http://evil.test:{web_port}/')"
    with JupyterExecutor(work_dir=tmp_path / "smol", environment=environment, timeout=60) as ex:
        assert ex(caught).logs == f"refused 403\n{line}"
        with pytest.raises(smolagents.utils.AgentError) as failed:
            ex(raised)
        assert str(failed.value).endswith(line)
    with JupyterSessions(tmp_path / "lc", environment=environment, per_thread=False) as sessions:
        assert python_tool(sessions).invoke({"code": caught}) == f"refused 403\n{line}"
