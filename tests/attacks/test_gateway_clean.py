"""``jupyter-exec gateway --clean`` takes only what is its own on this machine.

A gateway command's private folder (``jupyter-exec-gateway-*`` in the temp dir) names its
process and its remote dir. Written as another deployment's clean: a folder a killed gateway
of another remote dir left, and a starting gateway's folder whose owner is not written yet,
are both someone else's, and survive; the folder of a killed gateway of this remote dir goes.
(Once, a clean in one test removed the folder another test had just made its SIGKILL leave.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_exec.cli.exits import EXIT_OK
from jupyter_exec.cluster.clean import OWNER_FILE, PRIVATE_PREFIX
from tests.cluster.conftest import loopback_cluster  # noqa: F401  (the cluster's fixture)
from tests.cluster_gateway import gateway_once
from tests.cluster_hosts import Cluster


def _dead_pid() -> int:
    """The pid of a process that has ended (and been waited for)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


@pytest.fixture
def planted() -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def _private_folder(made: list[Path], owner: dict[str, object] | None) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX))
    made.append(folder)
    (folder / "config").mkdir()
    if owner is not None:
        (folder / OWNER_FILE).write_text(json.dumps(owner), encoding="utf-8")
    return folder


def test_clean_takes_only_the_folders_a_killed_gateway_of_its_own_remote_dir_left(
    loopback_cluster: Cluster,  # noqa: F811
    planted: list[Path],
) -> None:
    mine = loopback_cluster.base / f"remote-{uuid.uuid4().hex[:8]}"
    theirs = loopback_cluster.base / f"remote-{uuid.uuid4().hex[:8]}"
    dead = _dead_pid()
    other_deployment = _private_folder(planted, {"pid": dead, "remote_dir": str(theirs)})
    starting = _private_folder(planted, None)  # a command between mkdtemp and its owner
    left_by_mine = _private_folder(planted, {"pid": dead, "remote_dir": str(mine)})

    done = gateway_once(loopback_cluster, "--allow-this-machine", "--remote-dir", str(mine),
                        "--clean")  # fmt: skip

    assert done.returncode == EXIT_OK, done.stderr
    assert other_deployment.is_dir()
    assert (other_deployment / "config").is_dir()
    assert starting.is_dir()
    assert not left_by_mine.exists()  # the clean still does its own work
    assert str(left_by_mine) in done.stdout
