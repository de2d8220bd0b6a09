"""The AG2 1.x ``CodeEnvironment``, tested with the real ``ag2>=1`` in a venv of its own.

AG2 0.x (``autogen``) and 1.x (``ag2``) are the same distribution, so they
cannot share a venv. A session-scoped fixture makes one with ``ag2>=1`` and this
repository (editable, so the code under test is the working tree) and runs
``tests/scripts/ag2x_drive.py`` inside it. The venv is cached under
``~/.cache/jupyter-exec-tests`` keyed by the Python version and this repo's
dependencies, so only the first run pays for it (about a minute).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parents[1] / "scripts" / "ag2x_drive.py"
CACHE = Path(os.environ.get("JUPYTER_EXEC_TEST_CACHE", Path.home() / ".cache/jupyter-exec-tests"))
AG2_REQUIREMENT = "ag2>=1,<2"

pytestmark = pytest.mark.timeout(900)


def _venv_key() -> str:
    digest = hashlib.sha256()
    digest.update(f"{sys.version_info[:2]}|{AG2_REQUIREMENT}|{REPO}".encode())
    digest.update((REPO / "setup.cfg").read_bytes())
    return digest.hexdigest()[:12]


@pytest.fixture(scope="session")
def ag2x_python() -> Path:
    """The interpreter of a venv holding AG2 1.x and jupyter-exec (made once, then reused)."""
    venv = CACHE / f"ag2x-venv-{_venv_key()}"
    python = venv / "bin" / "python"
    ready = venv / ".ready"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # xdist workers: one builds, the others wait
        if not ready.exists():
            for stale in CACHE.glob("ag2x-venv-*/.ready"):  # this checkout's, older deps
                if stale.read_text().splitlines()[-1:] == [str(REPO)]:
                    shutil.rmtree(stale.parent, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", AG2_REQUIREMENT, "-e", str(REPO)],
                check=True,
                timeout=840,
            )
            ready.write_text(f"{AG2_REQUIREMENT}\n{REPO}")
    return python


def test_sandbox_code_tool_runs_on_a_jupyter_session(ag2x_python: Path, tmp_path: Path) -> None:
    """One run of the driver script (a kernel start, an AG2 import), checked as a whole."""
    done = subprocess.run(
        [str(ag2x_python), str(SCRIPT), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])

    # It is what SandboxCodeTool takes.
    assert report["is_code_environment"] is True
    assert report["languages"] == ["python", "bash"]

    # An agent's tool calls: Python and bash in one kernel, state kept across them.
    assert report["reply"] == "done"
    results = report["tool_results"]
    assert results[0] == "set 45"
    assert results[1].startswith("from bash\nag2x.ipynb")  # bash runs in the work dir
    assert results[2] == "90"  # `total` survived a bash call in between
    assert results[3].startswith("Traceback (most recent call last):")
    assert "ZeroDivisionError: division by zero" in results[3]
    assert "[exit code: 1]" in results[3]  # SandboxCodeTool's suffix for a failure

    # Direct calls: a runaway cell is stopped promptly and the state survives it.
    assert report["direct"] == [True, "46", 0]
    exit_code, seconds = report["runaway"]
    assert exit_code == 124
    assert seconds < 15
    assert report["after_runaway"] == ["45", 0]
    assert report["bash_failure"] == ["[the shell command exited with status 3]", 3]
    assert report["javascript"][1] == 1

    # Every call is a cell of the session notebook.
    notebook = json.loads((tmp_path / "ag2x.ipynb").read_text())
    sources = ["".join(c["source"]) for c in notebook["cells"]]
    assert sources[0].startswith("total = sum(range(10))")
    assert sources[1].startswith("%%bash\necho from bash")
