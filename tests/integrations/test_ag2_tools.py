"""The AG2 1.x ``CodeEnvironment``, tested with the real ``ag2>=1`` in a venv of its own.

AG2 0.x (``autogen``) and 1.x (``ag2``) are the same distribution, so they
cannot share a venv. A session-scoped fixture makes one with ``ag2>=1`` and the
package's dependencies and runs ``tests/scripts/ag2x_drive.py`` inside it, with this
checkout first on ``PYTHONPATH`` (:func:`ag2x_environment`), so the code under test is
the working tree. The venv holds no copy of the package and names no checkout: it is
cached under ``~/.cache/jupyter-exec-tests`` keyed by the Python version, the AG2
requirement and the package's ``install_requires`` only, so every clone and worktree
shares one, and only the first run on a machine pays for it (about 35 seconds).
"""

from __future__ import annotations

import configparser
import fcntl
import hashlib
import json
import os
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


def _install_requires() -> list[str]:
    """The package's own dependencies, as ``setup.cfg`` declares them."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg", encoding="utf-8")
    return config["options"]["install_requires"].split()


def _venv_key() -> str:
    digest = hashlib.sha256()
    digest.update(f"{sys.version_info[:2]}|{AG2_REQUIREMENT}".encode())
    digest.update("|".join(_install_requires()).encode())
    return digest.hexdigest()[:12]


def ag2x_environment() -> dict[str, str]:
    """This process's environment with this checkout first on ``PYTHONPATH``: the venv's
    interpreter, and the kernels it starts, import the package from the working tree."""
    path = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


@pytest.fixture(scope="session")
def ag2x_python() -> Path:
    """The interpreter of a venv holding AG2 1.x and the package's dependencies (made once
    per machine and dependency set, then reused by every checkout)."""
    venv = CACHE / f"ag2x-deps-{_venv_key()}"
    python = venv / "bin" / "python"
    ready = venv / ".ready"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # xdist workers and other checkouts: one builds
        if not ready.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", AG2_REQUIREMENT, *_install_requires()],
                check=True,
                timeout=840,
            )
            ready.write_text(AG2_REQUIREMENT + "\n" + "\n".join(_install_requires()) + "\n")
    return python


def test_sandbox_code_tool_runs_on_a_jupyter_session(ag2x_python: Path, tmp_path: Path) -> None:
    """One run of the driver script (a kernel start, an AG2 import), checked as a whole."""
    done = subprocess.run(
        [str(ag2x_python), str(SCRIPT), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=ag2x_environment(),
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
