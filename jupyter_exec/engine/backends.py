"""Kernelspecs for the non-local backends, built in memory from a session's options.

A session never talks to Docker itself: it asks jupyter_client for a kernel
from a kernelspec naming our provisioner, exactly as JupyterLab does with the
installed "Python 3 (Docker)" kernelspec. The options become the
provisioner's traits (``metadata.kernel_provisioner.config``). Each language's
kernel has its command in the image (``kernels/languages/Dockerfile``), which
is the kernel image with those kernels added.
"""

from __future__ import annotations

from typing import Any

from jupyter_client.kernelspec import KernelSpec

from jupyter_exec.docker import PROVISIONER_NAME
from jupyter_exec.engine.languages import kernel_for, language_of_kernel
from jupyter_exec.exceptions import InvalidArgument

__all__ = ["LANGUAGES_IMAGE", "docker_kernel_spec", "language_kernelspec"]

LANGUAGES_IMAGE = "jupyter-exec/kernel:languages"
"""The image a Docker kernel of another language than Python runs by default
(``jupyter-exec image build --languages r,bash,javascript,typescript``)."""

# language -> (argv in the image, display name, kernelspec language, interrupt mode)
_IN_IMAGE: dict[str, tuple[list[str], str, str, str]] = {
    "python": (
        ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "Python 3 (Docker)",
        "python",
        "message",
    ),
    "r": (
        ["R", "--slave", "-e", "IRkernel::main()", "--args", "{connection_file}"],
        "R (Docker)",
        "R",
        "signal",
    ),
    "bash": (
        ["python", "-m", "bash_kernel", "-f", "{connection_file}"],
        "Bash (Docker)",
        "bash",
        "signal",
    ),
    "typescript": (
        ["python", "/opt/kernel/share/jupyter-exec/deno_kernel.py", "{connection_file}"],
        "Deno (Docker)",
        "typescript",
        "message",
    ),
}


def language_kernelspec(language: str, backend: str) -> str:
    """The installed kernelspec that runs ``language`` on ``backend``: the language's own
    (``ir``) locally, jupyter-exec's shipped one (``ir-docker``, in ``kernels/``) in Docker."""
    kernel = kernel_for(language)
    if backend != "docker":
        return kernel
    _no_java_in_docker(language_of_kernel(kernel))
    return f"{kernel}-docker"


def _no_java_in_docker(language: str | None) -> None:
    if language == "java":
        raise InvalidArgument(
            "Java has no Docker kernel yet (JJava speaks TCP, which a network-less "
            "container does not have): run it on a local kernel"
        )


def docker_kernel_spec(options: dict[str, Any], kernel_name: str = "python3") -> KernelSpec:
    """A kernelspec that runs ``kernel_name``'s kernel in a container through
    ``DockerProvisioner`` (ipykernel for any name that is not one of the other languages')."""
    language = language_of_kernel(kernel_name) or "python"
    _no_java_in_docker(language)
    argv, display, spec_language, interrupt = _IN_IMAGE.get(language, _IN_IMAGE["python"])
    config = dict(options)
    if language != "python" and not config.get("image"):
        config["image"] = LANGUAGES_IMAGE
    return KernelSpec(
        argv=list(argv),
        display_name=display,
        language=spec_language,
        interrupt_mode=interrupt,
        metadata={"kernel_provisioner": {"provisioner_name": PROVISIONER_NAME, "config": config}},
    )
