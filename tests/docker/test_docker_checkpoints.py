"""Durable checkpoints of ``Session(backend="docker")``: the kernel in its container writes them
to the work dir, the host checks them without following the kernel's links, and a kernel
killed with SIGKILL comes back from them in a new container."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import docker
import pytest

from jupyter_exec import Checkpoint, CheckpointError, Session
from jupyter_exec.docker.forking import host_pid
from tests.checkpoint_helpers import signed_manifest
from tests.conftest import read_valid_notebook

pytestmark = pytest.mark.docker

STATE = (
    "import numpy as np, pandas as pd, threading\n"
    "arr = np.arange(50_000)\n"
    "frame = pd.DataFrame({'a': range(100)})\n"
    "rows = [1, 2, 3]\n"
    "def helper(v):\n    return v + 1\n"
    "lock = threading.Lock()\n"
)


def docker_session(work: Path, name: str, image: str, **kwargs: object) -> Session:
    kwargs.setdefault("checkpoint_every", 0)
    return Session(
        backend="docker", work_dir=work, name=name, docker={"image": image}, timeout=120, **kwargs
    )  # type: ignore[arg-type]


def test_docker_checkpoint_on_disk_restores_after_a_restart_and_into_a_new_session(
    kernel_image: str, work: Path, tmp_path: Path
) -> None:
    with docker_session(work, "d", kernel_image) as s:
        s.execute(STATE).raise_for_error()
        mark = s.checkpoint("mark")
        assert mark.path == work / ".d_checkpoints" / "mark"
        assert {"arr", "frame", "rows", "np", "pd"} <= set(mark.names)
        # The image has no cloudpickle: plain pickle, and what it cannot store is named.
        assert mark.environment["serialiser"]["name"] == "pickle"
        assert "install cloudpickle" in mark.skipped["helper"]
        assert "lock" in mark.skipped["lock"]
        s.execute("rows.clear()").raise_for_error()
        s.restart()  # a new container: the snapshot is gone, the files are not
        s.restore(mark)
        assert s.execute("[int(arr.sum()), int(frame.a.sum()), rows]").text == (
            "[1249975000, 4950, [1, 2, 3]]"
        )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.chown(elsewhere, 1000, 1000)
    loaded = Checkpoint.load(mark.path)  # type: ignore[arg-type]
    with docker_session(elsewhere, "n", kernel_image) as t:
        t.restore(loaded)  # copied into .n_checkpoints/, where the container can read it
        assert t.execute("rows + [int(arr[-1])]").text == "[1, 2, 3, 49999]"
        assert (elsewhere / ".n_checkpoints" / "mark" / "manifest.json").is_file()


def test_docker_kernel_killed_comes_back_from_its_automatic_checkpoint(
    kernel_image: str, docker_client: docker.DockerClient, work: Path
) -> None:
    # save_state=False: this holds the recovery from an automatic checkpoint alone.
    with docker_session(work, "k", kernel_image, checkpoint_every=0.001, save_state=False) as s:
        s.execute("import threading\nrows = [1, 2]\nlock = threading.Lock()").raise_for_error()
        s.execute("total = sum(rows)").raise_for_error()
        s.async_session._state.durable.every = 0  # the cells below come after the checkpoint
        s.execute("rows.append(3)\nlater = 'x'").raise_for_error()
        inside = int(s.execute("import os; os.getpid()").text or 0)
        kernel = s.async_session._kernel
        assert kernel is not None
        os.kill(host_pid(kernel.km.provisioner, inside), signal.SIGKILL)
        died = s.execute("later")
        assert died.status == "died"
        assert died.recovered is not None
        assert died.recovered.source == "checkpoint 'auto-2'"
        assert died.recovered.names == ("threading", "total")
        assert set(died.recovered.lost) == {"later", "lock", "os", "rows"}  # os: the pid cell
        nxt = s.execute("[rows, total]")
        assert nxt.text == "[[1, 2], 3]"
        assert nxt.recovered == died.recovered
        nb = read_valid_notebook(s.notebook_path)  # type: ignore[arg-type]
        recovered = nb.cells[died.cell_index].metadata["jupyter_exec"]["recovered"]  # type: ignore[index]
        assert recovered["lost"]["later"] == "changed after it was taken"


def test_docker_damaged_checkpoint_and_planted_links_are_refused(
    kernel_image: str, work: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "host-secret.txt"
    outside.write_text("host only")
    with docker_session(work, "h", kernel_image) as s:
        s.execute("import numpy as np\narr = np.ones(1000)\nkeep = 1").raise_for_error()
        mark = s.checkpoint("mark")
        assert mark.path is not None
        copy = tmp_path / "copy"
        shutil.copytree(mark.path, copy)
        body = json.loads((copy / "manifest.json").read_text())["body"]
        biggest = max(
            (e for e in body["variables"] if e["kind"] == "pickle"), key=lambda e: e["size"]
        )
        target = copy / biggest["file"]
        target.write_bytes(target.read_bytes()[:-8])
        s.execute("keep = 2").raise_for_error()
        with pytest.raises(CheckpointError, match="damaged"):
            s.restore(copy)
        assert s.execute("keep").text == "2"
        # Another environment: the manifest says another numpy (and is signed again).
        foreign = tmp_path / "foreign"
        shutil.copytree(mark.path, foreign)
        body["environment"]["libraries"]["numpy"] = "1.26.4"
        (foreign / "manifest.json").write_text(signed_manifest(body))  # by this host's key
        here = (s.execute("np.__version__").text or "").strip("'")
        with pytest.raises(CheckpointError, match=f"numpy 1.26.4 in the checkpoint, {here} in"):
            s.restore(foreign)
        s.restore(foreign, force=True)
        assert s.execute("[keep, int(arr.sum())]").text == "[1, 1000]"
        # In the container, the kernel replaces its files with links to host paths (as it
        # sees them they lead nowhere; on the host they would lead out of the work dir).
        plant = (
            "import os\n"
            "p = '.h_checkpoints/mark'\n"
            "os.replace(p + '/manifest.json', p + '/kept')\n"
            f"os.symlink({str(outside)!r}, p + '/manifest.json')\n"
            f"os.symlink({str(tmp_path)!r}, '.h_checkpoints/evil')\n"
        )
        s.execute(plant).raise_for_error()
        for path in (mark.path, work / ".h_checkpoints" / "evil"):
            with pytest.raises(CheckpointError, match="symbolic link"):
                s.restore(path)
        # the in-memory one, and the copy restore made of "foreign"; the planted ones refused
        assert [c.name for c in s.checkpoints()] == ["mark", "foreign"]
    assert outside.read_text() == "host only"
