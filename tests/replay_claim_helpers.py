"""A replay held open on purpose, for the tests of who owns a replay's output.

The notebook's first cell says it started (it writes the kernel's pid and folder to a file
the test names), then waits until the test creates a ``go`` file: the test acts while the
replay is known to be running its first cell, and never waits for a fixed time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

WAIT = 120.0
"""Longest wait for an event (a file appearing, a process ending): far above any real one."""


@dataclass(frozen=True)
class Held:
    """The files that drive a held replay: ``started`` (written by its first cell), ``go``."""

    notebook: Path
    started: Path
    go: Path

    def kernel_pid(self) -> int:
        return int(self.started.read_text().split()[0])

    def kernel_folder(self) -> Path:
        return Path(self.started.read_text().split(maxsplit=1)[1])

    def release(self) -> None:
        self.go.write_text("go")


def held_notebook(folder: Path, control: Path, name: str = "held.ipynb") -> Held:
    """A notebook in ``folder`` (with an input, ``data.csv``) whose first cell says it started
    (``control/started``, renamed into place whole) and waits for ``control/go``; its record
    matches what a replay prints, so a replay reproduces it."""
    folder.mkdir(parents=True, exist_ok=True)
    control.mkdir(parents=True, exist_ok=True)
    held = Held(folder / name, control / "started", control / "go")
    (folder / "data.csv").write_text("a,b\n1,2\n")
    wait = (
        "import os, pathlib, time\n"
        f"said = pathlib.Path({str(held.started) + '.tmp'!r})\n"
        "said.write_text(f'{os.getpid()} {os.getcwd()}')\n"
        f"said.rename({str(held.started)!r})  # whole when it appears\n"
        f"while not pathlib.Path({str(held.go)!r}).exists():\n"
        "    time.sleep(0.02)\n"
        "print('ready')"
    )
    use = "open('made_by_cell.txt', 'w').write('x')\nprint(open('data.csv').read().strip())"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "P"}
    first = nbformat.v4.new_code_cell(wait, execution_count=1)
    first.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ready\n")]
    second = nbformat.v4.new_code_cell(use, execution_count=2)
    second.outputs = [nbformat.v4.new_output("stream", name="stdout", text="a,b\n1,2\n")]
    nb.cells = [first, second]
    nbformat.write(nb, held.notebook)
    return held


def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Wait until ``condition()`` holds (an event), failing the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout:.0f} s for {what}")
        time.sleep(0.02)


def start_replay(*argv: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    """``jupyter-exec replay ARGV`` as a process of its own (its pid is the replay's)."""
    return subprocess.Popen(
        [sys.executable, "-m", "jupyter_exec", "replay", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )


def finish(process: subprocess.Popen[str], timeout: float = WAIT) -> tuple[int, str, str]:
    """The exit status, stdout and stderr of ``process`` once it ends (killed if it hangs)."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"the replay did not end in {timeout:.0f} s:\n{err}") from None
    return process.returncode, out, err


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to ``pid`` (a process this test started) if it still runs."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def valid(path: Path) -> Any:
    """The notebook at ``path``, validated by nbformat (raises if it is not a valid one)."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    return nb


def claim_file(output: Path) -> Path:
    """Where a replay's claim on ``output`` lives: ``.<name>.claim`` beside it (the contract,
    spelt out here rather than read from the code under test)."""
    return output.with_name(f".{output.name}.claim")
