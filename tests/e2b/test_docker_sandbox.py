"""A sandbox whose kernel runs in the hardened Docker container, through the real SDK."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b import CommandExitException, SandboxException
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import API_KEY, Running, run_server

from jupyter_exec.docker.engine import connect
from jupyter_exec.e2b import E2BConfig
from jupyter_exec.exceptions import DockerUnavailable

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def docker_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    try:
        connect().close()
    except DockerUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true but no Docker engine is available: {exc}", pytrace=False)
        pytest.skip(f"no Docker engine: {exc}")
    root = tmp_path_factory.mktemp("e2b-docker")
    config = E2BConfig(root_dir=root, ports=(0,), debug=True, api_key=API_KEY,
                       session_options={"backend": "docker"})  # fmt: skip
    yield from run_server(config)


def test_run_code_in_the_container(docker_server: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", docker_server.url)
    sandbox = Sandbox.create()
    sandbox.files.write("input.txt", "from the host")
    execution = sandbox.run_code("open('input.txt').read()")
    assert execution.text == "from the host"
    user = sandbox.run_code("import os; os.getuid()")
    assert user.text != "0"  # not root inside the container
    sandbox.run_code("open('output.txt', 'w').write('from the kernel')")
    assert sandbox.files.read("output.txt") == "from the kernel"
    sandbox.files.make_dir("sub")
    result = sandbox.commands.run("id -u; pwd; echo $GREETING", cwd="/home/user/sub",
                                  envs={"GREETING": "hi there"})  # fmt: skip
    uid, cwd, greeting = result.stdout.splitlines()
    assert uid != "0"
    assert cwd.endswith("/sub")
    assert greeting == "hi there"
    with pytest.raises(CommandExitException) as failed:
        sandbox.commands.run("echo partial; exit 3")
    assert failed.value.exit_code == 3
    with pytest.raises(SandboxException, match="stdin"):
        sandbox.commands.run("cat", stdin=True)
    assert Path(docker_server.root, "debug_sandbox_id", "debug_sandbox_id.ipynb").exists()
