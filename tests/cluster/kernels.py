"""Kernels on the loopback cluster, started the way a gateway starts them.

``start_cluster_kernel`` builds the kernelspec a gateway would use (the
``jupyter-exec-distributed`` provisioner, our launcher's argv with gateway_provisioners'
placeholders) and starts it with jupyter_client's own ``AsyncKernelManager``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager

from jupyter_exec.engine.kernel import KernelHandle, OneSpec
from tests.cluster_hosts import Cluster
from tests.raw_run import Run, run_cell


@dataclass(frozen=True)
class GatewaySide:
    """What the gateway process has: the cluster, its HOME, the launcher on the hosts."""

    cluster: Cluster
    home: Path
    launcher: Path
    work_root: Path

    def argv(self, *extra: str) -> list[str]:
        return [
            self.cluster.python,
            str(self.launcher),
            "--kernel-id",
            "{kernel_id}",
            "--response-address",
            "{response_address}",
            "--public-key",
            "{public_key}",
            "--port-range",
            "{port_range}",
            "--transport-encryption",
            "{transport_encryption}",
            "--work-root",
            str(self.work_root),
            *extra,
        ]

    def spec(self, remote_hosts: list[str] | None = None, *extra: str) -> KernelSpec:
        hosts = list(self.cluster.hosts) if remote_hosts is None else remote_hosts
        return KernelSpec(
            argv=self.argv(*extra),
            display_name="Python 3 (loopback cluster, test)",
            language="python",
            metadata={
                "kernel_provisioner": {
                    "provisioner_name": "jupyter-exec-distributed",
                    "config": {"remote_hosts": hosts},
                },
                "supported_encryption": ["curve"],
            },
        )

    def kernel_dir(self, kernel_id: str) -> Path:
        return self.work_root / kernel_id


@dataclass
class _Shared:
    """The one cluster and gateway side of this test process (see tests/cluster/conftest.py)."""

    cluster: Cluster | None = None
    side: GatewaySide | None = None


SHARED = _Shared()


@dataclass
class ClusterKernel:
    """A kernel on a cluster host: its manager, a client, where it runs."""

    km: AsyncKernelManager
    kc: Any
    side: GatewaySide
    closed: bool = field(default=False)

    @property
    def kernel_id(self) -> str:
        return str(self.km.kernel_id)

    @property
    def host(self) -> str:
        return str(self.km.provisioner.assigned_host)

    @property
    def kernel_pid(self) -> int:
        return int(self.km.provisioner.pid)

    @property
    def kernel_dir(self) -> Path:
        return self.side.kernel_dir(self.kernel_id)

    def launcher(self) -> psutil.Process:
        parent = psutil.Process(self.kernel_pid).parent()
        assert parent is not None
        return parent

    async def run(self, code: str, timeout: float = 30) -> Run:
        return await run_cell(self.kc, code, timeout)

    def reconnect(self) -> None:
        """A new client for the kernel's current connection info (after a restart)."""
        self.kc.stop_channels()
        self.kc = self.km.client()
        self.kc.start_channels()

    async def ready(self, timeout: float = 60) -> None:
        await KernelHandle(km=self.km, kc=self.kc).wait_ready(timeout)

    async def wait_dead(self, timeout: float = 5.0) -> float:
        start = time.monotonic()
        while await self.km.is_alive():
            if time.monotonic() - start > timeout:
                raise AssertionError("the kernel still looks alive")
            await asyncio.sleep(0.05)
        return time.monotonic() - start

    async def shutdown(self, now: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        self.kc.stop_channels()
        if self.km.has_kernel or self.km.provisioner is not None:
            await self.km.shutdown_kernel(now=now)


async def start_cluster_kernel(
    side: GatewaySide,
    *,
    host: str | None = None,
    encryption: str | None = None,
    remote_hosts: list[str] | None = None,
) -> ClusterKernel:
    """Start a kernel through the provisioner; ``host`` pins it (``KERNEL_REMOTE_HOST``)."""
    km = AsyncKernelManager(
        kernel_name="cluster-test", kernel_spec_manager=OneSpec(side.spec(remote_hosts))
    )
    if encryption is not None:
        km.transport_encryption = encryption
    env = {"KERNEL_REMOTE_HOST": host} if host else {}
    await km.start_kernel(env=env)
    kc = km.client()
    kc.start_channels()
    kernel = ClusterKernel(km, kc, side)
    try:
        await kernel.ready()
    except BaseException:
        await kernel.shutdown(now=True)
        raise
    return kernel
