"""Fork, undo, checkpoint and restore of ``Session(backend="docker")``: real engine, real image."""

from __future__ import annotations

import os
import time
from pathlib import Path

import docker
import pytest

from jupyter_exec import InvalidArgument, Session
from jupyter_exec.docker.reap import L_PID, LABEL
from jupyter_exec.state.forking import AdoptedProvisioner, container_of
from tests.conftest import read_valid_notebook

pytestmark = pytest.mark.docker


def ours(client: docker.DockerClient) -> list[object]:
    labels = [f"{LABEL}=1", f"{L_PID}={os.getpid()}"]
    return list(client.containers.list(ignore_removed=True, all=True, filters={"label": labels}))


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def wait_gone(pids: list[int]) -> None:
    end = time.monotonic() + 60
    while not all(gone(pid) for pid in pids):
        assert time.monotonic() < end, f"processes left: {[p for p in pids if not gone(p)]}"
        time.sleep(0.05)


def forked_pid(session: Session) -> int:
    """The host pid of a session's kernel that is a fork in its container."""
    provisioner = session.async_session._kernel.km.provisioner  # type: ignore[union-attr]
    assert isinstance(provisioner, AdoptedProvisioner)
    assert provisioner.process is not None
    return provisioner.process.pid


def test_docker_fork_diverges_in_the_parents_container(
    kernel_image: str, docker_client: docker.DockerClient, work: Path
) -> None:
    with Session(backend="docker", work_dir=work, name="d", docker={"image": kernel_image}) as s:
        s.execute("rows = list(range(5))").raise_for_error()
        [fork] = s.fork()
        try:
            pid = forked_pid(fork)
            assert len(ours(docker_client)) == 1  # the fork lives in the parent's container
            fork.execute("rows.append(99)").raise_for_error()
            fork.execute("open('from-fork.txt', 'w').write('f')").raise_for_error()
            assert fork.execute("len(rows)").text == "6"
            assert s.execute("len(rows)").text == "5"
            assert (work / "from-fork.txt").read_text() == "f"  # the same work dir
            nb = read_valid_notebook(fork.notebook_path)  # type: ignore[arg-type]
            assert nb.metadata["jupyter_exec"]["fork"]["parent_session"] == "d"
            assert nb.metadata["jupyter_exec"]["fork"]["cell_index"] == 1
            assert nb.metadata["jupyter_exec"]["backend"] == "docker"
        finally:
            fork.close()
        wait_gone([pid])
        assert s.execute("rows[-1]").text == "4"
    assert ours(docker_client) == []


def test_docker_undo_checkpoint_restore_and_restart(
    kernel_image: str, docker_client: docker.DockerClient, work: Path
) -> None:
    with Session(
        backend="docker", work_dir=work, name="u", undo_steps=2, docker={"image": kernel_image}
    ) as s:
        s.execute("x = 1").raise_for_error()
        mark = s.checkpoint("one")
        s.execute("x = 2").raise_for_error()
        s.undo()
        assert s.execute("x").text == "1"
        # A fork serves the session now: its forks, snapshots and scripts still go to the
        # container (through its first kernel's provisioner), never to the host.
        root = s.async_session._state.root
        assert root is not None
        assert container_of(s.async_session._kernel) is root.km.provisioner  # type: ignore[arg-type]
        snapshots = [p.snapshot.pid for p in s.async_session._state.points]
        first_fork = forked_pid(s)
        s.execute("x = 3").raise_for_error()
        s.restore(mark)
        assert s.execute("x").text == "1"
        wait_gone([first_fork])  # the kernel restore replaced
        assert len(ours(docker_client)) == 1
        flags = [
            bool(c.metadata.get("jupyter_exec", {}).get("undone"))
            for c in read_valid_notebook(s.notebook_path).cells  # type: ignore[arg-type]
        ]
        assert flags == [False, True, True, True, False]  # all after the checkpoint
        s.restart()  # the container's first kernel restarts; the fork serving the session ends
        assert s.execute("'x' in dir()").text == "False"
        wait_gone(snapshots)  # the restart replaced the container, and the snapshots in it
        s.restore(mark)  # its snapshot ended with the container: loaded from disk instead
        assert s.execute("x").text == "1"
        with pytest.raises(InvalidArgument, match="1 step"):  # the older ones ended
            s.undo(2)
        s.execute("y = 1")
        s.undo()  # snapshots taken after the restart work again
        assert s.execute("'y' in dir()").text == "False"
        snapshots = [p.snapshot.pid for p in s.async_session._state.points]
        assert snapshots
    wait_gone(snapshots)
    assert ours(docker_client) == []


def test_docker_kernel_started_by_undo_dies_and_its_state_comes_back(
    kernel_image: str, docker_client: docker.DockerClient, work: Path
) -> None:
    with Session(
        backend="docker", work_dir=work, name="r", undo_steps=2, docker={"image": kernel_image}
    ) as s:
        s.execute("x = 1").raise_for_error()
        s.execute("x = 2").raise_for_error()
        s.undo()  # a fork in the container serves the session now
        s.execute("y = x + 10").raise_for_error()
        died = s.execute("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        assert died.status == "died"
        assert died.error is not None
        assert "came back from its snapshot (2 name(s): x, y)" in died.error.evalue
        assert s.execute("[x, y]").text == "[1, 11]"
        assert len(ours(docker_client)) == 1
    assert ours(docker_client) == []
