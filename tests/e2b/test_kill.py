"""``Sandbox.kill()`` while a cell runs: the kernel is gone when kill returns, the cell's caller
is told, and nothing waits for the cell to finish on its own.

Each cell prints its kernel's pid, then sleeps far longer than any test waits;
the test waits for that line (an event, not a delay), kills the sandbox, and
checks at once that the kernel process no longer exists: ``kill()`` answers
only after the kernel is shut down. A close that waits on the busy kernel
(before the fix, it asked it for the cell's state for 30 s: 36 s a kill) is
not done by :data:`KILL_DEADLINE`, and fails.
"""

from __future__ import annotations

import threading
from typing import Any

import psutil
from e2b import SandboxQuery
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import Running

CELL = "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(3600)"

KILL_DEADLINE = 20.0
"""Seconds a kill may take: far above what one takes on a loaded machine (1 to 3 s at a
load of 9 on 2 cores), far below a close that waits for the cell (36 s)."""


class RunningCell:
    """``CELL`` run in a thread; its kernel's process once it printed it, and how it ended."""

    def __init__(self, sandbox: Sandbox, context: Any = None, code: str = CELL) -> None:
        self.code = code
        self._printed: list[str] = []
        self._pid_seen = threading.Event()
        self.raised: BaseException | None = None
        self.returned = False
        self.thread = threading.Thread(target=self._run, args=(sandbox, context), daemon=True)
        self.thread.start()
        assert self._pid_seen.wait(120), "the cell never printed its pid"
        self.kernel = psutil.Process(int("".join(self._printed).split()[0]))
        assert self.kernel.is_running()

    @classmethod
    def of(cls, sandbox: Sandbox, code: str) -> RunningCell:
        """``code`` (which prints its kernel's pid first) running in ``sandbox``."""
        return cls(sandbox, None, code)

    def _on_stdout(self, message: Any) -> None:
        self._printed.append(str(message))
        if "\n" in "".join(self._printed):  # however the kernel chunked the line
            self._pid_seen.set()

    def _run(self, sandbox: Sandbox, context: Any) -> None:
        try:
            sandbox.run_code(self.code, context=context, on_stdout=self._on_stdout, timeout=3600,
                             request_timeout=3600)  # fmt: skip
        except Exception as exc:  # the SDK's word that the sandbox went away
            self.raised = exc
        else:
            self.returned = True

    def ended(self) -> bool:
        self.thread.join(120)
        return not self.thread.is_alive()


def kill(sandbox: Sandbox) -> bool:
    """``sandbox.kill()``, which must be done within :data:`KILL_DEADLINE`; what it returned."""
    answer: list[bool] = []
    done = threading.Event()

    def call() -> None:
        try:
            answer.append(sandbox.kill())
        finally:
            done.set()

    threading.Thread(target=call, name="kill", daemon=True).start()
    assert done.wait(KILL_DEADLINE), f"kill() not done in {KILL_DEADLINE:g} s: it waits on a cell"
    assert answer, "kill() raised"
    return answer[0]


def test_killing_a_sandbox_mid_cell_ends_its_kernel_and_tells_the_cell(api_env: Running) -> None:
    sandbox = Sandbox.create(metadata={"test": "kill mid-cell"})
    cell = RunningCell(sandbox)

    assert kill(sandbox)

    assert not cell.kernel.is_running(), "kill() returned with the kernel still running"
    assert cell.ended(), "the cell's caller still waits after the kill"
    assert cell.raised is not None
    assert not cell.returned
    assert not sandbox.is_running()
    listed = Sandbox.list(query=SandboxQuery(metadata={"test": "kill mid-cell"})).next_items()
    assert listed == []


def test_killing_a_sandbox_ends_the_busy_kernel_of_every_context(api_env: Running) -> None:
    sandbox = Sandbox.create()
    cells = [RunningCell(sandbox), RunningCell(sandbox, sandbox.create_code_context())]
    assert cells[0].kernel.pid != cells[1].kernel.pid

    assert kill(sandbox)

    assert [c.kernel.pid for c in cells if c.kernel.is_running()] == []
    assert all(c.ended() and c.raised is not None for c in cells)


GRACEFUL = (
    "import atexit, os, time\n"
    "atexit.register(lambda: open('shut-down-gracefully', 'w').close())\n"
    "print(os.getpid(), flush=True)\n"
    "time.sleep(3600)"
)
"""A cell whose kernel leaves a file behind if it is asked to shut down (and so runs its exit
handlers): a kill that asks first takes the kernel's ~1 s of shutting down."""


def test_kill_ends_the_busy_kernel_at_once_without_asking_it(api_env: Running) -> None:
    sandbox = Sandbox.create(metadata={"test": "kill at once"})
    cell = RunningCell.of(sandbox, GRACEFUL)

    assert kill(sandbox)

    assert not cell.kernel.is_running()
    assert cell.ended()
    assert cell.raised is not None
    work_dir = api_env.root / sandbox.sandbox_id
    assert work_dir.is_dir()  # the sandbox's files stay
    assert not (work_dir / "shut-down-gracefully").exists(), (
        "the kernel was asked to shut down: kill() waited for it (~1 s) instead of ending it"
    )
