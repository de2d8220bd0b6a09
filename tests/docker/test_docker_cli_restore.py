"""``jupyter-exec run --backend docker --restore``: the container's checkpoints, by name and
across the local / Docker line, from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_exec.boundary.naming import checkpoints_folder
from jupyter_exec.cli.exits import EXIT_OK, EXIT_USAGE
from tests.cli_helpers import run_cli

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*argv, cwd=cwd, timeout=240)


def test_a_docker_run_starts_from_the_checkpoint_of_the_one_before(
    kernel_image: str, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    os.chown(work, 1000, 1000)  # the kernel's user in the container writes here
    (tmp_path / "load.py").write_text("a = 1\n# %%\nb = [a, a + 1]\n")
    (tmp_path / "use.py").write_text("print('got', a, b)\n")
    docker = ["--env", f"docker:{kernel_image}", "--work-dir", "work"]

    made = cli("run", "load.py", *docker, "--checkpoint-every", "0.001", cwd=tmp_path)
    assert made.returncode == EXIT_OK, made.stderr
    (auto,) = (work / checkpoints_folder("load")).glob("auto-*")

    again = cli("run", "use.py", *docker, "--restore", auto.name, cwd=tmp_path)
    assert again.returncode == EXIT_OK, again.stderr
    assert "got 1 [1, 2]" in again.stdout

    # into a local kernel: refused (its pickles would run on the host) unless trusted; then
    # the same state, if this Python is the image's major.minor
    local = cli("run", "use.py", "--work-dir", "here", "--restore", str(auto), cwd=tmp_path)
    assert local.returncode == EXIT_USAGE, local.stderr
    assert "written by a Docker kernel" in local.stderr
    assert "--trust-checkpoint-origin" in local.stderr
    trusted = ["--restore", str(auto), "--trust-checkpoint-origin"]
    python = json.loads((auto / "manifest.json").read_text())["body"]["environment"]["python"]
    local = cli("run", "use.py", "--work-dir", "here", *trusted, cwd=tmp_path)
    if python.split(".")[:2] != [str(sys.version_info[0]), str(sys.version_info[1])]:
        assert local.returncode == EXIT_USAGE, local.stderr
        assert f"Python {python} in the checkpoint" in local.stderr
        local = cli("run", "use.py", "--work-dir", "here", *trusted, "--force-restore",
                    cwd=tmp_path)  # fmt: skip
    assert local.returncode == EXIT_OK, local.stderr
    assert "got 1 [1, 2]" in local.stdout
