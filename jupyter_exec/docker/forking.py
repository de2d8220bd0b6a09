"""Forking a kernel that runs in a Docker container: the child's connection file and its host pid.

The in-kernel fork (:mod:`jupyter_exec.inkernel.fork`) works unchanged in a
container; two things differ on the host's side, and both are here:

* **Where the child listens.** Its connection file must be readable in the
  container and its sockets must land where the host can reach them. The
  host writes the container's copy, as the provisioner writes the first one,
  into the run dir's read-only conf folder (``/run/jxc`` in the container),
  naming socket paths in the kernel-writable sockets folder (``/run/jx``),
  which the host sees as ``<run dir>/s``.
* **Which process it is.** ``os.fork()`` in the container returns a pid of the
  container's pid namespace. The host finds the same process in its own
  ``/proc`` (``NSpid``: the last entry is the pid in the innermost namespace,
  which must be the container's), so the child is watched and signalled like
  a local one. An engine on another machine (or in another pid namespace)
  shows no such process: that is a clear ``ForkError``.

The child lives in the parent's container: it shares its memory, CPU and pids
limits, and ends with it (the container's init exits with the first kernel).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager

from jupyter_exec.boundary.paths import Folder
from jupyter_exec.docker.engine import docker_errors
from jupyter_exec.docker.options import CONTAINER_CONF_DIR, CONTAINER_RUN_DIR
from jupyter_exec.docker.rundir import CONF_DIR, MAX_SOCKET_PATH, SOCKET_DIR
from jupyter_exec.engine.provisioning import ContainerProvisioner
from jupyter_exec.exceptions import ForkError

__all__ = ["child_connection", "control_socket", "host_pid"]


def child_connection(provisioner: ContainerProvisioner, km: AsyncKernelManager) -> tuple[str, Path]:
    """Point ``km`` at new sockets of the container; write the container's connection file.

    Returns the file's path in the container (for the fork request) and on the
    host (to remove it when the child is gone).
    """
    run_dir, user = provisioner.run_dir, provisioner.kernel_user
    if run_dir is None or user is None:
        raise ForkError("the Docker kernel has no run dir: it is not running")
    tag = f"f{secrets.token_hex(4)}"
    km.transport = "ipc"
    km.ip = str(run_dir / SOCKET_DIR / tag)
    if len(f"{km.ip}-99999") > MAX_SOCKET_PATH:
        raise ForkError(f"the fork's socket paths under {run_dir} would be too long")
    km.write_connection_file()
    info = dict(km.get_connection_info())
    key = info.get("key", b"")
    info["key"] = key.decode() if isinstance(key, bytes) else key
    info["ip"] = f"{CONTAINER_RUN_DIR}/{tag}"
    name = f"{tag}.json"
    owner = (user.uid, user.gid) if os.geteuid() == 0 and not user.mapped else None
    with Folder.open(run_dir, CONF_DIR) as folder:
        folder.write_atomic(name, [json.dumps(info).encode()], mode=0o400, owner=owner)
    return f"{CONTAINER_CONF_DIR}/{name}", run_dir / CONF_DIR / name


def control_socket(provisioner: ContainerProvisioner) -> tuple[str, Path]:
    """A new path for a snapshot's socket in the kernel's sockets folder: (container, host)."""
    run_dir = provisioner.run_dir
    if run_dir is None:
        raise ForkError("the Docker kernel has no run dir: it is not running")
    name = f"f{secrets.token_hex(4)}.snap"
    return f"{CONTAINER_RUN_DIR}/{name}", run_dir / SOCKET_DIR / name


def host_pid(provisioner: ContainerProvisioner, container_pid: int) -> int:
    """The host's pid for process ``container_pid`` of the provisioner's container.

    Blocking (an engine call and a scan of ``/proc``): run it in a thread.
    """
    container_id = provisioner.container_id
    if not container_id:
        raise ForkError("the Docker kernel's container is gone")
    with docker_errors("inspecting the kernel container"):
        state = provisioner.docker_client().api.inspect_container(container_id)["State"]
    init = int(state.get("Pid") or 0)
    try:
        namespace = os.readlink(f"/proc/{init}/ns/pid")
    except OSError:
        raise ForkError(
            "the forked kernel's process is not visible from this host (is the Docker engine "
            "on another machine?); forking Docker kernels needs a local engine"
        ) from None
    with os.scandir("/proc") as entries:
        names = [entry.name for entry in entries if entry.name.isdigit()]
    for name in names:
        if _innermost_pid(name) != container_pid:
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/pid") == namespace:
                return int(name)
        except OSError:
            continue
    raise ForkError(f"the forked kernel (pid {container_pid} in its container) was not found")


def _innermost_pid(proc_name: str) -> int | None:
    try:
        with open(f"/proc/{proc_name}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None
