"""The ``DockerProvisioner``'s configuration: every trait, its help and its validation.

They live apart from the provisioner's lifecycle code so that a reader looking for "what can be
set, and what does it default to" finds the whole list in one place. ``DockerTraits`` is a plain
``HasTraits`` mixin, not a ``Configurable``, on purpose: the traits stay configured as
``c.DockerProvisioner.<name>`` only (a ``Configurable`` base would add a second config section
name, and a second entry in the configuration reference). The defaults are the hardened ones;
:mod:`jupyter_exec.docker.options` turns the values into ``containers.run`` arguments.
"""

from __future__ import annotations

from typing import Any

import docker.errors
import docker.utils
from traitlets import Bool, Dict, Float, HasTraits, Int, List, TraitError, Unicode, Union, validate

from jupyter_exec.docker.image import DEFAULT_BASE_IMAGE, BuildOptions
from jupyter_exec.docker.options import parse_volume
from jupyter_exec.network.proxy import CONTAINER_DIR

__all__ = ["DockerTraits"]


class DockerTraits(HasTraits):
    """The configurable options of :class:`~jupyter_exec.docker.provisioner.DockerProvisioner`."""

    # -- image -----------------------------------------------------------------------------
    image = Unicode(
        "",
        help="Kernel image. Empty: jupyter-exec/kernel:latest, or a content-hashed tag when "
        "pip_packages/requirements_file/dockerfile are set.",
    ).tag(config=True)
    build_if_missing = Bool(
        True, help="Build the kernel image on first use when it does not exist."
    ).tag(config=True)
    base_image = Unicode(
        DEFAULT_BASE_IMAGE, help="Base image for building the kernel image (needs python3)."
    ).tag(config=True)
    pip_packages = List(Unicode(), help="Extra pip packages baked into the kernel image.").tag(
        config=True
    )
    requirements_file = Unicode(
        "", help="A pip requirements file baked into the kernel image."
    ).tag(config=True)
    dockerfile = Unicode(
        "", help="Your Dockerfile: built first, then used as the base of the kernel image."
    ).tag(config=True)
    data_stack = Bool(
        True, help="Install numpy, pandas and matplotlib when building the kernel image."
    ).tag(config=True)

    # -- identity and mounts ---------------------------------------------------------------
    user = Unicode(
        "",
        help="UID[:GID] to run the kernel as. Empty: the work dir's owner (this process's uid "
        "when not root; fallback_user for a root-owned dir).",
    ).tag(config=True)
    fallback_user = Unicode(
        "65532:65532",
        help="Unprivileged UID:GID used when the work dir is owned by root; that one folder is "
        "lent to it (an ACL entry, owner untouched) while the kernel runs, and taken back after.",
    ).tag(config=True)
    work_mount = Unicode("/work", help="Where the work dir is mounted in the container.").tag(
        config=True
    )
    bind_dir = Unicode(
        "",
        help="The work dir's path as the Docker engine's host sees it, when it differs from "
        "the path this process sees (Docker-out-of-Docker).",
    ).tag(config=True)
    run_root = Unicode(
        "",
        help="Where per-kernel run dirs (connection file, ipc sockets) are created. Empty: "
        "the system temp dir. Must be short: socket paths are limited to 107 characters.",
    ).tag(config=True)
    run_root_bind = Unicode(
        "", help="run_root as the Docker engine's host sees it (Docker-out-of-Docker)."
    ).tag(config=True)
    volumes = List(
        Unicode(),
        help="Extra bind mounts 'HOST:CONTAINER[:ro|rw]'; read-only unless ':rw' is given.",
    ).tag(config=True)
    env = Dict(
        value_trait=Unicode(), help="Environment variables set in the kernel container."
    ).tag(config=True)

    # -- hardening -------------------------------------------------------------------------
    network = Union(
        [Bool(), Unicode()],
        default_value=False,
        help="False: no network (default). True: the default bridge. A string: that network.",
    ).tag(config=True)
    network_proxy = Unicode(
        "",
        help="A jupyter-exec network proxy's folder (its Unix socket and the forwarder script), "
        f"mounted read-only at {CONTAINER_DIR}: the kernel's HTTP(S) clients go through it while "
        "the container keeps no network; its CA bundle (the image's, plus the session's "
        "certificate authority) is there too. Set by Session(network=NetworkPolicy(...)).",
    ).tag(config=True)
    init = Bool(True, help="Run docker-init as PID 1 (needed for reliable interrupts).").tag(
        config=True
    )
    read_only = Bool(True, help="Read-only root filesystem (with a tmpfs /tmp).").tag(config=True)
    tmpfs_size = Unicode("512m", help="Size of the tmpfs mounted at /tmp.").tag(config=True)
    tmp_exec = Bool(False, help="Allow executing files from /tmp.").tag(config=True)
    packages_dir = Unicode(
        "/opt/packages",
        help="A writable tmpfs on PYTHONPATH where `pip install` puts packages at run time "
        "(the image stays read-only; downloading needs network=True). Empty: none.",
    ).tag(config=True)
    cap_drop = List(Unicode(), default_value=["ALL"], help="Capabilities to drop.").tag(config=True)
    cap_add = List(Unicode(), help="Capabilities to add back.").tag(config=True)
    no_new_privileges = Bool(True, help="Set the no-new-privileges security option.").tag(
        config=True
    )
    memory = Unicode("2g", help="Memory limit (e.g. '512m', '2g'); empty: none.").tag(config=True)
    memory_swap = Unicode(
        "", help="Memory+swap limit; empty: equal to memory (no swap). '-1': unlimited swap."
    ).tag(config=True)
    cpus = Float(1.0, help="CPU limit in cores; 0: none.").tag(config=True)
    pids_limit = Int(256, help="Maximum number of processes/threads; 0: none.").tag(config=True)
    nofile_limit = Int(4096, help="Open-files ulimit; 0: the engine's default.").tag(config=True)
    run_kwargs = Dict(
        help="Extra keyword arguments for docker's containers.run(), applied last."
    ).tag(config=True)

    # -- lifecycle -------------------------------------------------------------------------
    auto_remove = Bool(
        True,
        help="Remove the container when the kernel shuts down. False keeps the stopped "
        "container for inspection (`docker logs`, `docker inspect`); reap leaves it alone.",
    ).tag(config=True)
    reap_on_start = Bool(
        True, help="On the first start in a process, remove containers of dead owners."
    ).tag(config=True)
    docker_host = Unicode(
        "", help="Docker engine URL; empty: DOCKER_HOST or the local socket."
    ).tag(config=True)

    @validate("memory", "memory_swap", "tmpfs_size")
    def _valid_size(self, proposal: dict[str, Any]) -> str:
        value = str(proposal["value"]).strip()
        if value and value != "-1":
            try:
                docker.utils.parse_bytes(value)
            except docker.errors.DockerException:
                raise TraitError(f"{value!r} is not a size like '512m' or '2g'") from None
        return value

    @validate("volumes")
    def _valid_volumes(self, proposal: dict[str, Any]) -> list[str]:
        for text in proposal["value"]:
            try:
                parse_volume(text)
            except ValueError as exc:
                raise TraitError(str(exc)) from None
        return list(proposal["value"])

    def _build_options(self) -> BuildOptions:
        """The image traits as :func:`~jupyter_exec.docker.image.ensure_image` takes them."""
        return BuildOptions(
            tag=self.image,
            base_image=self.base_image,
            pip_packages=tuple(self.pip_packages),
            requirements_file=self.requirements_file,
            dockerfile=self.dockerfile,
            data_stack=self.data_stack,
        )
