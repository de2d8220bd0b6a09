"""Zero configuration: the server on its default ports, the SDK with only E2B_DEBUG=true.

The default ports are fixed (the SDK's debug mode knows no others), so this
test holds a lock file while it uses them: parallel test workers take turns
instead of colliding.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import API_KEY, Running, run_server

from jupyter_exec.e2b import E2BConfig

LOCK = Path("/tmp/jupyter-exec-e2b-default-ports.lock")


@pytest.fixture
def default_ports_server(tmp_path: Path) -> Iterator[Running]:
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        config = E2BConfig(root_dir=tmp_path / "sandboxes", debug=True, api_key=API_KEY)
        yield from run_server(config)


def test_debug_mode_needs_no_configuration(
    default_ports_server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default_ports_server.server.ports == [49999, 49983]
    monkeypatch.setenv("E2B_DEBUG", "true")
    for name in ("E2B_SANDBOX_URL", "E2B_API_URL", "E2B_DOMAIN"):
        monkeypatch.delenv(name, raising=False)
    sandbox = Sandbox.create()
    assert sandbox.run_code("6 * 7").text == "42"  # port 49999
    sandbox.files.write("hello.txt", "hi")  # port 49983
    assert sandbox.commands.run("cat hello.txt").stdout == "hi"
