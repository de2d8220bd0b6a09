"""``DockerProvisioner``: a jupyter_client kernel provisioner that runs each kernel in a container.

Any Jupyter client (JupyterLab, nbclient, papermill, jupyter-exec sessions) selects it with a
kernelspec whose ``metadata.kernel_provisioner.provisioner_name`` is ``jupyter-exec-docker``.
How it works:

* **Transport**: ZMQ over ``ipc``. Each kernel gets a short private run dir on the host
  (``<run_root>/jx-XXXXXXXX``, mode 0700) holding two folders: ``s``, the only one the kernel
  can write, bind-mounted at ``/run/jx``, where it creates its sockets and the client connects
  to them (so the container needs no network at all); and ``c``, mounted read-only at
  ``/run/jxc``, holding the container's copy of the connection file (its ``ip`` is
  ``/run/jx/k``). The host writes that copy with :mod:`jupyter_exec.safefs` into a folder the
  kernel cannot change, and gives it to the kernel's uid with ``fchown`` on the new file, so no
  link the kernel plants can make the host write or chown anything else.
* **Work dir**: the ``cwd`` jupyter_client passes to ``start_kernel`` (JupyterLab passes the
  notebook's directory) is mounted at ``work_mount`` (``/work``) and is the kernel's cwd.
* **User**: never root on the host by default (with a rootless engine the container's root is
  your own uid); see :mod:`jupyter_exec.docker.ownership` for the rule.
* **Hardening**: ``--init``, no network, read-only root with a tmpfs ``/tmp`` (``HOME=/tmp``),
  all capabilities dropped, no-new-privileges, memory (swap equal), cpu and pids limits. Every
  one is a trait below, so it can be relaxed from the kernelspec, a Jupyter config file
  (``c.DockerProvisioner.network = True``) or ``Session(docker={...})``.
* **Death**: a watcher thread notices the container stopping at once (``poll()`` just reads
  it) and :meth:`DockerProvisioner.exit_description` says why (OOM killer, ``docker kill``...).
* **Orphans**: containers are labelled with their owner process. A watchdog process
  (:mod:`jupyter_exec.docker.watchdog`) removes them within a second when the owner dies in any
  way, SIGKILL included; containers whose owner died anyway (the watchdog was killed too) are
  reaped on the first start in each process and by ``jupyter-exec reap``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.utils
from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase
from traitlets import Bool, Dict, Float, Int, List, TraitError, Unicode, Union, validate

from jupyter_exec.docker import reap as reaping
from jupyter_exec.docker.engine import connect, docker_errors, is_rootless
from jupyter_exec.docker.execcmd import exec_command
from jupyter_exec.docker.image import DEFAULT_BASE_IMAGE, BuildOptions, ensure_image
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
from jupyter_exec.docker.ownership import KernelUser, choose_user, lend
from jupyter_exec.docker.watchdog import ensure_watchdog
from jupyter_exec.docker.watcher import ExitWatcher
from jupyter_exec.exceptions import KernelNotAliveError, KernelStartError
from jupyter_exec.network.bundle import image_bundle, needs_bundle, write_bundle
from jupyter_exec.network.proxy import CONTAINER_DIR, ca_env, forwarder_command, kernel_env
from jupyter_exec.safefs import Folder

__all__ = ["DockerProvisioner"]

#: sizeof(sockaddr_un.sun_path) - 1: the longest ipc socket path ZMQ can bind or connect.
MAX_SOCKET_PATH = 107
CONTAINER_CONNECTION_FILE = f"{CONTAINER_CONF_DIR}/kernel.json"
SOCKET_DIR = "s"  # in the run dir: the kernel's sockets (the only part the kernel can write)
CONF_DIR = "c"  # in the run dir: the container's connection file (read-only in the container)


class DockerProvisioner(KernelProvisionerBase):
    """Runs the kernel in a hardened Docker container; see the module docstring."""

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

    # -- state -----------------------------------------------------------------------------
    _container_id: str | None = None
    _watcher: ExitWatcher | None = None
    _active = False
    _run_dir: Path | None = None
    _work_dir: Path | None = None
    _kernel_user: KernelUser | None = None
    _image_tag = ""

    _reaped_hosts: set[str] = set()  # per process, on purpose

    # -- helpers ---------------------------------------------------------------------------
    def _client(self) -> docker.DockerClient:
        return connect(self.docker_host)

    def _build_options(self) -> BuildOptions:
        return BuildOptions(
            tag=self.image,
            base_image=self.base_image,
            pip_packages=tuple(self.pip_packages),
            requirements_file=self.requirements_file,
            dockerfile=self.dockerfile,
            data_stack=self.data_stack,
        )

    def _progress(self, line: str) -> None:
        """Build progress goes to stderr so that a first-use build is visibly alive."""
        self.log.info("%s", line)
        print(f"[jupyter-exec] {line}", file=sys.stderr, flush=True)

    def _reap_once(self, client: docker.DockerClient) -> None:
        key = self.docker_host or "default"
        if key in DockerProvisioner._reaped_hosts:
            return
        DockerProvisioner._reaped_hosts.add(key)
        result = reaping.reap(client)
        if result.removed:
            self.log.info("reaped orphaned kernel containers: %s", ", ".join(result.removed))

    def _make_run_dir(self, user: KernelUser) -> Path:
        root = self.run_root or tempfile.gettempdir()
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
                    f"user={self.user!r}: without root, the kernel can only run as your own uid "
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

    def _engine_path(self, local: Path, bind: str, local_root: str = "") -> str:
        """``local`` as the engine sees it, given a Docker-out-of-Docker mapping."""
        if not bind:
            return str(local)
        if not local_root:
            return bind
        return str(Path(bind) / local.relative_to(local_root))

    def _configure_connection(self, km: Any, user: KernelUser) -> None:
        """Point the manager at the ipc sockets and write the container's connection file."""
        assert self._run_dir is not None
        km.transport = "ipc"
        km.ip = str(self._run_dir / SOCKET_DIR / "k")
        km.write_connection_file()
        self.connection_info = km.get_connection_info()
        info = dict(self.connection_info)
        key = info.get("key", b"")
        info["key"] = key.decode() if isinstance(key, bytes) else key
        info["ip"] = f"{CONTAINER_RUN_DIR}/k"
        info["kernel_name"] = getattr(km, "kernel_name", "")
        owner = (user.uid, user.gid) if os.geteuid() == 0 and not user.mapped else None
        with Folder.open(self._run_dir, CONF_DIR) as folder:
            folder.write_atomic("kernel.json", [json.dumps(info).encode()], mode=0o400, owner=owner)

    def _kernel_cmd(self, extra_arguments: list[str]) -> list[str]:
        """The kernelspec argv with ``{connection_file}`` pointing into the container.

        jupyter_client's ``format_kernel_cmd`` is not used on purpose: it replaces ``python``
        with this process's ``sys.executable``, a host path that means nothing in the image.
        """
        argv = [*self.kernel_spec.argv, *extra_arguments]
        if not any("{connection_file}" in arg for arg in argv):
            raise KernelStartError(
                "the kernelspec's argv must contain '{connection_file}', e.g. "
                '["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]'
            )
        return [arg.replace("{connection_file}", CONTAINER_CONNECTION_FILE) for arg in argv]

    def _run_spec(self, cmd: list[str], env: dict[str, str], user: KernelUser) -> RunSpec:
        assert self._run_dir is not None
        assert self._work_dir is not None
        kernel_id = str(self.kernel_id or "")
        labels = reaping.container_labels(
            kernel_id=kernel_id,
            run_dir=str(self._run_dir),
            work_dir=str(self._work_dir),
            keep=not self.auto_remove,
        )
        run_root = str(self._run_dir.parent)
        conf = Mount(
            self._engine_path(self._run_dir / CONF_DIR, self.run_root_bind, run_root),
            CONTAINER_CONF_DIR,
            read_only=True,
        )
        return RunSpec(
            image=self._image_tag,
            command=tuple(cmd),
            name=f"jx-{kernel_id[:8] or 'kernel'}-{secrets.token_hex(3)}",
            user=user.docker_user,
            work_mount=Mount(
                self._engine_path(self._work_dir, self.bind_dir), self.work_mount, read_only=False
            ),
            run_mount=Mount(
                self._engine_path(self._run_dir / SOCKET_DIR, self.run_root_bind, run_root),
                CONTAINER_RUN_DIR,
                read_only=False,
            ),
            env=env,
            labels=labels,
            volumes=(conf, *self._proxy_mounts(), *(parse_volume(v) for v in self.volumes)),
            security=Security(
                init=self.init,
                read_only=self.read_only,
                tmpfs_size=self.tmpfs_size,
                tmp_exec=self.tmp_exec,
                cap_drop=tuple(self.cap_drop),
                cap_add=tuple(self.cap_add),
                no_new_privileges=self.no_new_privileges,
                network=network_mode(self.network),
                packages_dir=self.packages_dir,
            ),
            limits=Limits(
                memory=self.memory,
                memory_swap=self.memory_swap,
                cpus=self.cpus,
                pids=self.pids_limit,
                nofile=self.nofile_limit,
            ),
            extra=dict(self.run_kwargs),
        )

    def _proxy_mounts(self) -> tuple[Mount, ...]:
        if not self.network_proxy:
            return ()
        return (Mount(self.network_proxy, CONTAINER_DIR, read_only=True),)

    def _kernel_env(self, requested: dict[str, str], user: KernelUser) -> dict[str, str]:
        spec_env = list(self.kernel_spec.env) if self.kernel_spec is not None else []
        env = {"HOME": "/tmp", "USER": user.name, "LOGNAME": user.name}
        env.update(forwarded_env(requested, os.environ, always=spec_env))
        if self.network_proxy:
            env.update(kernel_env())
            if needs_bundle(self.network_proxy):
                env.update(ca_env())
        env.update(self.env)
        return env

    def _launch_blocking(self, spec: RunSpec) -> str:
        client = self._client()
        ensure_watchdog(self.docker_host)  # before any container exists that it must clean up
        loan = None
        if self._kernel_user is not None and self._work_dir is not None:
            loan = lend(self._work_dir, self._kernel_user)
        if loan is not None:
            spec = dataclasses.replace(spec, labels={**spec.labels, reaping.L_LENT: loan.label})
        try:
            with docker_errors(f"starting kernel container from {spec.image}"):
                container = client.containers.run(**run_kwargs(spec))
        except BaseException:
            if loan is not None and self._work_dir is not None:
                reaping.release_loan(client, dict(spec.labels))
            raise
        container_id = str(container.id)
        _live_containers[container_id] = (self.docker_host, dict(spec.labels))
        return container_id

    # -- KernelProvisionerBase -------------------------------------------------------------
    @property
    def has_process(self) -> bool:
        return self._active

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Reap orphans, make sure the image exists, prepare the run dir and connection files."""
        km = self.parent
        if km is None:
            raise KernelStartError("DockerProvisioner must be created by a kernel manager")
        kwargs.pop("transport_encryption", None)
        proxy = kwargs.pop("network_proxy", None)  # per kernel (a jupyter_server's start_kernel)
        if proxy:
            self.network_proxy = str(proxy)
        extra_arguments = list(kwargs.pop("extra_arguments", None) or [])
        work_dir = Path(kwargs.pop("cwd", None) or os.getcwd()).resolve()
        client = await asyncio.to_thread(self._client)
        if self.reap_on_start:
            await asyncio.to_thread(self._reap_once, client)
        options = self._build_options()
        self._image_tag = await asyncio.to_thread(
            ensure_image,
            client,
            options,
            build_if_missing=self.build_if_missing,
            on_line=self._progress,
        )
        if self._kernel_user is None or work_dir != self._work_dir:
            rootless = await asyncio.to_thread(is_rootless, client, self.docker_host)
            self._kernel_user = choose_user(
                work_dir, explicit=self.user, fallback=self.fallback_user, rootless=rootless
            )
        self._work_dir = work_dir
        if self._run_dir is None or not self._run_dir.is_dir():
            self._run_dir = self._make_run_dir(self._kernel_user)
        self._configure_connection(km, self._kernel_user)
        cmd = self._kernel_cmd(extra_arguments)
        if self.network_proxy:
            if network_mode(self.network) != "none":
                raise KernelStartError(
                    "a network policy (network_proxy) needs the container without a network "
                    f"of its own, but network={self.network!r}; drop the network option"
                )
            cmd = forwarder_command(cmd)
            if needs_bundle(self.network_proxy):  # the image's CA bundle + the session's CA
                system = await asyncio.to_thread(image_bundle, client, self._image_tag)
                write_bundle(self.network_proxy, system)
        return dict(await super().pre_launch(cmd=cmd, **kwargs))

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Start the container and the watcher; return the host-side connection info."""
        assert self._kernel_user is not None
        env = self._kernel_env(dict(kwargs.get("env") or {}), self._kernel_user)
        spec = self._run_spec(cmd, env, self._kernel_user)
        started = time.time()
        try:
            self._container_id = await asyncio.to_thread(self._launch_blocking, spec)
        except BaseException:
            if self._run_dir is not None:  # nothing will ever clean it up otherwise
                shutil.rmtree(self._run_dir, ignore_errors=True)
                self._run_dir = None
            raise
        self._watcher = ExitWatcher(
            lambda: connect(self.docker_host, fresh=True),
            self._container_id,
            memory=self.memory,
            started=started,
        )
        self._watcher.start()
        self._active = True
        self.log.debug("kernel %s runs in container %s", self.kernel_id, spec.name)
        return self.connection_info

    async def poll(self) -> int | None:
        """None while the container runs; its exit code once it stopped (no engine call)."""
        if self._watcher is None:
            return 0
        return self._watcher.exit_code

    async def wait(self) -> int | None:
        if self._watcher is None:
            return 0
        while self._watcher.exit_code is None:
            await asyncio.sleep(0.05)
        self._active = False
        return self._watcher.exit_code

    async def send_signal(self, signum: int) -> None:
        """Signal the kernel through the engine (docker-init forwards it to the kernel)."""
        if signum == 0 or self._container_id is None:
            return
        await asyncio.to_thread(self._signal, int(signum))

    def _signal(self, signum: int) -> None:
        container_id = self._container_id
        if container_id is None:
            return
        with docker_errors("signalling the kernel container"):
            try:
                self._client().api.kill(container_id, signal=signum)
            except docker.errors.APIError as exc:
                if exc.status_code not in (404, 409):  # gone / not running: nothing to do
                    raise

    async def kill(self, restart: bool = False) -> None:
        if self._watcher is not None:
            self._watcher.stopped_by_us = True
        await self.send_signal(9)

    async def terminate(self, restart: bool = False) -> None:
        if self._watcher is not None:
            self._watcher.stopped_by_us = True
        await self.send_signal(15)

    async def shutdown_requested(self, restart: bool = False) -> None:
        if self._watcher is not None:
            self._watcher.stopped_by_us = True

    async def cleanup(self, restart: bool = False) -> None:
        """Remove the container (unless kept); on final cleanup also the run dir and the loan."""
        container_id, self._container_id = self._container_id, None
        if container_id is not None:
            await asyncio.to_thread(self._dispose, container_id, restart)

    def _dispose(self, container_id: str, restart: bool) -> None:
        _host, labels = _live_containers.pop(container_id, (self.docker_host, {}))
        client = self._client()
        with docker_errors("removing the kernel container"):
            if self.auto_remove:
                reaping.force_remove(client, container_id)
            else:
                with contextlib.suppress(docker.errors.APIError):  # already stopped: keep it
                    client.api.kill(container_id)
        if restart:
            return
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None
        if labels:
            reaping.release_loan(client, labels)

    async def exit_description(self) -> str | None:
        """Why the kernel's container stopped ("killed by the out-of-memory killer ..."), or None.

        Call it after ``is_alive()`` turned False. It waits up to 3 s for the watcher to collect
        the container's state, events and last log lines.
        """
        watcher = self._watcher
        if watcher is None or watcher.exit_code is None:
            return None
        deadline = time.monotonic() + 3.0
        while not watcher.described.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return watcher.description or f"exited with code {watcher.exit_code}"

    async def run_command(self, argv: list[str], *, timeout: float | None) -> tuple[int, str]:
        """Run ``argv`` in the kernel's container (cwd: the work dir); return (exit code, output).

        stdout and stderr are combined in order. A command running past ``timeout`` seconds is
        killed with its children and the exit code is 124 (as with coreutils ``timeout``).
        """
        if self._container_id is None or await self.poll() is not None:
            raise KernelNotAliveError("the kernel's container is not running")
        return await asyncio.to_thread(
            exec_command,
            self._client(),
            self._container_id,
            argv,
            workdir=self.work_mount,
            timeout=timeout,
        )

    def resolve_path(self, path: str) -> str | None:
        """Map a kernel-side path (relative, or under ``work_mount``) to the host work dir."""
        if self._work_dir is None:
            return None
        mount = self.work_mount.rstrip("/") + "/"
        if path.startswith(mount):
            path = path[len(mount) :]
        elif os.path.isabs(path):
            return None
        host = (self._work_dir / path).resolve()
        if host != self._work_dir and self._work_dir not in host.parents:
            return None
        return str(host) if host.exists() else None

    async def get_provisioner_info(self) -> dict[str, Any]:
        info: dict[str, Any] = await super().get_provisioner_info()
        info.update(
            container_id=self._container_id,
            run_dir=str(self._run_dir) if self._run_dir else None,
            work_dir=str(self._work_dir) if self._work_dir else None,
        )
        return info

    async def load_provisioner_info(self, provisioner_info: dict[str, Any]) -> None:
        await super().load_provisioner_info(provisioner_info)
        self._container_id = provisioner_info.get("container_id")
        run_dir, work_dir = provisioner_info.get("run_dir"), provisioner_info.get("work_dir")
        self._run_dir = Path(run_dir) if run_dir else None
        self._work_dir = Path(work_dir) if work_dir else None
        if self._container_id:
            self._watcher = ExitWatcher(
                lambda: connect(self.docker_host, fresh=True),
                self._container_id,
                memory=self.memory,
                started=time.time(),
            )
            self._watcher.start()
            self._active = True


#: Containers started by this process and not yet cleaned up: removed at interpreter exit, so a
#: forgotten ``shutdown_kernel()`` does not leave a container behind. (A crash leaves them to
#: ``reap``.)
_live_containers: dict[str, tuple[str, dict[str, str]]] = {}
_atexit_lock = threading.Lock()


@atexit.register
def _remove_leftovers() -> None:
    with _atexit_lock:
        leftovers = list(_live_containers.items())
        _live_containers.clear()
    for container_id, (docker_host, _labels) in leftovers:
        try:
            client = connect(docker_host)
            reaping.remove_container(client, container_id, _labels)
        except Exception:  # best effort at exit; reap catches the rest
            continue
