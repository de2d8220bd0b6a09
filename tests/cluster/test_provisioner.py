"""jupyter-exec-distributed: where it places kernels, what it refuses, how it closes them.

Real SSH to the loopback cluster; the provisioner is driven by jupyter_client's
``AsyncKernelManager`` as a gateway drives it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from jupyter_client.manager import AsyncKernelManager

from jupyter_exec.cluster.provisioner import DistributedProvisioner, work_root_of
from jupyter_exec.engine.kernel import OneSpec
from jupyter_exec.exceptions import InvalidArgument
from tests.cluster.conftest import StartClusterKernel
from tests.cluster.kernels import GatewaySide

on_session_loop = pytest.mark.asyncio(loop_scope="session")
"""gateway_provisioners' ResponseManager lives on the loop it was created on."""


def _sessions_accepted(side: GatewaySide) -> int:
    return side.cluster.sshd_log.read_text(errors="replace").count("Accepted publickey")


@on_session_loop
@pytest.mark.parametrize("hosts", [["127.0.0.1"], ["localhost", "127.0.0.2"]])
async def test_this_machine_as_a_remote_host_is_refused_saying_why(
    gateway_side: GatewaySide, hosts: list[str]
) -> None:
    km = AsyncKernelManager(
        kernel_name="cluster-test", kernel_spec_manager=OneSpec(gateway_side.spec(hosts))
    )
    before = _sessions_accepted(gateway_side)
    with pytest.raises(InvalidArgument, match=r"is this machine: .* without SSH.*127\.0\.0\.2"):
        await km.start_kernel(env={"KERNEL_REMOTE_HOST": hosts[0]})
    assert _sessions_accepted(gateway_side) == before
    assert gateway_side.cluster.kernel_processes() == []


@on_session_loop
async def test_where_the_kernel_runs_is_reported_and_exported(
    cluster_kernel: StartClusterKernel,
) -> None:
    kernel = await cluster_kernel(host="127.0.0.2")
    info = await kernel.km.provisioner.get_provisioner_info()
    assert info["assigned_host"] == "127.0.0.2"
    assert isinstance(kernel.km.provisioner, DistributedProvisioner)
    launcher_env = kernel.launcher().environ()
    assert launcher_env["JUPYTER_EXEC_HOST"] == "127.0.0.2"
    assert launcher_env["KERNEL_ID"] == kernel.kernel_id


@on_session_loop
async def test_closing_a_dead_kernel_removes_its_dir_on_the_host(
    cluster_kernel: StartClusterKernel,
) -> None:
    kernel = await cluster_kernel()
    await kernel.run("open('left.txt', 'w').write('x')")
    os.kill(kernel.kernel_pid, signal.SIGKILL)
    await kernel.wait_dead(timeout=5)
    assert kernel.kernel_dir.is_dir()
    await kernel.shutdown()
    assert not kernel.kernel_dir.exists()
    assert kernel.side.cluster.kernel_processes(kernel.kernel_id) == []


@on_session_loop
async def test_shutdown_now_leaves_nothing_either(cluster_kernel: StartClusterKernel) -> None:
    kernel = await cluster_kernel()
    launcher = kernel.launcher()
    started = time.monotonic()
    await kernel.shutdown(now=True)
    gone, _alive = psutil.wait_procs([launcher], timeout=2)
    assert gone
    assert kernel.side.cluster.wait_no_kernel_processes(kernel.kernel_id, timeout=2) == []
    assert not kernel.kernel_dir.exists()
    assert time.monotonic() - started < 2.0


@on_session_loop
async def test_the_startup_command_quotes_what_clients_choose(
    gateway_side: GatewaySide, tmp_path: Path
) -> None:
    """KERNEL_USERNAME comes from the client's request; in the command sent over SSH it is
    data, never shell syntax (the base class pastes it between double quotes)."""
    km = AsyncKernelManager(
        kernel_name="cluster-test", kernel_spec_manager=OneSpec(gateway_side.spec())
    )
    await km.pre_start_kernel()  # creates our provisioner, as start_kernel would
    provisioner = km.provisioner
    assert isinstance(provisioner, DistributedProvisioner)
    provisioner.assigned_host = "127.0.0.2'; touch host-pwned; '"
    hostile = '$(touch pwned-1)"; touch pwned-2; echo "`touch pwned-3`'
    command = provisioner._build_startup_command(
        ["/bin/sh", "-c", 'printf "%s|%s" "$KERNEL_USERNAME" "$JUPYTER_EXEC_HOST" > seen'],
        env={"KERNEL_ID": str(km.kernel_id), "KERNEL_USERNAME": hostile},
    )
    provisioner.kernel_log = str(tmp_path / "log")
    subprocess.run(["/bin/bash", "-c", command], cwd=tmp_path, check=True, timeout=30)
    deadline = time.monotonic() + 10
    while not (tmp_path / "seen").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    assert (tmp_path / "seen").read_text() == f"{hostile}|127.0.0.2'; touch host-pwned; '"
    assert sorted(p.name for p in tmp_path.iterdir() if "pwned" in p.name) == []
    provisioner.response_manager._response_registry.pop(km.kernel_id, None)


def test_the_work_root_is_read_from_the_launcher_argv() -> None:
    assert str(work_root_of(["py", "l.py", "--work-root", "/srv/k"])) == "/srv/k"
    assert work_root_of(["py", "l.py", "--work-root", "relative"]) is None
    assert work_root_of(["py", "l.py", "--work-root", "/srv/../etc"]) is None
    assert work_root_of(["py", "l.py"]) is None


@on_session_loop
async def test_the_gateways_event_loop_is_not_held_by_the_response_port(
    cluster_kernel: StartClusterKernel,
) -> None:
    """With the fixture's ``GP_SOCKET_TIMEOUT=0`` the ResponseManager awaits its connections;
    with the default (0.01) each of its polls held the loop 10 ms, and every message through
    the gateway waited for it. Measured as the median extra wake-up of a 1 ms sleep while a
    kernel is polled and signalled through our listener requests."""
    import asyncio
    import statistics

    from gateway_provisioners.response_manager import ResponseManager

    kernel = await cluster_kernel()
    assert ResponseManager.initialized()
    lags = []
    for _ in range(60):
        started = time.monotonic()
        await asyncio.sleep(0.001)
        lags.append(time.monotonic() - started - 0.001)
        assert await kernel.km.provisioner.poll() is None
    assert statistics.median(lags) < 0.005
    assert (await kernel.run("1 + 1")).result == "2"
