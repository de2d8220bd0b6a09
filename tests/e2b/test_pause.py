"""The SDK's ``pause()`` and ``connect()`` against the server: a paused sandbox's kernel is
stopped with its state saved, it is listed as paused, and ``connect`` (or its next use) brings
it back with its variables and files; a second pause says it is paused already, and a pause
without memory keeps the files alone."""

from __future__ import annotations

import time

from e2b import SandboxQuery, SandboxState
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import Running

from tests.generation_helpers import process_gone

DEADLINE = 60.0


def _pid(sandbox: Sandbox) -> int:
    return int(sandbox.run_code("import os; os.getpid()").text)


def _listed(sandbox_id: str, state: SandboxState) -> bool:
    found = Sandbox.list(query=SandboxQuery(state=[state])).next_items()
    return any(s.sandbox_id == sandbox_id for s in found)


def test_pause_stops_the_kernel_and_connect_brings_the_state_back(api_env: Running) -> None:
    sandbox = Sandbox.create()
    try:
        sandbox.run_code("import threading\nx = 40\nlock = threading.Lock()")
        sandbox.files.write("kept.txt", "on disk")
        pid = _pid(sandbox)
        assert sandbox.pause() is True
        end = time.monotonic() + DEADLINE
        while not process_gone(pid):  # pause answers once the kernel is stopped
            assert time.monotonic() < end, "the paused sandbox's kernel still runs"
            time.sleep(0.05)
        assert _listed(sandbox.sandbox_id, SandboxState.PAUSED)
        assert not _listed(sandbox.sandbox_id, SandboxState.RUNNING)
        assert sandbox.pause() is False  # paused already (409)

        back = Sandbox.connect(sandbox.sandbox_id)
        assert _listed(sandbox.sandbox_id, SandboxState.RUNNING)
        assert back.run_code("x + 2").text == "42"
        assert back.run_code("'lock' in globals()").text == "False"  # could not be saved
        assert back.files.read("kept.txt") == "on disk"
        assert _pid(back) != pid
    finally:
        sandbox.kill()


def test_a_pause_without_memory_keeps_the_files_alone(api_env: Running) -> None:
    sandbox = Sandbox.create()
    try:
        sandbox.run_code("x = 1")
        sandbox.files.write("kept.txt", "on disk")
        assert sandbox.pause(keep_memory=False) is True
        back = Sandbox.connect(sandbox.sandbox_id)
        assert back.run_code("'x' in globals()").text == "False"
        assert back.files.read("kept.txt") == "on disk"
    finally:
        sandbox.kill()
