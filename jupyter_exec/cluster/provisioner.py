"""``jupyter-exec-distributed``: gateway_provisioners' SSH provisioner, with its doors shut.

gateway_provisioners' ``DistributedProvisioner`` starts each kernel's launcher over SSH on one
of ``remote_hosts``. This subclass keeps its protocol and changes what it lets through:

* a pinned host (``KERNEL_REMOTE_HOST`` in the start request's env, which any client of the
  gateway may send) must be one of ``remote_hosts``: otherwise a client could run kernels on
  any machine the gateway's SSH key reaches;
* a kernel id must be a UUID (it names the kernel's directory on the host);
* a host that resolves to this machine is refused, always: for those the base class skips SSH
  and runs the launcher as the gateway itself, in the gateway's environment;
* the startup command sent over SSH is built here with every value shell-quoted (the base
  class pastes ``KERNEL_USERNAME``, which clients choose, between double quotes), and exports
  ``JUPYTER_EXEC_HOST``, the host the kernel was placed on;
* a restart stays on the kernel's host and tells the launcher so (``{"shutdown": 1,
  "restart": true}``), which keeps the kernel's work dir: files survive the restart;
* close means gone: when the launcher could not be told to shut down (the kernel had died, or
  was killed outright), the kernel's directory on its host is removed over SSH at cleanup.

Where each kernel runs is in its ``provisioner_info`` (``assigned_host``), as the base reports.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import shlex
import socket
import uuid
from pathlib import PurePosixPath
from typing import Any

from gateway_provisioners.distributed import (  # type: ignore[import-untyped]
    DistributedProvisioner as _GatewayDistributed,
)
from gateway_provisioners.remote_provisioner import (  # type: ignore[import-untyped]
    RemoteProvisionerBase,
)

from jupyter_exec.exceptions import InvalidArgument

__all__ = ["DistributedProvisioner"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
PIN_ENV = "KERNEL_REMOTE_HOST"


def _resolve(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError as exc:
        raise InvalidArgument(f"cluster host {host!r} does not resolve: {exc}") from exc


def refuse_local_host(host: str) -> str:
    """The host's address, or InvalidArgument when it is this machine (SSH would be skipped)."""
    address = _resolve(host)
    if RemoteProvisionerBase.ip_is_local(address):
        raise InvalidArgument(
            f"cluster host {host!r} ({address}) is this machine: gateway_provisioners would run "
            "the kernel as the gateway itself, without SSH. Name a host reached over SSH "
            "(on one machine, a second loopback address such as 127.0.0.2)."
        )
    return address


class DistributedProvisioner(_GatewayDistributed):  # type: ignore[misc]
    """Kernels on the hosts of ``remote_hosts`` over SSH, placed only where allowed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._restart_host: str | None = None
        self._shutdown_delivered = False

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Refuse a kernel id that is not a UUID before anything is sent anywhere: it names
        the kernel's directory on the host (the launcher checks it again)."""
        kernel_id = str(self.kernel_id)
        try:
            canonical = str(uuid.UUID(kernel_id))
        except ValueError:
            canonical = ""
        if not canonical or canonical != kernel_id:
            raise InvalidArgument(f"kernel id {kernel_id[:100]!r} is not a UUID")
        result: dict[str, Any] = await super().pre_launch(**kwargs)
        return result

    def _determine_next_host(self, env_dict: dict[str, Any]) -> str:
        """The host for this launch: a pinned host only from ``remote_hosts``; a restart stays
        where the kernel was; else the base class's round-robin or least-connection choice."""
        hosts = [str(host) for host in self.remote_hosts]
        pinned = env_dict.get(PIN_ENV)
        if pinned is not None and str(pinned) not in hosts:
            raise InvalidArgument(
                f"{PIN_ENV}={str(pinned)[:100]!r} is not one of this kernelspec's remote_hosts "
                f"({', '.join(hosts)}); a kernel may only be pinned to one of those"
            )
        choice_env = dict(env_dict)
        if pinned is None and self._restart_host in hosts:
            choice_env[PIN_ENV] = self._restart_host
        host = str(super()._determine_next_host(choice_env))
        refuse_local_host(host)
        return host

    def _build_startup_command(self, cmd: list[str], **kwargs: Any) -> str:
        """``export ...; nohup <argv> >> <log> 2>&1 < /dev/null & echo $!``, all quoted."""
        env_dict: dict[str, Any] = kwargs["env"]
        kernel_id = str(env_dict.get("KERNEL_ID") or self.kernel_id)
        self.kernel_log = f"{_kernel_log_dir()}/kernel-{kernel_id}.log"
        exports = {"KERNEL_ID": kernel_id}
        for name in ("KERNEL_USERNAME", "GP_IMPERSONATION_ENABLED"):
            if env_dict.get(name):
                exports[name] = str(env_dict[name])
        exports.update({str(k): str(v) for k, v in self.kernel_spec.env.items()})
        exports["JUPYTER_EXEC_HOST"] = self.assigned_host
        bad = [name for name in exports if not _ENV_NAME.match(name)]
        if bad:
            raise InvalidArgument(f"not an environment variable name: {bad[0][:100]!r}")
        parts = [f"export {name}={shlex.quote(value)};" for name, value in exports.items()]
        argv = " ".join(shlex.quote(arg) for arg in cmd)
        log = shlex.quote(self.kernel_log)
        return " ".join(parts) + f" nohup {argv} >> {log} 2>&1 < /dev/null & echo $!"

    def _launch_remote_process(self, cmd: list[str], **kwargs: Any) -> str:
        refuse_local_host(self.assigned_host)  # never the base class's local, SSH-less branch
        command = self._build_startup_command(cmd, **kwargs)
        self.log.debug(
            "Starting the launcher on %s for kernel %s", self.assigned_host, self.kernel_id
        )
        pid = "bad_pid"
        for line in self._rsh(self.ip, command) or []:
            pid = str(line).strip()
        return pid

    async def shutdown_listener(self, restart: bool) -> None:
        """Ask the launcher to stop; on a restart it keeps the kernel's work dir."""
        request: dict[str, Any] = {"shutdown": 1, "restart": True} if restart else {"shutdown": 1}
        if self.comm_port <= 0:
            return
        try:
            await self._send_listener_request(request, shutdown_socket=True)
        except OSError as exc:
            self.log.debug("Kernel %s: shutdown request not delivered: %s", self.kernel_id, exc)
        else:
            self._shutdown_delivered = not restart

    async def cleanup(self, restart: bool = False) -> None:
        self._restart_host = self.assigned_host if restart else None
        if not restart and not self._shutdown_delivered and self.ip:
            await self._remove_kernel_dir()
        self._shutdown_delivered = False
        await super().cleanup(restart=restart)

    async def _remove_kernel_dir(self) -> None:
        """``rm -rf <work-root>/<kernel id>`` on the kernel's host, for a launcher that is gone."""
        root = work_root_of(list(self.kernel_spec.argv))
        if root is None:
            return
        kernel_dir = root / str(uuid.UUID(str(self.kernel_id)))
        try:
            await asyncio.to_thread(self._rsh, self.ip, f"rm -rf -- {shlex.quote(str(kernel_dir))}")
        except Exception as exc:  # paramiko's errors, or the base's RuntimeError: only logged
            self.log.warning("Kernel %s: could not remove %s: %s", self.kernel_id, kernel_dir, exc)


def work_root_of(argv: list[str]) -> PurePosixPath | None:
    """The launcher's ``--work-root`` in a kernelspec argv (absolute, no '..'), if any."""
    for flag, value in itertools.pairwise(argv):
        if flag == "--work-root":
            path = PurePosixPath(value)
            if path.is_absolute() and ".." not in path.parts:
                return path
    return None


def _kernel_log_dir() -> str:
    from gateway_provisioners import distributed  # type: ignore[import-untyped]

    return str(distributed.kernel_log_dir)
