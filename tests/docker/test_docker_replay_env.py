"""A Docker kernel's notebook records its image by id; replay can run in exactly that image."""

from __future__ import annotations

import json
import os
from pathlib import Path

import docker
import pytest

from jupyter_exec import Session
from jupyter_exec.exceptions import ImageError
from jupyter_exec.notebook.replay import replay

pytestmark = pytest.mark.docker


def _work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    os.chown(work, 1000, 1000)
    return work


def test_a_docker_session_records_its_image_and_replays_in_it(
    kernel_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    work = _work(tmp_path)
    (work / "numbers.txt").write_text("1 2 3\n")
    os.chown(work / "numbers.txt", 1000, 1000)
    with Session(backend="docker", work_dir=work, name="dock", docker={"image": kernel_image}) as s:
        s.execute(
            "import numpy as np\nprint(np.array(open('numbers.txt').read().split(), int).sum())"
        )
    metadata = json.loads((work / "dock.ipynb").read_text())["metadata"]
    environment = metadata["jupyter_exec"]["environment"]
    image_id = docker_client.images.get(kernel_image).id
    assert environment["docker_image"] == {"tag": kernel_image, "id": image_id}
    assert environment["backend"] == "docker"
    assert set(environment["packages"]) == {"numpy"}
    assert list(environment["files"]) == ["numbers.txt"]
    report = replay(work / "dock.ipynb", in_recorded_env=True, timeout=120)
    assert report.environment == ()  # the same image, by id
    assert [c.status for c in report.cells] == ["same"]
    here = report.extra["environment"]["here"]
    assert here["docker_image"]["id"] == image_id
    assert here["packages"]["numpy"] == environment["packages"]["numpy"]


def test_a_recorded_image_that_is_not_here_is_a_clear_error(
    kernel_image: str, tmp_path: Path
) -> None:
    work = _work(tmp_path)
    with Session(backend="docker", work_dir=work, name="gone", docker={"image": kernel_image}) as s:
        s.execute("1 + 1")
    path = work / "gone.ipynb"
    raw = json.loads(path.read_text())
    missing = "sha256:" + "0" * 64
    raw["metadata"]["jupyter_exec"]["environment"]["docker_image"]["id"] = missing
    path.write_text(json.dumps(raw))
    with pytest.raises(ImageError, match=f"the recorded Docker image {missing} is not on this"):
        replay(path, in_recorded_env=True)
