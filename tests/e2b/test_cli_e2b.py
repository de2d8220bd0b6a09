"""``jupyter-exec e2b`` as a user runs it: a process, E2B_DEBUG=true, the SDK, then SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from e2b_code_interpreter import Sandbox


def test_the_command_serves_the_sdk_and_stops_on_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**os.environ, "E2B_DEBUG": "true"}
    command = [sys.executable, "-m", "jupyter_exec", "e2b", "--port", "0", "--envd-port", "0",
               "--root-dir", str(tmp_path / "sandboxes")]  # fmt: skip
    with subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) as server:
        code = _use(server, monkeypatch)
    assert code == 128 + signal.SIGTERM
    assert (tmp_path / "sandboxes" / "debug_sandbox_id" / "debug_sandbox_id.ipynb").exists()


def _use(server: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """Read the port the server printed, run code through it, stop it; its exit status."""
    try:
        assert server.stderr is not None
        lines = []
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline:
            line = server.stderr.readline()
            if not line:
                break
            lines.append(line)
            found = re.search(r"ports \[(\d+)\]", line)
            port = int(found.group(1)) if found else None
        assert port is not None, "".join(lines)
        monkeypatch.setenv("E2B_DEBUG", "true")
        monkeypatch.setenv("E2B_SANDBOX_URL", f"http://127.0.0.1:{port}")
        sandbox = Sandbox.create()
        assert sandbox.run_code("'served by the command'").text == "served by the command"
    finally:
        server.send_signal(signal.SIGTERM)
    return server.wait(60)
