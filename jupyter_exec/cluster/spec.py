"""The kernelspec ``jupyter-exec gateway`` serves: our provisioner, the hosts, the launcher.

One spec, written into a directory private to one gateway run (it is the
gateway's only kernel dir, and the only name its spec manager will start: see
:class:`jupyter_exec.cluster.gateway.ClusterKernelSpecManager`). It selects
our ``jupyter-exec-distributed`` provisioner by data (the entry point named in
``metadata.kernel_provisioner``), lists the hosts in its config, declares
``curve`` in ``metadata.supported_encryption`` so gateway_provisioners may ask
the launcher for CurveZMQ, and runs the launcher with the host's own Python.

gateway_provisioners joins the argv with spaces into a shell command on the
host, without quoting; so every value we put in is checked to need no quoting,
and every placeholder is written ``--name={placeholder}``, which stays one
argument even when gateway_provisioners substitutes an empty string (it does
for ``{transport_encryption}`` when encryption is off).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyter_exec.exceptions import InvalidArgument

__all__ = [
    "PROVISIONER_NAME",
    "SPEC_NAME",
    "kernel_spec",
    "launcher_argv",
    "write_kernel_spec",
]

SPEC_NAME = "python3"
"""The kernelspec's name: the gateway's default and only kernel.

``python3``, the name every Jupyter client asks for by default (jupyter-exec's
``Session``, nbclient, papermill, JupyterLab), so they all get a cluster kernel
without being told a name; the display name says where it runs.
"""

PROVISIONER_NAME = "jupyter-exec-distributed"
"""Our DistributedProvisioner's entry point (``jupyter_client.kernel_provisioners``)."""


def _plain(value: str, what: str) -> str:
    if not value or shlex.quote(value) != value:
        raise InvalidArgument(
            f"{what} must need no shell quoting (no spaces, quotes or $), not {value!r}"
        )
    return value


def launcher_argv(python: str, launcher: str, work_root: str) -> list[str]:
    """The launcher's command line (the cluster contract), placeholders left to the provisioner."""
    return [
        _plain(python, "--python"),
        _plain(launcher, "the launcher's path"),
        "--kernel-id={kernel_id}",
        "--response-address={response_address}",
        "--public-key={public_key}",
        "--port-range={port_range}",
        "--transport-encryption={transport_encryption}",
        f"--work-root={_plain(work_root, '--remote-dir')}",
    ]


def kernel_spec(
    hosts: Sequence[str],
    *,
    python: str,
    launcher: str,
    work_root: str,
    launch_timeout: int = 60,
) -> dict[str, Any]:
    """The kernel.json of the gateway's one kernelspec."""
    if not hosts:
        raise InvalidArgument("a cluster kernelspec needs at least one host")
    shown = ", ".join(hosts)
    return {
        "argv": launcher_argv(python, launcher, work_root),
        "display_name": f"Python 3 (jupyter-exec cluster: {shown})",
        "language": "python",
        "interrupt_mode": "signal",
        "env": {},
        "metadata": {
            "kernel_provisioner": {
                "provisioner_name": PROVISIONER_NAME,
                "config": {"remote_hosts": list(hosts), "launch_timeout": launch_timeout},
            },
            "supported_encryption": ["curve"],
            "jupyter_exec": {"hosts": list(hosts)},
        },
    }


def write_kernel_spec(kernels_dir: Path, spec: dict[str, Any]) -> Path:
    """Write ``spec`` as ``kernels_dir/<SPEC_NAME>/kernel.json`` (dir 0700, file 0600)."""
    folder = kernels_dir / SPEC_NAME
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    path = folder / "kernel.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(spec, out, indent=2)
        out.write("\n")
    return path
