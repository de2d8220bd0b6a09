"""The one place a network proxy is started (:func:`jupyter_exec.session.launch.network_proxy`):
a session's own Docker kernel, a warm pool's and the Jupyter server's kernels all ask it, so
what it promises is held here once: a proxy that serves while the kernel starts, closed again
(its socket folder gone) when the start fails, left open for the kernel's holder when it works.
No Docker needed: the proxy is a socket on this host."""

from __future__ import annotations

import pytest

from jupyter_exec.exceptions import KernelStartError
from jupyter_exec.network import NetworkPolicy
from jupyter_exec.network.proxy import NetworkProxy
from jupyter_exec.session.launch import network_proxy


async def test_no_policy_starts_no_proxy() -> None:
    async with network_proxy(None, "s") as proxy:
        assert proxy is None


async def test_a_failed_start_closes_the_proxy_it_made() -> None:
    seen: list[NetworkProxy] = []

    async def start_kernel() -> None:
        async with network_proxy(NetworkPolicy(allow=["pypi.org"]), "agent") as proxy:
            assert proxy is not None
            assert proxy.serving
            assert proxy.session == "agent"
            seen.append(proxy)
            raise KernelStartError("no kernel")  # what a failed kernel start raises

    with pytest.raises(KernelStartError, match="no kernel"):
        await start_kernel()
    [proxy] = seen
    assert proxy.folder is not None
    assert not proxy.folder.exists()  # the socket and forwarder went with it
    assert not proxy.serving


async def test_a_started_kernel_keeps_its_proxy_open() -> None:
    async with network_proxy(NetworkPolicy(allow=["pypi.org"]), "agent") as proxy:
        assert proxy is not None
    try:
        assert proxy.serving  # its holder (the kernel handle, the server's entry) closes it
    finally:
        await proxy.close()
    assert not proxy.serving
