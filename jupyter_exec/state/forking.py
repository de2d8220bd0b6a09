"""Forking a live kernel: the host's side, from the request to a driven ``KernelHandle``.

A fork is a copy-on-write ``os.fork()`` of the kernel process, so a child
with a 500 MB namespace costs a few page tables, not a copy or a pickle::

    fork_kernel(handle)
      ├─ a new kernel manager: fresh ipc socket paths and key, its connection file written
      ├─ a silent execute_request runs inkernel_fork.fork(connection file) in the kernel:
      │    parent: os.fork(), reaps the child later, replies with the child's pid
      │    child:  drops the parent's sockets, serves the new connection file with the
      │            parent's shell (namespace, modules, history, hooks)
      ├─ AdoptedProvisioner: the child is driven like any kernel (poll through a pidfd,
      │    interrupt with SIGINT, kill with SIGKILL to its process group, files cleaned up)
      └─ connect, wait until it answers: a ready KernelHandle

The parent is needed only until its reply with the child's pid (``request_fork``);
the rest (``ForkedProcess.adopt``) is the child's, so N forks of one request ask the
parent N times in a row and then start their N children at once.

A kernel in a container of our Docker provisioner forks inside that container;
:mod:`jupyter_exec.docker.forking` places the child's connection file and
sockets in the container's run dir and finds its pid on this host.

A busy kernel is not refused: the request queues behind the running cell, as
any execute_request does, and the fork happens when the cell ends; past
``timeout`` the host gives up and the request, if it is still queued, expires
in the kernel without forking. A dead kernel raises ``KernelNotAliveError``;
a kernel that cannot fork (not ipykernel, remote, another provisioner) ``ForkError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import select
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase

from jupyter_exec.engine.kernel import QUIET_POLL, KernelHandle, OneSpec, _ipc_base, describe_exit
from jupyter_exec.engine.language_records import LANGUAGE_RECORDS
from jupyter_exec.engine.provisioning import ContainerProvisioner, ProcessProvisioner, relaunch_args
from jupyter_exec.exceptions import ForkError, KernelNotAliveError
from jupyter_exec.inkernel.fork import PID_EXPRESSION, fork_code

__all__ = [
    "AdoptedProvisioner",
    "ForeignProcess",
    "ForkedProcess",
    "adopt_kernel",
    "check_forkable",
    "child_manager",
    "container_of",
    "fork_kernel",
    "in_docker",
    "kernel_deadline",
    "request_fork",
    "run_fork_request",
]

DEFAULT_FORK_TIMEOUT = 60.0
"""Seconds to wait for the fork: the running cell, if any, then the child's first answer."""


class ForeignProcess:
    """A process this one did not start: liveness through a pidfd, signals to its group.

    ``poll()`` has the shape of ``subprocess.Popen.poll`` (what sessions and
    :func:`~jupyter_exec.engine.kernel.describe_exit` read): ``None`` while it runs.
    The real exit status belongs to its parent (the forked kernel), which
    reaps it; here a process we killed reads as ``-SIGKILL``, any other end as 1.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.killed_by: int | None = None
        self._ended = False
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = None  # an old kernel: fall back on /proc

    def alive(self) -> bool:
        if self._ended:
            return False
        if self._pidfd is not None:
            readable, _, _ = select.select([self._pidfd], [], [], 0)
            self._ended = bool(readable)
        else:
            self._ended = not _running_in_proc(self.pid)
        return not self._ended

    def poll(self) -> int | None:
        if self.alive():
            return None
        return -self.killed_by if self.killed_by else 1

    def signal(self, signum: int) -> None:
        """``signum`` to the process group the child leads (its subprocesses too)."""
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def _running_in_proc(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


class AdoptedProvisioner(KernelProvisionerBase):
    """A kernel provisioner for a kernel process someone else started (a fork's child).

    It cannot launch: ``adopt(pid)`` hands it the process. A restart of an
    adopted kernel goes through the kernel manager's usual path, which makes
    a fresh provisioner from the kernelspec: an empty kernel, as after any restart.
    """

    process: ForeignProcess | None = None
    leftovers: list[Path] = []
    """Files to remove at cleanup besides the manager's own (a container's connection file)."""
    container: ContainerProvisioner | None = None
    """For a kernel in a Docker container: the provisioner of the container's first kernel."""

    def adopt(self, pid: int, connection_info: KernelConnectionInfo) -> None:
        self.process = ForeignProcess(pid)
        self.connection_info = connection_info

    @property
    def has_process(self) -> bool:
        return self.process is not None

    async def poll(self) -> int | None:
        return 0 if self.process is None else self.process.poll()

    async def wait(self) -> int | None:
        while self.process is not None and self.process.alive():
            await _sleep(0.02)
        return await self.poll()

    async def send_signal(self, signum: int) -> None:
        if self.process is not None and signum:
            self.process.signal(signum)

    async def kill(self, restart: bool = False) -> None:
        if self.process is not None:
            self.process.killed_by = signal.SIGKILL
            self.process.signal(signal.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:
        if self.process is not None:
            self.process.signal(signal.SIGTERM)

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        raise ForkError("an adopted kernel cannot be launched; fork it again instead")

    async def cleanup(self, restart: bool = False) -> None:
        if self.process is not None:
            self.process.close()
        _remove(self.leftovers)
        self.leftovers = []
        if restart and self.parent is not None:
            # jupyter_client keeps a provisioner across a restart, and this one cannot launch:
            # without it, the manager makes a fresh one from the kernelspec (an empty kernel).
            self.parent.provisioner = None

    async def exit_description(self) -> str | None:
        process = self.process
        if process is None or process.alive():
            return None
        if process.killed_by:
            return f"the forked kernel (pid {process.pid}) was killed by jupyter-exec"
        return f"the forked kernel process (pid {process.pid}) ended"

    async def get_provisioner_info(self) -> dict[str, Any]:
        info: dict[str, Any] = await super().get_provisioner_info()
        info["pid"] = self.process.pid if self.process is not None else None
        return info


async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def _remove(paths: list[Path]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()


def child_manager(
    spec: KernelSpec | None,
    cwd: Path | None,
    *,
    local: bool = True,
    launch_args: dict[str, Any] | None = None,
) -> AsyncKernelManager:
    """A manager for the child with its own key; for a local child also its ipc socket paths
    and connection file (a container's child gets them from :mod:`jupyter_exec.docker.forking`).
    """
    spec = spec if spec is not None else KernelSpec(argv=[], language="python")
    km = AsyncKernelManager(kernel_name="forked", kernel_spec_manager=OneSpec(spec))
    km.kernel_id = str(uuid.uuid4())
    km.shutdown_wait_time = 3.0
    # A kernel is (about to be) running for this manager, as if it had started it: its
    # pending-state futures are then renewed per call, as for any started manager.
    km._attempted_start = True
    if not local:
        # No restart (refused before anything is stopped): jupyter_client would start a
        # container of its own, not a kernel in this one.
        km._launch_args = None
        return km
    ipc_base = _ipc_base()
    if ipc_base is None:
        raise ForkError("no short enough path for the forked kernel's sockets (runtime dir)")
    km.transport = "ipc"
    km.ip = ipc_base
    km.write_connection_file()
    # What a restart relaunches from the kernelspec (a fresh, empty kernel): by default the
    # parent's own launch (its working directory and environment).
    relaunch: Any = dict(launch_args or {})
    relaunch.setdefault("env", {**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
    if cwd is not None or "cwd" not in relaunch:
        relaunch["cwd"] = str(cwd) if cwd is not None else None
    km._launch_args = relaunch
    return km


def check_forkable(handle: KernelHandle) -> None:
    """Raise ``ForkError`` unless ``handle`` is an IPython kernel, local or in our Docker."""
    spec = handle.spec
    metadata = (spec.metadata or {}) if spec is not None else {}
    if "kernel_provisioner" in metadata:
        name = metadata["kernel_provisioner"].get("provisioner_name", "?")
        if not in_docker(handle):
            raise ForkError(f"forking a kernel run by the {name!r} provisioner is not supported")
    elif not isinstance(handle.km.provisioner, ProcessProvisioner) or _transport(handle) not in (
        "ipc",
        "tcp",
    ):
        raise ForkError("only a kernel running on this machine can be forked")
    language = handle.kernel_info.get("language_info", {}).get("name")
    implementation = handle.kernel_info.get("implementation")
    record = LANGUAGE_RECORDS.get(language) if isinstance(language, str) else None
    if record is None or not record.fork or implementation not in ("ipython", None):
        raise ForkError(
            f"only IPython kernels can be forked (this one is {implementation or language!r})"
        )


def _transport(handle: KernelHandle) -> str | None:
    """The ZMQ transport of ``handle``'s kernel (None: it has none we connect to directly).

    A probe by necessity: ``transport`` is a trait of jupyter_client's kernel managers, which
    remote managers (a server's or gateway's kernel, reached over a websocket) lack.
    """
    transport = getattr(handle.km, "transport", None)
    return transport if isinstance(transport, str) else None


def kernel_deadline(timeout: float) -> float:
    """The wall-clock time after which the kernel refuses the request, unforked.

    Earlier than the host's own deadline by a margin: a fork the kernel still
    makes is answered before the host gives up, so no child is ever made that
    the host has stopped waiting for.
    """
    return time.time() + timeout - min(1.0, timeout / 4)


def in_docker(handle: KernelHandle) -> bool:
    """Whether ``handle`` is a kernel in a container of our Docker provisioner."""
    return container_of(handle) is not None


def container_of(handle: KernelHandle) -> ContainerProvisioner | None:
    """The Docker provisioner whose container runs ``handle`` (None: not in our Docker).

    For a fork or a snapshot's kernel in a container, the provisioner of the
    container's first kernel: its forks are forked, and its scripts run, there.
    """
    from jupyter_exec.docker import PROVISIONER_NAME

    provisioner = handle.km.provisioner
    if isinstance(provisioner, AdoptedProvisioner):
        return provisioner.container
    spec = handle.spec
    metadata = (spec.metadata or {}) if spec is not None else {}
    named = metadata.get("kernel_provisioner", {}).get("provisioner_name")
    if named == PROVISIONER_NAME and isinstance(provisioner, ContainerProvisioner):
        return provisioner
    return None


async def run_fork_request(handle: KernelHandle, code: str, deadline: float) -> int:
    """Run fork or snapshot ``code`` silently in ``handle``; the new process's pid."""
    reply = await _reply(handle, code, deadline)
    if reply.get("status") != "ok":
        raise ForkError(
            f"the kernel could not fork: {reply.get('ename', 'error')}: {reply.get('evalue')}"
        )
    return _pid_from(reply)


async def _reply(handle: KernelHandle, code: str, deadline: float) -> dict[str, Any]:
    reply = await handle.run_silent(
        code, deadline, expressions={"pid": PID_EXPRESSION}, died="the kernel died while forking"
    )
    if reply is not None:
        return reply
    raise ForkError(
        "the kernel did not fork within the timeout (a cell still running?); "
        "the queued request expires unforked"
    )


async def fork_kernel(
    handle: KernelHandle,
    *,
    cwd: Path | None = None,
    timeout: float = DEFAULT_FORK_TIMEOUT,
) -> KernelHandle:
    """A new kernel, connected and ready, that starts as a copy of ``handle``'s live state.

    ``cwd`` is only what a later restart of the child starts in (a fork keeps
    the parent's working directory). Waits for a running cell to end, up to
    ``timeout`` seconds in all. Raises ``KernelNotAliveError`` for a dead
    kernel and ``ForkError`` for one that cannot be forked or did not.
    """
    forked = await request_fork(handle, cwd=cwd, timeout=timeout)
    return await forked.adopt()


@dataclass
class ForkedProcess:
    """A child the parent kernel has forked, not yet connected: what :meth:`adopt` drives.

    The parent is needed only until the fork's reply (:func:`request_fork`); connecting to
    the child and waiting until it answers (most of a fork's time) need nothing of it, so
    the forks of one request run that part at once, each with the parent free for the next.
    """

    km: AsyncKernelManager
    pid: int
    spec: KernelSpec | None
    deadline: float
    leftovers: list[Path]
    container: ContainerProvisioner | None

    async def adopt(self) -> KernelHandle:
        """The child as a ready ``KernelHandle`` (killed and its files removed on failure)."""
        return await adopt_kernel(
            self.km,
            self.pid,
            self.spec,
            self.deadline,
            leftovers=self.leftovers,
            container=self.container,
        )


async def request_fork(
    handle: KernelHandle,
    *,
    cwd: Path | None = None,
    timeout: float = DEFAULT_FORK_TIMEOUT,
) -> ForkedProcess:
    """Ask ``handle``'s kernel to fork (the first half of :func:`fork_kernel`, the only
    one that needs the parent); the child, to :meth:`ForkedProcess.adopt` at once (with
    no ``await`` between: a child never adopted is never killed by the host)."""
    if not await handle.is_alive():
        raise KernelNotAliveError("cannot fork a kernel that is not running; restart it first")
    check_forkable(handle)
    deadline = time.monotonic() + timeout
    container = container_of(handle)
    docker = container is not None
    parent_launch = relaunch_args(handle.km)
    km = child_manager(
        handle.spec,
        cwd,
        local=not docker,
        launch_args=dict(parent_launch) if parent_launch is not None else None,
    )
    leftovers: list[Path] = []
    try:
        if container is not None:
            from jupyter_exec.docker.forking import child_connection, host_pid

            connection_file, host_copy = child_connection(container, km)
            leftovers.append(host_copy)
            code = fork_code(connection_file, 0, kernel_deadline(timeout))  # no host pid in there
            pid = await run_fork_request(handle, code, deadline)
            pid = await asyncio.to_thread(host_pid, container, pid)
        else:
            code = fork_code(str(km.connection_file), os.getpid(), kernel_deadline(timeout))
            pid = await run_fork_request(handle, code, deadline)
    except BaseException:
        km.cleanup_connection_file()
        km.cleanup_ipc_files()
        _remove(leftovers)
        raise
    return ForkedProcess(km, pid, handle.spec, deadline, leftovers, container)


async def adopt_kernel(
    km: AsyncKernelManager,
    pid: int,
    spec: KernelSpec | None,
    deadline: float,
    *,
    leftovers: list[Path] | None = None,
    container: ContainerProvisioner | None = None,
) -> KernelHandle:
    """Drive process ``pid``, serving ``km``'s connection file, as a ready ``KernelHandle``.

    ``container``: the Docker provisioner whose container ``pid`` runs in.

    On failure the process is killed and its files removed. ``deadline`` is
    on the ``time.monotonic()`` clock.
    """
    provisioner = AdoptedProvisioner(kernel_id=km.kernel_id, kernel_spec=km.kernel_spec, parent=km)
    provisioner.adopt(pid, km.get_connection_info())
    provisioner.leftovers = list(leftovers or [])
    provisioner.container = container
    km.provisioner = provisioner
    kc = km.client()
    kc.start_channels()
    child = KernelHandle(km=km, kc=kc, spec=spec)
    try:
        await _subscribed(child, min(deadline, time.monotonic() + WELCOME_WAIT))
        await child.wait_ready(max(1.0, deadline - time.monotonic()))
    except BaseException:
        await child.shutdown(now=True)
        raise
    return child


WELCOME_WAIT = 1.0
"""Seconds to wait for IOPub's welcome before asking the child for kernel_info anyway."""


async def _subscribed(child: KernelHandle, until: float) -> None:
    """Wait until IOPub delivers: ipykernel 7 greets each new subscriber (``iopub_welcome``).

    A child is ready within milliseconds, but the readiness check proper
    (``wait_ready``) gives IOPub 0.3 s to show a status before asking again,
    which is most of a fork's time when the subscription is not yet in place.
    After the welcome the first status is never lost. A kernel that sends
    no welcome costs ``WELCOME_WAIT`` more, no error.
    """
    while (remaining := until - time.monotonic()) > 0:
        try:
            msg = await child.iopub.get(min(QUIET_POLL, remaining))
        except queue.Empty:
            if not await child.is_alive():
                raise KernelNotAliveError(
                    f"the forked kernel died while starting: {await describe_exit(child.km)}"
                ) from None
            continue
        if msg["msg_type"] == "iopub_welcome" or msg["parent_header"]:
            return


def _pid_from(reply: dict[str, Any]) -> int:
    found = (reply.get("user_expressions") or {}).get("pid") or {}
    text = (found.get("data") or {}).get("text/plain", "")
    try:
        pid = int(text)
    except ValueError:
        raise ForkError(f"the kernel forked but did not say the child's pid ({found})") from None
    if pid <= 0:
        raise ForkError(f"the kernel reported an impossible child pid {pid}")
    return pid
