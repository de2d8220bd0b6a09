"""A sandbox's terminal (``sandbox.pty``) through the E2B SDK: a real pseudo-terminal whose
output, input, size and end the SDK sees as it would in E2B's cloud.

Each test waits for what the terminal shows (the SDK's ``on_pty`` callback, or
``wait()``'s end), never for a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

import pytest
from e2b import CommandExitException, Sandbox
from e2b.sandbox.commands.command_handle import PtySize
from e2b_server_helpers import Running

from jupyter_exec.e2b.errors import NotServed
from jupyter_exec.e2b.terminals import start_terminal


def shown(terminal: object, keys: bytes, sandbox: Sandbox) -> tuple[int, str]:
    """Type ``keys`` into ``terminal`` and wait for its end: its exit code and all it showed."""
    output: list[bytes] = []
    sandbox.pty.send_stdin(terminal.pid, keys)  # type: ignore[attr-defined]
    result = terminal.wait(on_pty=output.append)  # type: ignore[attr-defined]
    return result.exit_code, b"".join(output).decode(errors="replace")


def test_a_terminal_takes_keys_and_shows_what_its_shell_prints(api_env: Running) -> None:
    sandbox = Sandbox.create()
    terminal = sandbox.pty.create(PtySize(cols=80, rows=24))
    assert terminal.pid > 0

    code, output = shown(terminal, b"echo $((6 * 7)); tty; tput cols; exit\n", sandbox)

    assert code == 0
    assert "42" in output
    assert "/dev/pts/" in output  # a real terminal, not a pipe
    assert "80" in output
    sandbox.kill()


def test_a_resized_terminal_tells_its_command_the_new_size(api_env: Running) -> None:
    sandbox = Sandbox.create()
    terminal = sandbox.pty.create(PtySize(cols=80, rows=24))

    sandbox.pty.resize(terminal.pid, PtySize(cols=123, rows=45))
    code, output = shown(terminal, b"echo size=$(tput cols)x$(tput lines)\nexit\n", sandbox)

    assert code == 0
    assert "size=123x45" in output
    sandbox.kill()


def test_a_terminal_killed_ends_and_a_second_client_sees_its_output(api_env: Running) -> None:
    sandbox = Sandbox.create()
    terminal = sandbox.pty.create(PtySize(cols=80, rows=24))
    seen = threading.Event()
    joined: list[bytes] = []

    def on_pty(data: bytes) -> None:
        joined.append(data)
        if b"marker-2" in b"".join(joined):  # the shell's answer, not the typed line
            seen.set()

    other = sandbox.pty.connect(terminal.pid)
    waiter = threading.Thread(target=lambda: _wait_quietly(other, on_pty), daemon=True)
    waiter.start()
    sandbox.pty.send_stdin(terminal.pid, b"echo marker-$((1 + 1))\n")
    assert seen.wait(60), b"".join(joined)

    assert sandbox.pty.kill(terminal.pid)
    with pytest.raises(CommandExitException):
        terminal.wait()
    waiter.join(60)
    assert not waiter.is_alive()
    assert terminal.pid not in [p.pid for p in sandbox.commands.list()]
    sandbox.kill()


def _wait_quietly(handle: object, on_pty: object) -> None:
    with contextlib.suppress(CommandExitException):  # killed: its end is the test's own
        handle.wait(on_pty=on_pty)  # type: ignore[attr-defined]


def test_a_command_is_not_a_terminal(api_env: Running) -> None:
    sandbox = Sandbox.create()
    handle = sandbox.commands.run("sleep 600", background=True)
    with pytest.raises(Exception, match="not a terminal"):
        sandbox.pty.resize(handle.pid, PtySize(cols=100, rows=30))
    handle.kill()
    sandbox.kill()


def test_a_docker_sandbox_terminal_is_refused_saying_why(tmp_path: Path) -> None:
    with pytest.raises(NotServed, match=r"terminal .* docker sandbox is not served"):
        asyncio.run(start_terminal("/bin/sh", [], tmp_path, {}, (80, 24), "docker"))
