"""The launcher on real hosts, started over real SSH by jupyter_client and our provisioner.

No gateway server: an ``AsyncKernelManager`` with the ``jupyter-exec-distributed`` kernelspec
is what Kernel Gateway runs per kernel, so these tests hold the host side on its own.
"""

from __future__ import annotations

import pytest

from tests.cluster.conftest import StartClusterKernel

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_kernels_start_round_robin_on_both_hosts_and_keep_state(
    cluster_kernel: StartClusterKernel,
) -> None:
    first = await cluster_kernel()
    second = await cluster_kernel()
    assert {first.host, second.host} == set(first.side.cluster.hosts)
    for kernel, value in ((first, 1), (second, 2)):
        assert (await kernel.run(f"x = {value}")).error is None
    assert (await first.run("x + 40")).result == "41"
    assert (await second.run("x + 40")).result == "42"
    info = await first.km.provisioner.get_provisioner_info()
    assert info["assigned_host"] == first.host
