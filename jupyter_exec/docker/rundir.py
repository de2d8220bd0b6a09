"""A Docker kernel's run dir and connection files: how the host and the container meet.

The kernel listens on ZMQ ``ipc`` sockets, so the container needs no network. Each kernel gets
a short private run dir on the host (``<run_root>/jx-XXXXXXXX``, mode 0700) with two folders:

* ``s`` (:data:`SOCKET_DIR`), the only one the kernel can write, mounted at ``/run/jx``: the
  kernel creates its sockets there and the client connects to them;
* ``c`` (:data:`CONF_DIR`), mounted read-only at ``/run/jxc``: the container's copy of the
  connection file (its ``ip`` is ``/run/jx/k``). The host writes it with
  :mod:`jupyter_exec.boundary.paths` into a folder the kernel cannot change and hands it to the
  kernel's
  uid with ``fchown`` on the new file, so no link the kernel plants can make the host write or
  chown anything else.

These are kept together (and apart from the provisioner's lifecycle) because the fork support
(:mod:`jupyter_exec.docker.forking`) writes more connection files into the same layout.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from jupyter_client.connect import KernelConnectionInfo

from jupyter_exec.boundary.paths import Folder
from jupyter_exec.docker.options import CONTAINER_CONF_DIR, CONTAINER_RUN_DIR
from jupyter_exec.docker.ownership import KernelUser
from jupyter_exec.exceptions import KernelStartError

__all__ = [
    "CONF_DIR",
    "CONTAINER_CONNECTION_FILE",
    "MAX_SOCKET_PATH",
    "SOCKET_DIR",
    "configure_connection",
    "engine_path",
    "kernel_cmd",
    "make_run_dir",
]

#: sizeof(sockaddr_un.sun_path) - 1: the longest ipc socket path ZMQ can bind or connect.
MAX_SOCKET_PATH = 107
CONTAINER_CONNECTION_FILE = f"{CONTAINER_CONF_DIR}/kernel.json"
SOCKET_DIR = "s"  # in the run dir: the kernel's sockets (the only part the kernel can write)
CONF_DIR = "c"  # in the run dir: the container's connection file (read-only in the container)


def make_run_dir(run_root: str, user: KernelUser, requested_user: str) -> Path:
    """Create a kernel's run dir under ``run_root`` (empty: the system temp dir).

    ``requested_user`` is the ``user`` trait, only for the error message.
    """
    root = run_root or tempfile.gettempdir()
    run_dir = Path(tempfile.mkdtemp(prefix="jx-", dir=root))  # mode 0700
    try:
        longest = len(f"{run_dir}/{SOCKET_DIR}/k-99")
        if longest > MAX_SOCKET_PATH:
            raise KernelStartError(
                f"the kernel's socket path under {root} would be {longest} characters, over "
                f"the {MAX_SOCKET_PATH}-character limit of unix sockets; set "
                "DockerProvisioner.run_root to a short directory such as /tmp"
            )
        if os.geteuid() != 0 and user.uid != os.geteuid() and not user.mapped:
            raise KernelStartError(
                f"user={requested_user!r}: without root, the kernel can only run as your own uid "
                f"({os.geteuid()}), since it must read the private connection file and you "
                "must reach its sockets"
            )
        with Folder.open(run_dir) as folder:
            with folder.sub(SOCKET_DIR, create=True, mode=0o700) as sockets:
                if os.geteuid() == 0 and not user.mapped:
                    sockets.chown(user.uid, user.gid)
            # Searchable, not listable or writable, by the kernel; mounted read-only too.
            folder.sub(CONF_DIR, create=True, mode=0o711).close()
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run_dir


def engine_path(local: Path, bind: str, local_root: str = "") -> str:
    """``local`` as the engine sees it, given a Docker-out-of-Docker mapping."""
    if not bind:
        return str(local)
    if not local_root:
        return bind
    return str(Path(bind) / local.relative_to(local_root))


def configure_connection(km: Any, run_dir: Path, user: KernelUser) -> KernelConnectionInfo:
    """Point the manager at the ipc sockets and write the container's connection file.

    Returns the host-side connection info (the provisioner's ``connection_info``).
    """
    km.transport = "ipc"
    km.ip = str(run_dir / SOCKET_DIR / "k")
    km.write_connection_file()
    connection_info: KernelConnectionInfo = km.get_connection_info()
    info = dict(connection_info)
    key = info.get("key", b"")
    info["key"] = key.decode() if isinstance(key, bytes) else key
    info["ip"] = f"{CONTAINER_RUN_DIR}/k"
    info["kernel_name"] = km.kernel_name  # a jupyter_client KernelManager's trait
    owner = (user.uid, user.gid) if os.geteuid() == 0 and not user.mapped else None
    with Folder.open(run_dir, CONF_DIR) as folder:
        folder.write_atomic("kernel.json", [json.dumps(info).encode()], mode=0o400, owner=owner)
    return connection_info


def kernel_cmd(argv: list[str], extra_arguments: list[str]) -> list[str]:
    """The kernelspec argv with ``{connection_file}`` pointing into the container.

    jupyter_client's ``format_kernel_cmd`` is not used on purpose: it replaces ``python``
    with this process's ``sys.executable``, a host path that means nothing in the image.
    """
    argv = [*argv, *extra_arguments]
    if not any("{connection_file}" in arg for arg in argv):
        raise KernelStartError(
            "the kernelspec's argv must contain '{connection_file}', e.g. "
            '["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]'
        )
    return [arg.replace("{connection_file}", CONTAINER_CONNECTION_FILE) for arg in argv]
