"""Kernelspecs for the non-local backends, built in memory from a session's options.

A session never talks to Docker itself: it asks jupyter_client for a kernel
from a kernelspec naming our provisioner, exactly as JupyterLab does with the
installed "Python 3 (Docker)" kernelspec. The options become the
provisioner's traits (``metadata.kernel_provisioner.config``).
"""

from __future__ import annotations

from typing import Any

from jupyter_client.kernelspec import KernelSpec

from jupyter_exec.docker import PROVISIONER_NAME

__all__ = ["docker_kernel_spec"]


def docker_kernel_spec(options: dict[str, Any]) -> KernelSpec:
    """A kernelspec that runs ipykernel in a container through ``DockerProvisioner``."""
    return KernelSpec(
        argv=["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        display_name="Python 3 (Docker)",
        language="python",
        interrupt_mode="message",
        metadata={
            "kernel_provisioner": {"provisioner_name": PROVISIONER_NAME, "config": dict(options)}
        },
    )
