"""``DockerProvisioner``: a jupyter_client kernel provisioner that runs each kernel in a container.

Any Jupyter client (JupyterLab, nbclient, papermill, jupyter-exec sessions) selects it with a
kernelspec whose ``metadata.kernel_provisioner.provisioner_name`` is ``jupyter-exec-docker``.
How it works:

* **Transport**: ZMQ over ``ipc``. Each kernel gets a short private run dir on the host
  (``<run_root>/jx-XXXXXXXX``, mode 0700) holding two folders: ``s``, the only one the kernel
  can write, bind-mounted at ``/run/jx``, where it creates its sockets and the client connects
  to them (so the container needs no network at all); and ``c``, mounted read-only at
  ``/run/jxc``, holding the container's copy of the connection file (its ``ip`` is
  ``/run/jx/k``). The host writes that copy with :mod:`jupyter_exec.boundary.paths` into a folder
  the
  kernel cannot change, and gives it to the kernel's uid with ``fchown`` on the new file, so no
  link the kernel plants can make the host write or chown anything else.
* **Work dir**: the ``cwd`` jupyter_client passes to ``start_kernel`` (JupyterLab passes the
  notebook's directory) is mounted at ``work_mount`` (``/work``) and is the kernel's cwd. It
  is reached with :func:`jupyter_exec.boundary.paths.pin_dir` (a link a kernel could have planted is
  refused, never followed) and held open until the container runs: the loan and the folder
  the engine mounted are checked against the pinned one by device and inode.
* **User**: never root on the host by default (with a rootless engine the container's root is
  your own uid); see :mod:`jupyter_exec.docker.ownership` for the rule.
* **Hardening**: ``--init``, no network, read-only root with a tmpfs ``/tmp`` (``HOME=/tmp``),
  all capabilities dropped, no-new-privileges, memory (swap equal), cpu and pids limits. Every
  one is a trait (:mod:`~jupyter_exec.docker.config`), so it can be relaxed from the kernelspec,
  a Jupyter config file (``c.DockerProvisioner.network = True``) or ``Session(docker={...})``.
* **Death**: a watcher thread notices the container stopping at once (``poll()`` just reads
  it) and :meth:`DockerProvisioner.exit_description` says why (OOM killer, ``docker kill``...).
* **Orphans**: containers are labelled with their owner process. A watchdog process
  (:mod:`jupyter_exec.docker.watchdog`) removes them within a second when the owner dies in any
  way, SIGKILL included; containers whose owner died anyway (the watchdog was killed too) are
  reaped on the first start in each process and by ``jupyter-exec reap``.

The pieces live in their own modules: the traits in :mod:`~jupyter_exec.docker.config`, the run
dir and connection files in :mod:`~jupyter_exec.docker.rundir`, the container's env, spec and
start in :mod:`~jupyter_exec.docker.launch`, and the network-policy proxy's mount, env, command
and CA bundle in :mod:`~jupyter_exec.docker.netproxy`. This module is the lifecycle that
jupyter_client drives (``pre_launch`` ... ``cleanup``) and ties them together.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase

from jupyter_exec.boundary.paths import Folder, inside, lend_folder, pin_dir
from jupyter_exec.docker import reap as reaping
from jupyter_exec.docker.config import DockerTraits
from jupyter_exec.docker.engine import connect, docker_errors, is_rootless
from jupyter_exec.docker.execcmd import exec_command
from jupyter_exec.docker.image import ensure_image
from jupyter_exec.docker.launch import container_env, live_containers, run_spec, start_container
from jupyter_exec.docker.netproxy import proxy_command, write_proxy_bundle
from jupyter_exec.docker.ownership import KernelUser, choose_user
from jupyter_exec.docker.rundir import configure_connection, kernel_cmd, make_run_dir
from jupyter_exec.docker.watcher import ExitWatcher
from jupyter_exec.exceptions import (
    JupyterExecError,
    KernelNotAliveError,
    KernelStartError,
    WorkDirError,
)

__all__ = ["DockerProvisioner"]


# The traits (``c.DockerProvisioner.<name>``) are declared in DockerTraits (docker.config).
# KernelProvisionerMeta derives from traitlets' MetaHasTraits at run time (jupyter_client builds
# it from ``type(LoggingConfigurable)``), which mypy cannot see: there is no real conflict.
class DockerProvisioner(KernelProvisionerBase, DockerTraits):  # type: ignore[metaclass]
    """Runs the kernel in a hardened Docker container; see the module docstring."""

    # -- state -----------------------------------------------------------------------------
    _container_id: str | None = None
    _watcher: ExitWatcher | None = None
    _active = False
    _run_dir: Path | None = None
    _work_dir: Path | None = None
    _kernel_user: KernelUser | None = None
    _image_tag = ""

    _reaped_hosts: set[str] = set()  # per process, on purpose

    _pinned: Folder | None = None

    # -- what the rest of jupyter-exec reads (engine.provisioning.ContainerProvisioner) --------
    @property
    def image_tag(self) -> str:
        """The image the container was started from (empty before the launch)."""
        return self._image_tag

    @property
    def container_id(self) -> str | None:
        """The running container's id (None: none started, or removed)."""
        return self._container_id

    @property
    def run_dir(self) -> Path | None:
        """The host's run dir: the kernel's sockets (``s``) and connection files (``c``)."""
        return self._run_dir

    @property
    def kernel_user(self) -> KernelUser | None:
        """The uid and gid the kernel runs as (chosen at launch)."""
        return self._kernel_user

    def docker_client(self) -> docker.DockerClient:
        """A client of the engine that runs the container (``docker_host``)."""
        return self._client()

    # -- helpers ---------------------------------------------------------------------------
    def _forget_pin(self) -> None:
        pinned, self._pinned = self._pinned, None
        if pinned is not None:
            pinned.close()

    def _client(self) -> docker.DockerClient:
        return connect(self.docker_host)

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
        # The folder is pinned (no link a kernel planted is followed) and held open until the
        # container started, so its identity is checked where it is lent and mounted.
        cwd = kwargs.pop("cwd", None) or os.getcwd()
        try:
            pinned = await asyncio.to_thread(pin_dir, cwd)
        except FileNotFoundError:
            raise WorkDirError(f"work dir {cwd} does not exist") from None
        lend_folder(pinned)  # the kernel writes it: no link in it is followed from now on
        self._forget_pin()
        self._pinned = pinned
        work_dir = pinned.path
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
            self._run_dir = make_run_dir(self.run_root, self._kernel_user, self.user)
        self.connection_info = configure_connection(km, self._run_dir, self._kernel_user)
        cmd = kernel_cmd(list(self.kernel_spec.argv), extra_arguments)
        if self.network_proxy:
            cmd = proxy_command(cmd, self.network)
            # the image's CA bundle + the session's CA
            await write_proxy_bundle(client, self.network_proxy, self._image_tag)
        return dict(await super().pre_launch(cmd=cmd, **kwargs))

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Start the container and the watcher; return the host-side connection info."""
        assert self._kernel_user is not None
        assert self._run_dir is not None
        assert self._work_dir is not None
        spec_env = list(self.kernel_spec.env) if self.kernel_spec is not None else []
        env = container_env(self, dict(kwargs.get("env") or {}), self._kernel_user, spec_env)
        spec = run_spec(
            self,
            kernel_id=str(self.kernel_id or ""),
            cmd=cmd,
            env=env,
            user=self._kernel_user,
            run_dir=self._run_dir,
            work_dir=self._work_dir,
            image_tag=self._image_tag,
        )
        started = time.time()
        identity = self._pinned.identity() if self._pinned is not None else None
        if self.bind_dir or (self.docker_host and not self.docker_host.startswith("unix:")):
            identity_mount = None  # the engine sees other paths: only the pinned path holds
        else:
            identity_mount = identity
        try:
            self._container_id = await asyncio.to_thread(
                start_container,
                self.docker_host,
                spec,
                self._work_dir,
                self._kernel_user,
                identity_mount,
            )
        except BaseException:
            self._forget_pin()
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
        self._forget_pin()
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
        self._forget_pin()
        container_id, self._container_id = self._container_id, None
        if container_id is not None:
            await asyncio.to_thread(self._dispose, container_id, restart)

    def _dispose(self, container_id: str, restart: bool) -> None:
        _host, labels = live_containers.pop(container_id, (self.docker_host, {}))
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
        try:
            host = inside(self._work_dir, path)
        except (JupyterExecError, OSError):  # outside, or through a link: not ours to map
            return None
        return str(host) if os.path.lexists(host) else None

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
