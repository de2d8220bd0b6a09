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
  "restart": true}``), which keeps the kernel's work dir: files survive the restart; when that
  host cannot be reached over SSH any more, a kernel that was not pinned restarts on the next
  host instead (its files there stay behind), so a lost host costs a restart, not the session;
* the launcher must prove it is the one this provisioner started: a one-time nonce goes to it
  over the SSH channel's stdin and must come back inside the encrypted connection info (the
  gateway's public key is public, so anyone reaching the response port could otherwise hand
  the gateway a kernel of their own); a launcher that never reported is stopped over SSH;
* every listener request carries the launcher's listener token (an HMAC of the kernel's key,
  see ``launcher.listener_token``), so only the gateway can signal or stop a kernel;
* the response port is ours (:class:`~jupyter_exec.cluster.responses.BoundedResponseManager`):
  each launch tells it the tag its launcher's report must start with; a launch that gives up
  (a timeout, a refused report) stops its launcher and removes the folder it made on the host;
* requests to the listener are awaited, never a blocking connect in the event loop; with
  ``GP_SOCKET_TIMEOUT=0`` the gateway's response port stops blocking it too (see
  ``tests/cluster_hosts.Cluster.gateway_env``);
* close means gone: when the launcher could not be told to shut down (the kernel had died, or
  was killed outright), the kernel's directory and log on its host are removed over SSH at
  cleanup;
* one kernel per id: when no stop reached the launcher (it was killed, or crashed), the
  kernel's process group is killed through the host at cleanup, before a restart starts the
  next kernel of that id (the kernel runs in a group of its own and would outlive it);
* a host that is down is skipped: before each launch every host's SSH port is knocked on
  (:func:`probe`; a host found down is remembered :data:`DOWN_FOR` s); a start pinned to a
  host that is down, or whose SSH fails, raises :class:`~jupyter_exec.exceptions.HostUnreachable`
  naming the host and the reason; a pinned kernel found dead whose host is down is
  ``unreachable``, which :class:`~jupyter_exec.cluster.managers.ClusterRestarter` makes final.

Where each kernel runs is in its ``provisioner_info`` (``assigned_host``), as the base reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import os
import re
import secrets
import shlex
import signal
import socket
import time
import uuid
from pathlib import PurePosixPath
from typing import Any

from gateway_provisioners.distributed import (  # type: ignore[import-untyped]
    DistributedProvisioner as _GatewayDistributed,
)
from gateway_provisioners.remote_provisioner import (  # type: ignore[import-untyped]
    RemoteProvisionerBase,
)

from jupyter_exec.cluster.launcher import KEEP_LOGS_ENV, NONCE_ENV, is_kernel_id, listener_token
from jupyter_exec.cluster.responses import BoundedResponseManager
from jupyter_exec.exceptions import HostUnreachable, InvalidArgument, KernelStartError

__all__ = ["DistributedProvisioner"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
PIN_ENV = "KERNEL_REMOTE_HOST"
LISTENER_TIMEOUT = 1.0
"""Seconds to reach a launcher's listener; a host that does not answer counts as dead."""


PROBE_TIMEOUT = 1.0
"""Seconds a host's SSH port gets to accept a TCP connection before the host counts as down."""

DOWN_FOR = 10.0
"""Seconds a host found down is skipped before it is tried again."""

_down: dict[str, tuple[float, str]] = {}
"""Hosts found down: host -> (when, why). Shared by every kernel of this gateway process."""


def mark_down(host: str, reason: str) -> None:
    """Remember ``host`` as unreachable for :data:`DOWN_FOR` seconds."""
    _down[host] = (time.monotonic(), reason)


def down_reason(host: str) -> str | None:
    """Why ``host`` was found down within :data:`DOWN_FOR` s; None when it is not (or no
    longer) remembered as down."""
    seen = _down.get(host)
    if seen is None:
        return None
    if time.monotonic() - seen[0] > DOWN_FOR:
        _down.pop(host, None)
        return None
    return seen[1]


async def probe(host: str, port: int) -> str | None:
    """A TCP connect to the host's SSH port within :data:`PROBE_TIMEOUT`: None when it
    answers, else why not (and the host is remembered as down)."""
    known = down_reason(host)
    if known is not None:
        return known
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), PROBE_TIMEOUT)
    except (OSError, asyncio.TimeoutError) as exc:
        if isinstance(exc, asyncio.TimeoutError):
            why = f"no answer within {PROBE_TIMEOUT:g} s"
        elif isinstance(exc, ConnectionRefusedError):
            why = "connection refused: is sshd running there?"
        else:
            why = exc.strerror or str(exc) or type(exc).__name__
        reason = f"cannot reach SSH on {host}:{port} ({why})"
        mark_down(host, reason)
        return reason
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


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
        # Our manager, before the base class asks for gateway_provisioners' singleton (which
        # then is ours): the response port served one connection at a time, without limits.
        BoundedResponseManager.instance()
        super().__init__(**kwargs)
        self._restart_host: str | None = None
        self._avoid_host: str | None = None
        self._shutdown_delivered = False
        self._stop_delivered = False
        """A stop (a shutdown request, SIGTERM or SIGKILL) reached the launcher, which then
        ends the kernel's process group itself."""
        self._launch_nonce: str | None = None
        self._fresh_launch = True
        self._ssh_failure: str | None = None
        self._pinned: str | None = None
        self._death_checked = False
        self.unreachable: str | None = None
        """Why the last launch could not reach its host (None: it could): the reason a
        kernel's death is final, told to its clients."""

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Refuse a kernel id that is not a UUID before anything is sent anywhere: it names
        the kernel's directory on the host (the launcher checks it again)."""
        kernel_id = str(self.kernel_id)
        if not is_kernel_id(kernel_id):
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
        if pinned is not None:
            refuse_local_host(str(pinned))  # this machine's reason first: it is never reachable
        if pinned is not None and (why := down_reason(str(pinned))) is not None:
            raise HostUnreachable(f"host {pinned} (pinned with {PIN_ENV}) is down: {why}")
        choice_env = dict(env_dict)
        if pinned is None and self._restart_host in hosts:
            choice_env[PIN_ENV] = self._restart_host
        host = str(super()._determine_next_host(choice_env))
        if pinned is None and host == self._avoid_host and len(hosts) > 1:
            host = hosts[(hosts.index(host) + 1) % len(hosts)]
        if pinned is None and down_reason(host) is not None:  # the next host that is up
            start = hosts.index(host) if host in hosts else 0
            up = [
                h
                for h in hosts[start:] + hosts[:start]
                if down_reason(h) is None and h != self._avoid_host
            ]
            if not up:
                reasons = "; ".join(f"{h}: {down_reason(h) or 'left by a restart'}" for h in hosts)
                raise HostUnreachable(f"every host is down ({reasons})")
            host = up[0]
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
        exports[KEEP_LOGS_ENV] = str(keep_logs_days())  # the launcher removes its log or not
        bad = [name for name in exports if not _ENV_NAME.match(name)]
        if bad:
            raise InvalidArgument(f"not an environment variable name: {bad[0][:100]!r}")
        parts = [f"export {name}={shlex.quote(value)};" for name, value in exports.items()]
        argv = " ".join(shlex.quote(arg) for arg in cmd)
        log = shlex.quote(self.kernel_log)
        return " ".join(parts) + f" nohup {argv} >> {log} 2>&1 < /dev/null & echo $!"

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> Any:
        """Launch on the chosen host; a restart whose host SSH cannot reach any more (and that
        was not pinned there) goes to the next host instead of failing."""
        stay = self._restart_host
        pinned = (kwargs.get("env") or {}).get(PIN_ENV)
        self._pinned = None if pinned is None else str(pinned)
        self.unreachable = None
        self._death_checked = False
        port = int(_ssh_port())
        hosts = [str(host) for host in self.remote_hosts]
        # Cheap first: a TCP connect to each host's SSH port (concurrently; a host found down
        # is remembered for DOWN_FOR s), so placement skips the hosts that are down.
        await asyncio.gather(*(probe(host, port) for host in hosts))
        try:
            return await self._launch_once(cmd, **kwargs)
        except HostUnreachable as exc:
            if stay is None or pinned is not None or self._avoid_host is not None:
                self.unreachable = str(exc)
                raise
            self.log.warning(
                "kernel %s: its host %s cannot be reached (%s); restarting it on another "
                "host (its files on %s stay there)",
                self.kernel_id,
                stay,
                exc,
                stay,
            )
            self._restart_host, self._avoid_host = None, stay
            try:
                return await self._launch_once(cmd, **kwargs)
            except HostUnreachable as again:
                self.unreachable = str(again)
                raise
            finally:
                self._avoid_host = None

    async def _launch_once(self, cmd: list[str], **kwargs: Any) -> Any:
        """The base class's launch, its SSH failure (a RuntimeError) as HostUnreachable naming
        the host and SSH's reason (the host is then remembered as down)."""
        self._ssh_failure = None
        try:
            return await super().launch_kernel(cmd, **kwargs)
        except RuntimeError as exc:
            if self._ssh_failure is None:
                raise
            host = self.assigned_host
            mark_down(str(host), self._ssh_failure)
            raise HostUnreachable(f"host {host}: {self._ssh_failure}") from exc

    def _launch_remote_process(self, cmd: list[str], **kwargs: Any) -> str:
        """Run the startup command over SSH, handing the launcher its nonce on stdin."""
        refuse_local_host(self.assigned_host)  # never the base class's local, SSH-less branch
        self.comm_port = 0  # a restart's old listener is gone; the new launcher reports its own
        self._launch_nonce = secrets.token_hex(16)
        self._fresh_launch = self._restart_host != self.assigned_host
        self.response_manager.expect(str(self.kernel_id), self._launch_nonce)
        command = f"IFS= read -r {NONCE_ENV}; export {NONCE_ENV}; " + self._build_startup_command(
            cmd, **kwargs
        )
        self.log.debug("Starting the launcher of kernel %s on %s", self.kernel_id, self.ip)
        try:
            ssh = self._get_ssh_client(self.ip)
        except Exception as exc:  # paramiko's or the socket layer's: SSH cannot reach the host
            self._ssh_failure = f"SSH to {self.ip}:{_ssh_port()} failed: {exc}"
            raise
        try:
            stdin, stdout, stderr = ssh.exec_command(command, timeout=30)
            stdin.write(self._launch_nonce + "\n")
            stdin.flush()
            stdin.channel.shutdown_write()
            lines = stdout.readlines() or stderr.readlines()
        finally:
            ssh.close()
        pid = "bad_pid"
        for line in lines:
            pid = str(line).strip()
        return pid

    def _setup_connection_info(self, connect_info: dict[str, Any]) -> None:
        """Take the connection info only from the launcher that holds this launch's nonce."""
        given = connect_info.pop("launch_nonce", None)
        expected, self._launch_nonce = self._launch_nonce, None
        if expected is not None and not (
            isinstance(given, str) and hmac.compare_digest(given, expected)
        ):
            raise KernelStartError(
                f"the connection info for kernel {self.kernel_id} was not sent by its launcher "
                "(no or a wrong launch nonce): refused"
            )
        super()._setup_connection_info(connect_info)

    async def poll(self) -> int | None:
        """The base class's poll (None: alive); when a kernel pinned to its host is found
        dead, that host's SSH port is probed once: a host that is down makes the death final
        (``unreachable``, read by :class:`~jupyter_exec.cluster.managers.ClusterRestarter`)."""
        result: int | None = await super().poll()
        if result is not None and self._pinned is not None and not self._death_checked:
            self._death_checked = True
            why = await probe(self._pinned, _ssh_port())
            if why is not None:
                self.unreachable = f"host {self._pinned} (pinned with {PIN_ENV}) is down: {why}"
        return result

    async def kill(self, restart: bool = False) -> None:
        """Also stop a launcher that never reported (a launch timeout or a refused report):
        without a listener port the base class would take it for dead and leave it running.
        Once it is gone, the folder a first launch made on the host is removed too (a
        restart's folder holds the kernel's files and stays)."""
        if self.comm_port <= 0 and self.pid > 0 and self.ip:
            self.response_manager.forget(str(self.kernel_id))
            command = _stop_launcher_command(
                int(self.pid),
                self._kernel_dir() if self._fresh_launch else None,
                self._log_to_remove(),
            )
            try:
                await asyncio.to_thread(self._rsh, self.ip, command)
            except Exception as exc:  # paramiko's errors, or the base's RuntimeError: logged
                self.log.warning("Kernel %s: could not stop its launcher: %s", self.kernel_id, exc)
            return
        await super().kill(restart=restart)

    async def _send_listener_request(
        self, request: dict[str, Any], shutdown_socket: bool | None = False
    ) -> None:
        """Send one request to the launcher's listener, with its token.

        Our own, rather than the base class's: that one connects with a blocking timeout
        (``GP_SOCKET_TIMEOUT``) inside the event loop. Here the connect is awaited, bounded by
        LISTENER_TIMEOUT; a refusal raises ConnectionRefusedError, as the callers expect.
        """
        if self.comm_port <= 0 or not self.comm_ip:
            return
        key = self.connection_info.get("key")
        if key:
            raw = key if isinstance(key, bytes) else str(key).encode()
            request = {**request, "token": listener_token(raw)}
        _reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.comm_ip, self.comm_port), LISTENER_TIMEOUT
        )
        try:
            writer.write(json.dumps(request).encode())
            await asyncio.wait_for(writer.drain(), LISTENER_TIMEOUT)
            if shutdown_socket and writer.can_write_eof():
                writer.write_eof()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if request.get("shutdown") == 1 or request.get("signum") in _STOP_SIGNALS:
            self._stop_delivered = True  # the launcher ends the kernel's group itself

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
        """After the kernel is gone: a kernel whose launcher was never told to stop it (the
        launcher died, or was killed) may still run, an orphan in its own process group: it
        is killed through the host before anything else (before a restart starts the next
        kernel of this id); unless restarting, its folder and log are removed too."""
        self._restart_host = self.assigned_host if restart else None
        reachable = bool(self.ip) and down_reason(str(self.assigned_host)) is None
        orphan = not self._stop_delivered and int(self.pgid or 0) > 0
        remove = not restart and not self._shutdown_delivered
        if reachable and (orphan or remove):
            await self._end_on_host(pgid=int(self.pgid) if orphan else None, remove=remove)
        self._shutdown_delivered = False
        self._stop_delivered = False
        await super().cleanup(restart=restart)

    def _kernel_dir(self) -> PurePosixPath | None:
        """``<work-root>/<kernel id>`` on the kernel's host (None: no ``--work-root``)."""
        root = work_root_of(list(self.kernel_spec.argv))
        return None if root is None else root / str(uuid.UUID(str(self.kernel_id)))

    def _log_to_remove(self) -> str | None:
        """This kernel's log on its host, unless logs are kept (``--keep-logs``)."""
        log = getattr(self, "kernel_log", None)
        return str(log) if log and keep_logs_days() == 0 else None

    async def _end_on_host(self, *, pgid: int | None, remove: bool) -> None:
        """One SSH command on the kernel's host: SIGKILL to the kernel's process group
        (``pgid``) if its leader is still this kernel (its command line names this kernel's
        connection file: a reused pid is left alone); with ``remove``, ``rm -rf`` of its
        folder and log (unless logs are kept)."""
        kernel_dir = self._kernel_dir()
        parts = []
        if pgid is not None and kernel_dir is not None:
            connection_file = shlex.quote(str(kernel_dir / "kernel.json"))
            parts.append(
                f"if ps -o args= -p {pgid} 2>/dev/null | grep -qF -- {connection_file}; "
                f"then kill -KILL -- -{pgid} 2>/dev/null; fi"
            )
        if remove:
            paths = [str(p) for p in (kernel_dir, self._log_to_remove()) if p is not None]
            if paths:
                parts.append("rm -rf -- " + " ".join(shlex.quote(p) for p in paths))
        if not parts:
            return
        try:
            await asyncio.to_thread(self._rsh, self.ip, "; ".join(parts))
        except Exception as exc:  # paramiko's errors, or the base's RuntimeError: only logged
            self.log.warning("Kernel %s: could not end it on its host: %s", self.kernel_id, exc)


_STOP_SIGNALS = (int(signal.SIGTERM), int(signal.SIGKILL))

STOP_WAIT = 5.0
"""Seconds a launcher that never reported gets to exit after SIGTERM before its folder goes."""


def _stop_launcher_command(
    pid: int, kernel_dir: PurePosixPath | None, log: str | None = None
) -> str:
    """SIGTERM to the launcher; with ``kernel_dir`` or ``log``: wait until it is gone, then
    remove them."""
    command = f"kill -TERM {pid} 2>/dev/null"
    paths = [str(p) for p in (kernel_dir, log) if p is not None]
    if not paths:
        return command
    tries = int(STOP_WAIT / 0.1)
    return (
        f"{command}; i=0; while kill -0 {pid} 2>/dev/null && [ $i -lt {tries} ]; "
        f"do sleep 0.1; i=$((i+1)); done; rm -rf -- {' '.join(shlex.quote(p) for p in paths)}"
    )


def work_root_of(argv: list[str]) -> PurePosixPath | None:
    """The launcher's ``--work-root`` in a kernelspec argv (absolute, no '..'), if any:
    ``--work-root DIR`` (the files ``--write`` produces) or ``--work-root=DIR`` (the spec
    ``jupyter-exec gateway`` serves)."""
    values = [value for flag, value in itertools.pairwise(argv) if flag == "--work-root"]
    values += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--work-root=")]
    for value in values:
        path = PurePosixPath(value)
        if path.is_absolute() and ".." not in path.parts:
            return path
    return None


def keep_logs_days() -> int:
    """How many days a kernel's log stays on its host (:data:`KEEP_LOGS_ENV`); 0 (the
    default): it goes with the kernel's folder."""
    raw = os.environ.get(KEEP_LOGS_ENV, "0")
    return int(raw) if raw.isdigit() else 0


def _ssh_port() -> int:
    from gateway_provisioners import remote_provisioner  # type: ignore[import-untyped]

    return int(remote_provisioner.ssh_port)


def _kernel_log_dir() -> str:
    from gateway_provisioners import distributed

    return str(distributed.kernel_log_dir)
