"""One kernel per id: a launcher's death is its kernel's death.

The real command on the loopback cluster and a Session on it. kill -9 of the launcher on the
host used to leave its kernel running as an orphan beside the one the gateway started next
(the session's cells went on reaching the orphan; it outlived close() and the gateway).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import psutil

from jupyter_exec import Execution, Session
from tests.cluster_gateway import long_cell_in_background, running_gateway
from tests.cluster_hosts import Cluster


def _kernels(cluster: Cluster, kernel_id: str) -> dict[str, set[int]]:
    """The pids of the launchers and of the ipykernel processes of ``kernel_id``."""
    found: dict[str, set[int]] = {"launcher": set(), "kernel": set()}
    for process in cluster.kernel_processes(kernel_id):
        with contextlib.suppress(psutil.Error):
            cmdline = " ".join(process.cmdline())
            if "ipykernel_launcher" in cmdline:
                found["kernel"].add(process.pid)
            elif "launcher-" in cmdline:
                found["launcher"].add(process.pid)
    return found


def test_kill_9_of_the_launcher_leaves_exactly_one_kernel_and_the_session_sees_died(
    loopback_cluster: Cluster, tmp_path: Path
) -> None:
    remote = loopback_cluster.base / f"remote-{tmp_path.name[-12:]}"
    with (
        running_gateway(loopback_cluster, tmp_path / "gw", "--remote-dir", str(remote)) as gw,
        Session(
            backend="remote",
            url=gw.url,
            token=gw.token,
            work_dir=tmp_path / "work",
            env={"KERNEL_REMOTE_HOST": loopback_cluster.hosts[0]},
        ) as session,
    ):
        assert session.execute("x = 41; x + 1").text == "42"
        kernel_id = session.kernel_id
        assert kernel_id is not None
        before = _kernels(loopback_cluster, kernel_id)
        (launcher,) = before["launcher"]
        (old_kernel,) = before["kernel"]
        running, done = long_cell_in_background(session)
        started = remote / "kernels" / kernel_id / "work" / "started"
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline
            assert running.is_alive()
            time.sleep(0.05)
        killed_at = time.monotonic()
        psutil.Process(launcher).kill()
        running.join(120)
        took = time.monotonic() - killed_at
        assert not running.is_alive()
        (execution,) = done
        assert isinstance(execution, Execution), repr(execution)
        assert execution.status == "died", execution
        # The old kernel is gone (its process group killed through the host), one runs.
        assert not psutil.pid_exists(old_kernel) or (
            psutil.Process(old_kernel).status() == psutil.STATUS_ZOMBIE
        ), gw.log()[-3000:]
        # The session is on the new kernel, with the state saved on the host loaded into it.
        on = session.execute("import os; os.getpid(), x")
        after = _kernels(loopback_cluster, kernel_id)
        assert len(after["kernel"]) == 1, after
        assert old_kernel not in after["kernel"]
        (new_kernel,) = after["kernel"]
        assert on.text == repr((new_kernel, 41)), on.error
        assert len(after["launcher"]) == 1, after
        print(f"died {took:.2f} s after kill -9 of the launcher")
    assert not loopback_cluster.wait_no_kernel_processes(kernel_id, timeout=5)
    assert not (remote / "kernels" / kernel_id).exists()
