"""Wiring a network policy's proxy into a Docker kernel: its mount, env, command and CA bundle.

With ``Session(network=NetworkPolicy(...))`` the container keeps no network of its own; its
HTTP(S) clients reach the outside only through the policy's proxy
(:mod:`jupyter_exec.network.proxy`), whose folder (a Unix socket and the forwarder script) is
mounted read-only at ``CONTAINER_DIR``. When the policy intercepts TLS, the kernel must also trust
the session's certificate authority: the host writes a CA bundle (the image's own bundle plus
that CA) into the same folder and points the usual variables at it.

Each function is one step of the provisioner's start, kept here so that the whole contract
between a Docker kernel and the proxy reads in one place.
"""

from __future__ import annotations

import asyncio
from typing import Any

import docker

from jupyter_exec.docker.options import Mount, network_mode
from jupyter_exec.exceptions import KernelStartError
from jupyter_exec.network.bundle import image_bundle, needs_bundle, write_bundle
from jupyter_exec.network.proxy import CONTAINER_DIR, ca_env, forwarder_command, kernel_env

__all__ = ["proxy_command", "proxy_env", "proxy_mounts", "write_proxy_bundle"]


def proxy_mounts(network_proxy: str) -> tuple[Mount, ...]:
    """The proxy's folder, read-only in the container (nothing without a proxy)."""
    if not network_proxy:
        return ()
    return (Mount(network_proxy, CONTAINER_DIR, read_only=True),)


def proxy_env(network_proxy: str) -> dict[str, str]:
    """The kernel's proxy variables, and the CA bundle's when the policy intercepts TLS."""
    env: dict[str, str] = {}
    if network_proxy:
        env.update(kernel_env())
        if needs_bundle(network_proxy):
            env.update(ca_env())
    return env


def proxy_command(cmd: list[str], network: Any) -> list[str]:
    """``cmd`` run behind the forwarder; refused when the container has a network of its own."""
    if network_mode(network) != "none":
        raise KernelStartError(
            "a network policy (network_proxy) needs the container without a network "
            f"of its own, but network={network!r}; drop the network option"
        )
    return forwarder_command(cmd)


async def write_proxy_bundle(
    client: docker.DockerClient, network_proxy: str, image_tag: str
) -> None:
    """The image's CA bundle + the session's CA, into the proxy's folder, when it is needed.

    Reading the image's bundle goes through the engine, so it runs in a thread.
    """
    if needs_bundle(network_proxy):
        system = await asyncio.to_thread(image_bundle, client, image_tag)
        write_bundle(network_proxy, system)
