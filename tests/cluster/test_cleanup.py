"""Nothing left on a host: the kernels' folders and logs go with the kernels.

The real command on the loopback cluster, each test with a remote dir of its own, listed
afterwards from the "host" side (the hosts are this machine): a stop by SIGTERM or SIGINT,
a SIGKILL followed by ``--clean``, and a launch that times out each leave no kernel folder
and no kernel log behind.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest

from jupyter_exec.cli.exits import EXIT_OK
from tests.cluster_gateway import gateway_once, running_gateway
from tests.cluster_hosts import Cluster


def _remote_dir(cluster: Cluster) -> Path:
    return cluster.base / f"remote-{uuid.uuid4().hex[:8]}"


def _left(remote: Path) -> list[str]:
    """What is left of kernels under ``remote``: folders in kernels/, files in logs/."""
    found = []
    for sub in ("kernels", "logs"):
        folder = remote / sub
        if folder.is_dir():
            found += [f"{sub}/{entry.name}" for entry in folder.iterdir()]
    return sorted(found)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_gateway_leaves_no_kernel_folder_and_no_log_on_the_hosts(
    signum: int, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    remote = _remote_dir(loopback_cluster)
    with running_gateway(loopback_cluster, tmp_path / "gw", "--remote-dir", str(remote)) as gateway:
        kernels = [gateway.start_kernel() for _ in range(2)]  # one on each host
        assert sorted(_left(remote)) == sorted(
            [f"kernels/{k}" for k in kernels] + [f"logs/kernel-{k}.log" for k in kernels]
        )
        assert gateway.stop(signum=signum) == EXIT_OK, gateway.log()[-3000:]
    assert not loopback_cluster.wait_no_kernel_processes(timeout=5)
    assert _left(remote) == [], gateway.log()[-3000:]


def test_a_deleted_kernel_leaves_no_folder_and_no_log(
    loopback_cluster: Cluster, tmp_path: Path
) -> None:
    remote = _remote_dir(loopback_cluster)
    with running_gateway(loopback_cluster, tmp_path / "gw", "--remote-dir", str(remote)) as gateway:
        kernel_id = gateway.start_kernel()
        request = urllib.request.Request(
            f"{gateway.url}/api/kernels/{kernel_id}",
            method="DELETE",
            headers={"Authorization": f"token {gateway.token}"},
        )
        urllib.request.urlopen(request, timeout=120).close()
        assert _left(remote) == []


def test_clean_removes_what_a_sigkill_of_the_command_and_its_server_left(
    loopback_cluster: Cluster, tmp_path: Path
) -> None:
    remote = _remote_dir(loopback_cluster)
    with running_gateway(loopback_cluster, tmp_path / "gw", "--remote-dir", str(remote)) as gateway:
        (server,) = psutil.Process(gateway.process.pid).children()
        private = Path(server.cmdline()[-1].split("=", 1)[1]).parent.parent
        kernels = [gateway.start_kernel() for _ in range(2)]
        server.kill()  # nobody is left to shut the kernels down
        gateway.process.kill()
        gateway.process.wait()
        server.wait(30)
    for kernel_id in kernels:  # still running, folders and logs in place, private dir too
        assert loopback_cluster.kernel_processes(kernel_id)
    assert len(_left(remote)) == 4
    assert private.is_dir()
    done = gateway_once(loopback_cluster, "--allow-this-machine", "--remote-dir", str(remote),
                        "--clean")  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    assert not loopback_cluster.wait_no_kernel_processes(timeout=10)
    assert _left(remote) == [], done.stdout
    assert not private.exists()
    assert f"removed kernels/{kernels[0]}" in done.stdout or kernels[0] in done.stdout


def test_a_server_that_dies_under_the_command_leaves_no_kernel_running(
    loopback_cluster: Cluster, tmp_path: Path
) -> None:
    """The command owns its kernels: when its server ends without shutting them down (here
    SIGKILLed; under load, one killed after the stop's grace), the command stops them on the
    hosts itself, before it exits with the server's failure."""
    remote = _remote_dir(loopback_cluster)
    with running_gateway(loopback_cluster, tmp_path / "gw", "--remote-dir", str(remote)) as gateway:
        (server,) = psutil.Process(gateway.process.pid).children()
        kernels = [gateway.start_kernel() for _ in range(2)]
        server.kill()
        status = gateway.process.wait(120)
    assert status != EXIT_OK
    assert "stopped what the server left" in gateway.log(), gateway.log()[-3000:]
    for kernel_id in kernels:
        assert not loopback_cluster.wait_no_kernel_processes(kernel_id, timeout=10)
    assert _left(remote) == [], gateway.log()[-3000:]


def test_clean_touches_no_folder_without_the_launchers_marker_and_follows_no_link(
    loopback_cluster: Cluster, tmp_path: Path
) -> None:
    remote = _remote_dir(loopback_cluster)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    kernels = remote / "kernels"
    kernels.mkdir(parents=True)
    unmarked = kernels / str(uuid.uuid4())
    unmarked.mkdir()
    (unmarked / "file").write_text("not the launcher's")
    linked = kernels / str(uuid.uuid4())
    linked.symlink_to(victim)  # a link planted with the victim's marker copied in
    (victim / ".jupyter-exec-kernel").write_text(json.dumps({"kernel_id": linked.name}))
    done = gateway_once(loopback_cluster, "--allow-this-machine", "--remote-dir", str(remote),
                        "--clean")  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    assert (unmarked / "file").read_text() == "not the launcher's"
    assert (victim / "precious").read_text() == "keep me"
    assert linked.is_symlink()


def test_clean_is_refused_while_a_gateway_uses_the_remote_dir(
    loopback_cluster: Cluster, tmp_path: Path
) -> None:
    remote = _remote_dir(loopback_cluster)
    with running_gateway(loopback_cluster, tmp_path / "gw", "--remote-dir", str(remote)) as gateway:
        kernel_id = gateway.start_kernel()
        done = gateway_once(loopback_cluster, "--allow-this-machine", "--remote-dir",
                            str(remote), "--clean")  # fmt: skip
        assert done.returncode != EXIT_OK
        assert "stop it first" in done.stderr
        assert loopback_cluster.kernel_processes(kernel_id)
        assert gateway.stop() == EXIT_OK
    assert _left(remote) == []


def test_logs_are_kept_when_asked(loopback_cluster: Cluster, tmp_path: Path) -> None:
    remote = _remote_dir(loopback_cluster)
    with running_gateway(
        loopback_cluster, tmp_path / "gw", "--remote-dir", str(remote), "--keep-logs", "7"
    ) as gateway:
        kernel_id = gateway.start_kernel()
        assert gateway.stop() == EXIT_OK
    assert _left(remote) == [f"logs/kernel-{kernel_id}.log"]


def test_clean_removes_only_the_logs_older_than_the_retention(
    loopback_cluster: Cluster, tmp_path: Path
) -> None:
    remote = _remote_dir(loopback_cluster)
    logs = remote / "logs"
    logs.mkdir(parents=True)
    old, recent = logs / f"kernel-{uuid.uuid4()}.log", logs / f"kernel-{uuid.uuid4()}.log"
    other = logs / "notes.log"  # not a kernel's log: never touched
    for path in (old, recent, other):
        path.write_text("log\n")
    ten_days_ago = time.time() - 10 * 86400
    os.utime(old, (ten_days_ago, ten_days_ago))
    os.utime(other, (ten_days_ago, ten_days_ago))
    done = gateway_once(loopback_cluster, "--allow-this-machine", "--remote-dir", str(remote),
                        "--clean", "--keep-logs", "7")  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    assert sorted(p.name for p in logs.iterdir()) == sorted([recent.name, other.name])
