"""Starting a Docker kernel's container: its env, its ``RunSpec`` and the ``containers.run`` call.

The provisioner gathers the facts (the traits, the uid, the run and work dirs, the image tag);
this module turns them into one :class:`~jupyter_exec.docker.options.RunSpec` and starts it. It
also keeps the process-wide list of containers started and not yet cleaned up, removed at
interpreter exit, so a forgotten ``shutdown_kernel()`` does not leave a container behind (a crash
leaves them to ``reap`` and the watchdog). Lending a root-owned work dir happens here too, right
before the container starts, and is taken back if the start fails.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import secrets
import threading
from collections.abc import Sequence
from pathlib import Path

import docker
import docker.errors

from jupyter_exec.docker import reap as reaping
from jupyter_exec.docker.config import DockerTraits
from jupyter_exec.docker.engine import connect, docker_errors
from jupyter_exec.docker.netproxy import proxy_env, proxy_mounts
from jupyter_exec.docker.options import (
    CONTAINER_CONF_DIR,
    CONTAINER_RUN_DIR,
    Limits,
    Mount,
    RunSpec,
    Security,
    forwarded_env,
    network_mode,
    parse_volume,
    run_kwargs,
)
from jupyter_exec.docker.ownership import KernelUser, lend
from jupyter_exec.docker.rundir import CONF_DIR, SOCKET_DIR, engine_path
from jupyter_exec.docker.watchdog import ensure_watchdog
from jupyter_exec.exceptions import WorkDirError

__all__ = ["container_env", "live_containers", "run_spec", "start_container"]


def container_env(
    traits: DockerTraits, requested: dict[str, str], user: KernelUser, spec_env: Sequence[str]
) -> dict[str, str]:
    """The kernel's environment: ours, the forwarded part of ``requested``, the proxy's, ``env``.

    ``spec_env`` names the kernelspec's own variables, which are always forwarded.
    """
    env = {"HOME": "/tmp", "USER": user.name, "LOGNAME": user.name}
    env.update(forwarded_env(requested, os.environ, always=list(spec_env)))
    env.update(proxy_env(traits.network_proxy))
    env.update(traits.env)
    return env


def run_spec(
    traits: DockerTraits,
    *,
    kernel_id: str,
    cmd: list[str],
    env: dict[str, str],
    user: KernelUser,
    run_dir: Path,
    work_dir: Path,
    image_tag: str,
) -> RunSpec:
    """Everything the container is started with, from the traits and the kernel's facts."""
    labels = reaping.container_labels(
        kernel_id=kernel_id,
        run_dir=str(run_dir),
        work_dir=str(work_dir),
        keep=not traits.auto_remove,
    )
    run_root = str(run_dir.parent)
    conf = Mount(
        engine_path(run_dir / CONF_DIR, traits.run_root_bind, run_root),
        CONTAINER_CONF_DIR,
        read_only=True,
    )
    return RunSpec(
        image=image_tag,
        command=tuple(cmd),
        name=f"jx-{kernel_id[:8] or 'kernel'}-{secrets.token_hex(3)}",
        user=user.docker_user,
        work_mount=Mount(
            engine_path(work_dir, traits.bind_dir), traits.work_mount, read_only=False
        ),
        run_mount=Mount(
            engine_path(run_dir / SOCKET_DIR, traits.run_root_bind, run_root),
            CONTAINER_RUN_DIR,
            read_only=False,
        ),
        env=env,
        labels=labels,
        volumes=(
            conf,
            *proxy_mounts(traits.network_proxy),
            *(parse_volume(v) for v in traits.volumes),
        ),
        security=Security(
            init=traits.init,
            read_only=traits.read_only,
            tmpfs_size=traits.tmpfs_size,
            tmp_exec=traits.tmp_exec,
            cap_drop=tuple(traits.cap_drop),
            cap_add=tuple(traits.cap_add),
            no_new_privileges=traits.no_new_privileges,
            network=network_mode(traits.network),
            packages_dir=traits.packages_dir,
        ),
        limits=Limits(
            memory=traits.memory,
            memory_swap=traits.memory_swap,
            cpus=traits.cpus,
            pids=traits.pids_limit,
            nofile=traits.nofile_limit,
        ),
        extra=dict(traits.run_kwargs),
    )


def start_container(
    docker_host: str,
    spec: RunSpec,
    work_dir: Path | None,
    user: KernelUser | None,
    identity: tuple[int, int] | None = None,
) -> str:
    """Start the container (blocking); return its id, remembered in :data:`live_containers`.

    The watchdog is made sure of first, since it must exist before any container it cleans
    up; a root-owned ``work_dir`` is lent to ``user`` and labelled, so the loan is taken back
    whoever removes the container (and here, at once, if the start fails). ``identity`` is
    the (device, inode) of the work dir as :func:`jupyter_exec.boundary.paths.pin_dir` opened it:
    the
    loan and the folder the engine mounted are checked against it (see
    :func:`check_mounted`), so a link swapped in meanwhile mounts or lends nothing.
    """
    client = connect(docker_host)
    ensure_watchdog(docker_host)  # before any container exists that it must clean up
    loan = None
    if user is not None and work_dir is not None:
        loan = lend(work_dir, user, identity)
    if loan is not None:
        spec = dataclasses.replace(spec, labels={**spec.labels, reaping.L_LENT: loan.label})
    try:
        with docker_errors(f"starting kernel container from {spec.image}"):
            container = client.containers.run(**run_kwargs(spec))
        if identity is not None:
            check_mounted(client, str(container.id), spec.work_mount.target, identity)
    except BaseException:
        if loan is not None and work_dir is not None:
            reaping.release_loan(client, dict(spec.labels))
        raise
    container_id = str(container.id)
    live_containers[container_id] = (docker_host, dict(spec.labels))
    return container_id


def check_mounted(
    client: docker.DockerClient, container_id: str, target: str, identity: tuple[int, int]
) -> None:
    """Remove the container unless the folder mounted at ``target`` is the pinned one.

    The engine resolves a mount source path itself, after we checked it: a kernel that swaps
    a component for a link in between would get another folder mounted. Where this process
    sees the container's mounts (``/proc/<pid>/root``: same host, enough privilege) the
    mounted folder's (device, inode) must be ``identity``; elsewhere the pinned path, free of
    links when checked, is what the engine was given.
    """
    try:
        pid = int(client.api.inspect_container(container_id)["State"]["Pid"] or 0)
        mounted = os.stat(f"/proc/{pid}/root{target}") if pid > 0 else None
    except (OSError, docker.errors.APIError, KeyError, ValueError):
        mounted = None
    if mounted is None or (mounted.st_dev, mounted.st_ino) == identity:
        return
    with contextlib.suppress(docker.errors.APIError):
        reaping.force_remove(client, container_id)
    raise WorkDirError(
        "the kernel's work dir was replaced (a symbolic link swapped in?) between its check "
        "and the container's start; the container was removed"
    )


#: Containers started by this process and not yet cleaned up: removed at interpreter exit, so a
#: forgotten ``shutdown_kernel()`` does not leave a container behind. (A crash leaves them to
#: ``reap``.) Values: (docker_host, labels).
live_containers: dict[str, tuple[str, dict[str, str]]] = {}
_atexit_lock = threading.Lock()


@atexit.register
def _remove_leftovers() -> None:
    with _atexit_lock:
        leftovers = list(live_containers.items())
        live_containers.clear()
    for container_id, (docker_host, _labels) in leftovers:
        try:
            client = connect(docker_host)
            reaping.remove_container(client, container_id, _labels)
        except Exception:  # best effort at exit; reap catches the rest
            continue
