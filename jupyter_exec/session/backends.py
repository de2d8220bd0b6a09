"""Kernelspecs for the non-local backends, built in memory from a session's options.

A session never talks to Docker itself: it asks jupyter_client for a kernel
from a kernelspec naming our provisioner, exactly as JupyterLab does with the
installed "Python 3 (Docker)" kernelspec. The options become the
provisioner's traits (``metadata.kernel_provisioner.config``). Each language's
kernel has its command in the image (``kernels/languages/Dockerfile``), which
is the kernel image with those kernels added; its record's ``docker`` says it.
"""

from __future__ import annotations

from typing import Any

from jupyter_client.kernelspec import KernelSpec

from jupyter_exec.docker import PROVISIONER_NAME
from jupyter_exec.engine.language_records import LANGUAGE_RECORDS, DockerKernel, Language
from jupyter_exec.engine.languages import language_of_kernel, language_record
from jupyter_exec.exceptions import InvalidArgument

__all__ = ["LANGUAGES_IMAGE", "docker_kernel_spec", "language_kernelspec"]

LANGUAGES_IMAGE = "jupyter-exec/kernel:languages"
"""The image a Docker kernel of another language than Python runs by default
(``jupyter-exec image build --languages r,bash,javascript,typescript``)."""


def language_kernelspec(language: str, backend: str) -> str:
    """The installed kernelspec that runs ``language`` on ``backend``: the language's own
    (``ir``) locally, jupyter-exec's shipped one (``ir-docker``, in ``kernels/``) in Docker."""
    record = language_record(language)
    if backend != "docker":
        return record.kernel
    _docker_kernel(record)
    return f"{record.kernel}-docker"


def _docker_kernel(record: Language) -> DockerKernel:
    """``record``'s Docker kernel; a language without one is refused, saying why."""
    if record.docker is None:
        why = record.no_docker_why.format(container="a network-less container")
        raise InvalidArgument(
            f"{record.title} has no Docker kernel yet ({why}): run it on a local kernel"
        )
    return record.docker


def docker_kernel_spec(options: dict[str, Any], kernel_name: str = "python3") -> KernelSpec:
    """A kernelspec that runs ``kernel_name``'s kernel in a container through
    ``DockerProvisioner`` (ipykernel for any name that is not one of the other languages')."""
    record = LANGUAGE_RECORDS[language_of_kernel(kernel_name) or "python"]
    docker = _docker_kernel(record)
    config = dict(options)
    if docker.languages_image and not config.get("image"):
        config["image"] = LANGUAGES_IMAGE
    return KernelSpec(
        argv=list(docker.argv),
        display_name=docker.display_name,
        language=record.spec_language,
        interrupt_mode=docker.interrupt_mode,
        metadata={"kernel_provisioner": {"provisioner_name": PROVISIONER_NAME, "config": config}},
    )
