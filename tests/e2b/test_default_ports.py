"""Zero configuration: the server on its default ports, the SDK with only E2B_DEBUG=true.

The default ports are fixed (the SDK's debug mode knows no others), so this
test holds a lock file while it uses them: parallel test workers take turns
instead of colliding. They also lie in the kernel's ephemeral range, where any
outgoing connection on the machine (a kernel client's, a browser's) may hold one
as its source port for a while: the test waits until both can be bound.
"""

from __future__ import annotations

import errno
import fcntl
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import API_KEY, Running, run_server

from jupyter_exec.e2b import E2BConfig

LOCK = Path("/tmp/jupyter-exec-e2b-default-ports.lock")
PORTS = (49999, 49983)
"""The E2B SDK's debug-mode ports: the code interpreter's, then envd's."""


def _bindable(port: int) -> bool:
    """Whether ``port`` on loopback can be bound now, as the server binds it (reusing a
    closed connection's TIME_WAIT, not a live connection's source port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            return False
    return True


def _wait_for_ports(deadline: float = 300.0) -> None:
    """Until the default ports are free: another connection's use of one as its source port
    ends when that connection does (a test's, a kernel's)."""
    end = time.monotonic() + deadline
    while not all(_bindable(port) for port in PORTS):
        if time.monotonic() > end:
            pytest.fail(f"ports {PORTS} stayed taken for {deadline:.0f} s")
        time.sleep(0.1)


@pytest.fixture
def default_ports_server(tmp_path: Path) -> Iterator[Running]:
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        _wait_for_ports()
        config = E2BConfig(root_dir=tmp_path / "sandboxes", debug=True, api_key=API_KEY)
        yield from run_server(config)


def test_debug_mode_needs_no_configuration(
    default_ports_server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default_ports_server.server.ports == list(PORTS)
    monkeypatch.setenv("E2B_DEBUG", "true")
    for name in ("E2B_SANDBOX_URL", "E2B_API_URL", "E2B_DOMAIN"):
        monkeypatch.delenv(name, raising=False)
    sandbox = Sandbox.create()
    assert sandbox.run_code("6 * 7").text == "42"  # port 49999
    sandbox.files.write("hello.txt", "hi")  # port 49983
    assert sandbox.commands.run("cat hello.txt").stdout == "hi"
