"""Attacks on where a replay runs: the notebook's record must not move it out of Docker.

The attacker's code ran in a Docker kernel, which writes its own notebook. It edits the
record so that the next ``jupyter-exec replay --in-recorded-env`` of that notebook runs
its cells on the host: it drops ``docker_image`` (once enough to get a host venv), and
more. The cell it wants replayed writes a marker at an absolute host path (absent in the
container) and, wherever it runs, a note of the interpreter that ran it in its cwd.

Real Docker kernels in the real kernel image, the real CLI (its ``main``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec import Session
from jupyter_exec.cli import main
from jupyter_exec.notebook.replay import replay
from tests.docker.conftest import (  # noqa: F401  (fixtures, used by name)
    docker_client,
    kernel_image,
    no_container_left_behind,
    work,
)

DEADLINE = 120.0


def _attack_code(host_marker: Path) -> str:
    """The cell the attacker wants run on the host: it leaves a mark where it ran."""
    return (
        "import os, sys\n"
        "try:\n"
        f"    open({str(host_marker)!r}, 'w').write('ran on the host')\n"
        "except OSError:\n"
        "    pass\n"
        "open('where.txt', 'w').write(sys.executable)\n"
        "print('done')"
    )


@pytest.fixture
def recorded(work: Path, kernel_image: str, tmp_path: Path) -> tuple[Path, Path]:  # noqa: F811
    """A notebook a Docker kernel recorded (its cell leaves marks), and the host marker."""
    outside = tmp_path / "host"
    outside.mkdir()
    marker = outside / "marker.txt"
    with Session(
        backend="docker",
        work_dir=work,
        name="dock",
        docker={"image": kernel_image},
        timeout=DEADLINE,
    ) as session:
        assert session.execute(_attack_code(marker)).stdout == "done\n"
    assert not marker.exists()  # (the container has no such folder)
    (work / "where.txt").unlink()
    return work / "dock.ipynb", marker


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    raw = json.loads(path.read_text())
    change(raw["metadata"])
    path.write_text(json.dumps(raw))


def _drop_image(metadata: dict[str, Any]) -> None:
    metadata["jupyter_exec"]["environment"].pop("docker_image")


def _drop_image_and_backends(metadata: dict[str, Any]) -> None:
    _drop_image(metadata)
    metadata["jupyter_exec"]["environment"]["backend"] = "local"
    metadata["jupyter_exec"]["backend"] = "local"  # left: the image's interpreter path


def _drop_all_but_session(metadata: dict[str, Any]) -> None:
    environment = metadata["jupyter_exec"]["environment"]
    environment.pop("docker_image")
    environment.pop("backend")
    environment["interpreter"].pop("executable")  # left: the session's backend


@pytest.mark.parametrize("forge", [_drop_image, _drop_image_and_backends, _drop_all_but_session])
def test_a_docker_record_stripped_of_its_image_is_not_replayed_on_the_host(
    recorded: tuple[Path, Path],
    forge: Callable[[dict[str, Any]], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, marker = recorded
    _edit(path, forge)
    before = path.read_bytes()
    assert main(["replay", str(path), "--in-recorded-env"]) == 2
    err = capsys.readouterr().err
    assert "was recorded in Docker" in err
    assert "refusing to replay it on the host" in err
    assert "--backend docker" in err
    assert "--backend local" in err
    assert not marker.exists()
    assert not (path.parent / "where.txt").exists()  # no cell ran anywhere
    assert not (path.parent / "dock.replayed_work").exists()  # no run folder made either
    assert not (path.parent / "dock.replayed.ipynb").exists()
    assert path.read_bytes() == before
    # Without --in-recorded-env the same: the host only on the person's word.
    assert main(["replay", str(path)]) == 2
    assert "refusing to replay it on the host" in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.docker
def test_an_intact_docker_record_replays_in_its_image(
    recorded: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path, marker = recorded
    assert main(["replay", str(path), "--in-recorded-env"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("replaying in Docker (image sha256:")
    assert "no --backend given; the record names Docker" in err
    assert not marker.exists()
    ran_in = path.parent / "dock.replayed_work"  # a fresh copy of the folder, not the folder
    assert (ran_in / "where.txt").read_text().startswith("/opt/kernel/")


@pytest.mark.docker
def test_the_host_only_on_the_persons_word_and_the_console_says_so(
    recorded: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path, marker = recorded
    _edit(path, _drop_image)
    # The person's own word: the code runs on the host, and the line says why.
    code = main(["replay", str(path), "--backend", "local", "-q"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "replaying on the host: --backend local given; the record names Docker" in err
    assert marker.read_text() == "ran on the host"


@pytest.mark.docker
def test_a_record_claiming_the_host_runs_in_docker_when_the_person_asks(
    work: Path,  # noqa: F811
    kernel_image: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The notebook says "local" everywhere (a host venv); ``--backend docker`` wins."""
    marker = tmp_path / "marker.txt"
    with Session(work_dir=work, name="host", timeout=DEADLINE) as session:
        assert session.execute(_attack_code(marker)).stdout == "done\n"
    marker.unlink()
    (work / "where.txt").unlink()
    path = work / "host.ipynb"
    for flags in ([], ["--in-recorded-env"]):
        code = main(["replay", str(path), *flags, "--backend", "docker"])
        err = capsys.readouterr().err
        assert code in (0, 1), err  # (the interpreter differs: a difference, not an error)
        assert err.splitlines()[0] == (
            f"replaying in Docker (image {kernel_image}): --backend docker given"
        )
        assert not marker.exists()
        where = work / "host.replayed_work" / "where.txt"  # the replay's own copy of the folder
        assert where.read_text().startswith("/opt/kernel/")  # written in the container's work dir
        where.unlink()


@pytest.mark.docker
def test_in_recorded_env_with_backend_docker_puts_the_recorded_pins_in_the_image(
    work: Path,  # noqa: F811
    kernel_image: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A host notebook's pins, rebuilt in Docker: the replay reports each recorded version."""
    with Session(work_dir=work, name="pins", timeout=DEADLINE) as session:
        session.execute("import six\nprint(six.__version__)")
    path = work / "pins.ipynb"
    _edit(path, lambda m: m["jupyter_exec"]["environment"].update(packages={"six": "1.16.0"}))
    report = replay(
        path, in_recorded_env=True, backend="docker", timeout=DEADLINE, output=work / "r.ipynb"
    )
    here = report.extra["environment"]["here"]
    assert report.extra["where"]["backend"] == "docker"
    assert here["backend"] == "docker"
    assert here["interpreter"]["executable"].startswith("/opt/kernel/")
    assert here["packages"] == {"six": "1.16.0"}
    assert not any(line.startswith("six ") for line in report.environment)
    assert os.path.exists(work / "r.ipynb")
    # The CLI says where, why, and which pins it added (the cached folder, second time).
    code = main(["replay", str(path), "--in-recorded-env", "--backend", "docker"])
    err = capsys.readouterr().err
    assert code in (0, 1), err
    assert err.splitlines()[0] == (
        f"replaying in Docker (image {kernel_image}): --backend docker given; "
        "the recorded pins it lacks mounted in: six==1.16.0"
    )
    assert "six 1.16.0 recorded" not in err


@pytest.mark.timeout(300)
def test_rest_replay_of_a_docker_record_the_server_did_not_see_is_refused_on_the_host(
    tmp_path: Path,
) -> None:
    """A server that has not seen the notebook run (restarted, or the file was copied in)
    has only the file's word, the kernelspec included: a trace of Docker keeps it off the
    host kernel until the request names one."""
    import nbformat
    import requests

    from tests.server.server_helpers import JupyterProcess

    marker = tmp_path / "marker.txt"
    server_dir = tmp_path / "server"
    with JupyterProcess(server_dir) as server:
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "P"}
        nb.metadata["jupyter_exec"] = {"backend": "docker", "environment": {"backend": "local"}}
        nb.cells = [nbformat.v4.new_code_cell(_attack_code(marker))]
        (server.root / "box").mkdir()
        nbformat.write(nb, server.root / "box" / "attack.ipynb")
        before = (server.root / "box" / "attack.ipynb").read_bytes()

        def post(body: dict[str, Any]) -> requests.Response:
            return requests.post(
                f"{server.url}/api/exec/replay", json=body, headers=server.headers, timeout=300
            )

        refused = post({"notebook": "box/attack.ipynb"})
        assert refused.status_code == 400, refused.text
        assert "was recorded in Docker (its session's backend is 'docker')" in refused.text
        assert "kernel_name" in refused.text
        assert not marker.exists()
        assert not (server.root / "box" / "where.txt").exists()
        assert not (server.root / "box" / "attack.replayed_work").exists()
        assert (server.root / "box" / "attack.ipynb").read_bytes() == before
        # The person's word, in the request: the host.
        chosen = post({"notebook": "box/attack.ipynb", "kernel_name": "python3"})
        assert chosen.status_code == 200, chosen.text
        assert marker.read_text() == "ran on the host"


@pytest.mark.docker
def test_a_recorded_image_that_is_gone_runs_in_the_kernel_image_when_docker_is_asked(
    recorded: tuple[Path, Path],
    kernel_image: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, marker = recorded
    gone = "sha256:" + "0" * 64

    def forge(metadata: dict[str, Any]) -> None:
        metadata["jupyter_exec"]["environment"]["docker_image"]["id"] = gone

    _edit(path, forge)
    code = main(["replay", str(path), "--in-recorded-env", "--backend", "docker"])
    err = capsys.readouterr().err
    assert code in (0, 1), err  # (the image id differs: reported, not an error)
    assert err.splitlines()[0] == (
        f"replaying in Docker (image {kernel_image}): --backend docker given; "
        f"the recorded image '{gone}' is not here, so the kernel image"
    )
    assert f"Docker image: {gone} recorded" in err
    assert not marker.exists()
    ran_in = path.parent / "dock.replayed_work"
    assert (ran_in / "where.txt").read_text().startswith("/opt/kernel/")
