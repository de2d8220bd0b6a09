"""Kernel snapshots: frozen forked copies of a live kernel that new kernels start from (undo).

A snapshot is the fork mechanism (:mod:`jupyter_exec.state.forking`) stopped half
way: the kernel forks a child that serves no client but waits, idle, on a
private Unix socket. Asked to, it forks again into a kernel serving a fresh
connection file, with the state the kernel had when the snapshot was taken.
The snapshot itself never changes, so one snapshot can start any number of
kernels::

    take_snapshot(kernel)  ─► Snapshot(pid, control socket)       before a cell
    ... cells change the kernel's state ...
    start_from(snapshot)   ─► a new KernelHandle with the old state   undo
    drop(snapshot)         ─► SIGKILL, socket file removed

**Memory**: a snapshot shares every page with the live kernel until one side
writes it; it then costs what the cells after it changed (copy-on-write), plus
a few MB of its own. A snapshot before each of N cells that each rewrite a
100 MB frame holds up to N x 100 MB: keep only the last few. An idle snapshot
uses no CPU (it blocks in ``select``) and ends by itself when the host process
that took it ends.

A Docker kernel's snapshot lives in its container, its socket in the kernel's
sockets folder (:mod:`jupyter_exec.docker.forking` names it and finds the
pids); it ends with the container.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpec

from jupyter_exec.engine.kernel import KernelHandle, _ipc_base
from jupyter_exec.engine.provisioning import ContainerProvisioner, relaunch_args
from jupyter_exec.exceptions import ForkError, KernelNotAliveError
from jupyter_exec.inkernel.fork import snapshot_code
from jupyter_exec.state.forking import (
    DEFAULT_FORK_TIMEOUT,
    ForeignProcess,
    adopt_kernel,
    check_forkable,
    child_manager,
    container_of,
    kernel_deadline,
    run_fork_request,
)

__all__ = ["Snapshot", "drop", "fork_into", "start_from", "take_snapshot"]


@dataclass
class Snapshot:
    """A frozen copy of a kernel's state: the process holding it and where to ask it."""

    pid: int
    control: Path
    spec: KernelSpec | None
    taken: float = field(default_factory=time.time)
    launch_args: dict[str, Any] | None = None
    """How the kernel it was taken from was launched: what a restart of its kernels reuses."""
    docker: ContainerProvisioner | None = None
    """For a Docker kernel's snapshot: that kernel's provisioner (the container it lives in)."""
    process: ForeignProcess = field(init=False)

    def __post_init__(self) -> None:
        self.process = ForeignProcess(self.pid)

    @property
    def alive(self) -> bool:
        return self.process.alive()


async def take_snapshot(handle: KernelHandle, *, timeout: float = DEFAULT_FORK_TIMEOUT) -> Snapshot:
    """Freeze ``handle``'s current state in a snapshot process (waits for a running cell)."""
    if not await handle.is_alive():
        raise KernelNotAliveError("cannot snapshot a kernel that is not running")
    check_forkable(handle)
    docker = container_of(handle)
    if docker is not None:
        from jupyter_exec.docker.forking import control_socket, host_pid

        where, control = control_socket(docker)
        host = 0  # the host's pid means nothing in the container's namespace
    else:
        base = _ipc_base()
        if base is None:
            raise ForkError("no short enough path for the snapshot's socket (runtime dir)")
        control = Path(f"{base}.snap")
        where, host = str(control), os.getpid()
    code = snapshot_code(where, host, kernel_deadline(timeout))
    try:
        pid = await run_fork_request(handle, code, time.monotonic() + timeout)
        if docker is not None:
            pid = await asyncio.to_thread(host_pid, docker, pid)
    except BaseException:
        with contextlib.suppress(OSError):
            control.unlink()
        raise
    launch = relaunch_args(handle.km)
    return Snapshot(
        pid=pid,
        control=control,
        spec=handle.spec,
        launch_args=dict(launch) if launch is not None and docker is None else None,
        docker=docker,
    )


async def start_from(
    snapshot: Snapshot, *, cwd: Path | None = None, timeout: float = DEFAULT_FORK_TIMEOUT
) -> KernelHandle:
    """A new kernel, connected and ready, with the state ``snapshot`` froze."""
    if not snapshot.alive:
        raise ForkError(f"the snapshot (pid {snapshot.pid}) has ended; its state is gone")
    deadline = time.monotonic() + timeout
    docker = snapshot.docker
    km = child_manager(snapshot.spec, cwd, local=docker is None, launch_args=snapshot.launch_args)
    leftovers: list[Path] = []
    try:
        if docker is not None:
            from jupyter_exec.docker.forking import child_connection, host_pid

            connection_file, host_copy = child_connection(docker, km)
            leftovers.append(host_copy)
            pid = await fork_into(snapshot, connection_file, 0, deadline)
            pid = await asyncio.to_thread(host_pid, docker, pid)
        else:
            pid = await fork_into(snapshot, str(km.connection_file), os.getpid(), deadline)
    except BaseException:
        km.cleanup_connection_file()
        km.cleanup_ipc_files()
        for path in leftovers:
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    return await adopt_kernel(
        km, pid, snapshot.spec, deadline, leftovers=leftovers, container=docker
    )


async def fork_into(snapshot: Snapshot, connection_file: str, host: int, deadline: float) -> int:
    """Ask ``snapshot`` for a child serving ``connection_file``; its pid (as ``host`` sees it).

    ``host`` is the pid the child watches for its parent's death (0: none). Used by
    :func:`start_from` and by the zygote pool, which forks children into files it chose.
    """
    request = {"connection_file": connection_file, "host_pid": host}
    try:
        # In a Docker kernel's sockets folder the kernel could put something else there.
        if not stat.S_ISSOCK(os.lstat(snapshot.control).st_mode):
            raise ForkError(f"{snapshot.control} is no longer the snapshot's socket")
    except OSError as exc:
        raise ForkError(f"the snapshot (pid {snapshot.pid}) cannot be reached: {exc}") from exc
    try:
        line = await asyncio.wait_for(
            _exchange(snapshot.control, json.dumps(request).encode() + b"\n"),
            max(0.1, deadline - time.monotonic()),
        )
    except asyncio.TimeoutError:
        raise ForkError(f"the snapshot (pid {snapshot.pid}) did not answer in time") from None
    except OSError as exc:
        raise ForkError(f"the snapshot (pid {snapshot.pid}) cannot be reached: {exc}") from exc
    try:
        reply = json.loads(line)
    except ValueError:
        raise ForkError(f"the snapshot (pid {snapshot.pid}) gave no answer") from None
    if "pid" not in reply:
        raise ForkError(f"the snapshot could not start a kernel: {reply.get('error')}")
    return int(reply["pid"])


async def _exchange(path: Path, request: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        writer.write(request)
        await writer.drain()
        return await reader.readline()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def drop(snapshot: Snapshot) -> None:
    """End the snapshot process and remove its socket (kernels started from it go on)."""
    snapshot.process.killed_by = signal.SIGKILL
    snapshot.process.signal(signal.SIGKILL)
    with contextlib.suppress(OSError):
        snapshot.control.unlink()
    snapshot.process.close()
