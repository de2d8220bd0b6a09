"""Getting a kernel for a session's options: one launch for sessions and warm pools alike.

Every way a kernel comes to be, decided in one place::

    options.environment ─► resolve_environment: python / backend / docker filled in
                            (a venv may be built: in a worker thread)
    options.kernel_manager given ─► attach to it (a server's kernel, a pool's warm kernel;
                                    with network=, only a pooled kernel started with that
                                    same policy, whose proxy the session then owns)
    backend="remote"            ─► the remote server starts one; attach to it
    backend="docker"            ─► a kernelspec naming our provisioner
    python=...                  ─► a kernelspec for that interpreter (probed in a thread)
    otherwise                   ─► the installed kernelspec ``kernel_name``

:func:`launch_kernel` returns a connected, ready :class:`~jupyter_exec.engine.kernel.KernelHandle`.
:class:`~jupyter_exec.AsyncSession` calls it on start; the pool's starter
calls it ahead of time and hands the session the kernel manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_client.kernelspec import KernelSpec

from jupyter_exec.engine.kernel import (
    KernelHandle,
    attach_kernel,
    kernel_spec_for_python,
    start_kernel,
)
from jupyter_exec.exceptions import InvalidArgument, KernelStartError
from jupyter_exec.options import SessionOptions

if TYPE_CHECKING:
    from jupyter_exec.network import NetworkPolicy
    from jupyter_exec.network.proxy import NetworkProxy

__all__ = [
    "kernel_spec",
    "launch_kernel",
    "lend_network",
    "network_of",
    "network_proxy",
    "resolve_environment",
]

_NETWORK: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
"""Kernel managers started (for a pool) with a network proxy, and that proxy."""


def lend_network(km: Any, proxy: Any) -> None:
    """Remember that ``km``'s kernel was started with ``proxy`` (a pooled policy kernel).

    The pool hands out only the kernel manager; the session that attaches to
    it with the same policy takes the proxy over (see :func:`launch_kernel`).
    """
    _NETWORK[km] = proxy


def network_of(km: Any) -> Any:
    """The network proxy ``km``'s kernel was started with (``None``: none)."""
    try:
        return _NETWORK.get(km)
    except TypeError:  # an unhashable manager: it was never lent one
        return None


async def resolve_environment(options: SessionOptions) -> SessionOptions:
    """``options`` with its ``environment`` turned into ``python`` / ``backend`` / ``docker``.

    Preparing an environment may take long the first time (a venv built,
    packages installed): it runs in a worker thread. Docker options given
    directly win over the environment's.
    """
    if options.environment is None:
        return options
    from jupyter_exec.engine.environments import parse_environment

    try:
        environment = parse_environment(options.environment)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    found = await environment.async_session_options()
    return options.replace(
        environment=None,
        python=found.get("python", options.python),
        backend=found.get("backend", options.backend),
        docker={**found.get("docker", {}), **options.docker},
        network=options.network if options.network is not None else found.get("network"),
    )


async def kernel_spec(options: SessionOptions) -> KernelSpec | None:
    """The in-memory kernelspec the options call for; ``None`` for an installed one."""
    if options.backend == "docker":
        from jupyter_exec.session.backends import docker_kernel_spec

        return docker_kernel_spec(dict(options.docker), options.kernel_name)
    if options.python is not None:
        # Probes the interpreter (a subprocess): not on the event loop.
        return await asyncio.to_thread(kernel_spec_for_python, options.python)
    return None


async def launch_kernel(
    options: SessionOptions,
    cwd: Path | None,
    *,
    spec: KernelSpec | None = None,
) -> KernelHandle:
    """Start or attach to the kernel ``options`` describe, connected and ready.

    ``cwd`` is the kernel's working directory (ignored for remote and given
    kernels). ``spec`` skips making the kernelspec (a pool makes it once).
    The environment must already be resolved (:func:`resolve_environment`).
    """
    if options.environment is not None:
        raise InvalidArgument("resolve the environment first (launch.resolve_environment)")
    km: Any = options.kernel_manager
    if options.network is not None:
        proxy = network_of(km) if km is not None else None
        if proxy is None or proxy.policy != options.network:
            return await _launch_with_policy(options, cwd)
        handle = await attach_kernel(km, options.startup_timeout)
        handle.network = proxy  # the session owns it now: closed with the kernel
        return handle
    if km is not None:
        if network_of(km) is not None:
            raise InvalidArgument(
                "this kernel was started with a network policy; attach to it with that "
                "same network= (a session without one would not be told what it decides)"
            )
        return await attach_kernel(km, options.startup_timeout)
    if options.backend == "remote":
        from jupyter_exec.remote import start_remote_kernel

        env = dict(options.env) if options.env is not None else None
        if options.host is not None:  # the gateway's own way to pin a host
            env = {**(env or {}), "KERNEL_REMOTE_HOST": options.host}
        km = await start_remote_kernel(
            options.url or "",
            options.token,
            options.kernel_name,
            options.startup_timeout,
            env=env,
        )
        try:
            return await attach_kernel(km, options.startup_timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                await km.shutdown_kernel(now=True)
            raise
    if cwd is None:
        raise KernelStartError("a local or Docker kernel needs a working directory")
    return await start_kernel(
        kernel_name=options.kernel_name,
        spec=spec if spec is not None else await kernel_spec(options),
        cwd=cwd,
        env=dict(options.env) if options.env is not None else None,
        startup_timeout=options.startup_timeout,
    )


async def _launch_with_policy(options: SessionOptions, cwd: Path | None) -> KernelHandle:
    """A Docker kernel whose only way out is a new proxy deciding with ``options.network``.

    The proxy lives as long as the kernel handle (closed by its ``shutdown``).
    """
    if options.backend != "docker" or options.kernel_manager is not None:
        raise InvalidArgument(
            "network= applies only to a Docker kernel that jupyter-exec starts (backend="
            f"'docker'), not to a {'given' if options.kernel_manager else options.backend} "
            "kernel: the policy could not be enforced there"
        )
    async with network_proxy(options.network, options.name or "") as proxy:
        assert proxy is not None
        docker = {**options.docker, "network_proxy": str(proxy.folder)}
        handle = await launch_kernel(options.replace(network=None, docker=docker), cwd)
    if not proxy.session:
        proxy.session = handle.kernel_id
    handle.network = proxy
    return handle


@contextlib.asynccontextmanager
async def network_proxy(
    policy: NetworkPolicy | None, session: str
) -> AsyncIterator[NetworkProxy | None]:
    """The proxy a Docker kernel held to ``policy`` reaches the network through (``None``
    without a policy), closed again if the block that starts the kernel fails.

    The one place a proxy is started: a session's own kernel (:func:`launch_kernel`),
    a warm pool's and the Jupyter server's kernels all come here. On success the
    proxy stays open: whoever holds the kernel closes it with the kernel.
    """
    if policy is None:
        yield None
        return
    from jupyter_exec.network.proxy import NetworkProxy  # imported on use: TLS, sockets

    proxy = await NetworkProxy(policy, session=session).start()
    try:
        yield proxy
    except BaseException:
        await proxy.close()
        raise
