"""Running ``jupyter-exec`` as a real process, the way a user's shell does, for the CLI tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any


def run_cli(
    *argv: str, cwd: Path | None = None, timeout: float = 180.0, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """``jupyter-exec ARGV`` (as ``python -m jupyter_exec``), its output captured, never raising."""
    return subprocess.run(
        [sys.executable, "-m", "jupyter_exec", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
        **kwargs,
    )


def stop_process(process: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """Stop a server the test started as a process manager would: SIGTERM, then SIGKILL."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
