"""Fixtures for the cluster tests: a loopback cluster of two SSH hosts (tests/cluster_hosts.py).

* ``loopback_cluster`` (session-scoped, one per xdist worker): sshd on 127.0.0.2 and 127.0.0.3.
  Without sshd (``scripts/provision-cluster`` not run) the tests are skipped locally, and fail
  under ``CI=true`` (tests/conftest.py turns that skip into a failure).
* ``gateway_side``: this test process becomes the gateway, the way Kernel Gateway would be:
  the fixture's ``GP_*`` environment is set before gateway_provisioners is first imported (it
  reads most of it at import), and ``HOME`` (paramiko's keys and known_hosts) for each test.
  Kernels are then started through jupyter_client itself: an ``AsyncKernelManager`` given a
  kernelspec that names the ``jupyter-exec-distributed`` provisioner and our launcher.
  gateway_provisioners' ResponseManager is a process-wide singleton tied to the event loop it
  was created on, so these tests run on pytest-asyncio's session loop.
* At the end of the session no kernel process may be left on the hosts.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

import jupyter_exec.cluster.launcher as launcher_module
from tests.cluster.kernels import SHARED, ClusterKernel, GatewaySide, start_cluster_kernel
from tests.cluster_gateway import RunningGateway, running_gateway
from tests.cluster_hosts import Cluster, ClusterUnavailable, start_cluster


@pytest.fixture(scope="session")
def loopback_cluster() -> Iterator[Cluster]:
    """The process's one cluster. Test modules elsewhere (tests/attacks/) import this fixture,
    which gives it a second definition; both hand out the same cluster (the first owns it)."""
    if SHARED.cluster is not None:
        yield SHARED.cluster
        return
    base = Path(tempfile.mkdtemp(prefix="jx-cluster-"))
    try:
        cluster = start_cluster(base)
    except ClusterUnavailable as exc:
        pytest.skip(f"no loopback cluster: {exc}")
    SHARED.cluster = cluster
    try:
        yield cluster
        left = cluster.wait_no_kernel_processes(timeout=5)
        assert not left, f"kernel processes left on the hosts: {[p.cmdline() for p in left]}"
    finally:
        SHARED.cluster = None
        cluster.stop()


@pytest.fixture(scope="session")
def _gateway_environ(loopback_cluster: Cluster) -> Iterator[GatewaySide]:
    if SHARED.side is not None:  # set up by this fixture's other definition
        yield SHARED.side
        return
    env = loopback_cluster.gateway_env()
    home = env.pop("HOME")
    patch = pytest.MonkeyPatch()
    for name, value in env.items():
        patch.setenv(name, value)
    # gateway_provisioners read these at import, which may already have happened (a test
    # module importing jupyter_exec.cluster.provisioner): set the values it read, too.
    from gateway_provisioners import distributed, remote_provisioner, response_manager

    if response_manager.ResponseManager.initialized():
        pytest.fail(
            "gateway_provisioners' ResponseManager was started before the loopback "
            "cluster's environment was set",
            pytrace=False,
        )
    patch.setattr(distributed, "ssh_port", loopback_cluster.port)
    patch.setattr(remote_provisioner, "ssh_port", loopback_cluster.port)
    patch.setattr(distributed, "kernel_log_dir", env["GP_KERNEL_LOG_DIR"])
    patch.setattr(response_manager, "response_ip", env["GP_RESPONSE_IP"])
    patch.setattr(response_manager, "desired_response_port", int(env["GP_RESPONSE_PORT"]))
    patch.setattr(response_manager, "socket_timeout", float(env["GP_SOCKET_TIMEOUT"]))

    launcher = loopback_cluster.remote_dir / "launcher.py"
    shutil.copyfile(launcher_module.__file__, launcher)
    launcher.chmod(0o500)
    work_root = loopback_cluster.remote_dir / "kernels"
    work_root.mkdir(mode=0o700, exist_ok=True)
    SHARED.side = GatewaySide(
        loopback_cluster, home=Path(home), launcher=launcher, work_root=work_root
    )
    try:
        yield SHARED.side
    finally:
        SHARED.side = None
        from gateway_provisioners.response_manager import ResponseManager

        if ResponseManager.initialized():
            ResponseManager.instance().stop_response_manager()
        patch.undo()


@pytest.fixture
def gateway_side(_gateway_environ: GatewaySide, monkeypatch: pytest.MonkeyPatch) -> GatewaySide:
    """This process as the gateway: GP_* set for the session, HOME for this test."""
    monkeypatch.setenv("HOME", str(_gateway_environ.home))
    return _gateway_environ


StartClusterKernel = Callable[..., Awaitable[ClusterKernel]]


@pytest_asyncio.fixture(loop_scope="session")
async def cluster_kernel(gateway_side: GatewaySide) -> AsyncIterator[StartClusterKernel]:
    """``await cluster_kernel(host=None, encryption=None)`` -> a ready kernel on a host; all
    that are still running are shut down after the test."""
    kernels: list[ClusterKernel] = []

    async def _start(**kwargs: object) -> ClusterKernel:
        kernel = await start_cluster_kernel(gateway_side, **kwargs)  # type: ignore[arg-type]
        kernels.append(kernel)
        return kernel

    yield _start
    for kernel in kernels:
        await kernel.shutdown(now=True)


@pytest.fixture(scope="module")
def gateway(
    loopback_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    """``jupyter-exec gateway`` on the cluster, one per test module (the real command)."""
    with running_gateway(loopback_cluster, tmp_path_factory.mktemp("gateway")) as running:
        yield running
