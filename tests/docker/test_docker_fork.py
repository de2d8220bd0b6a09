"""Forking a kernel inside its Docker container: a real engine, the real kernel image."""

from __future__ import annotations

import asyncio
import glob
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from jupyter_exec.engine.kernel import KernelHandle, restart_kernel
from jupyter_exec.exceptions import ForkError, KernelDiedError
from jupyter_exec.state.forking import fork_kernel
from jupyter_exec.state.snapshots import drop, start_from, take_snapshot

if TYPE_CHECKING:
    from tests.docker.conftest import Kernel, StartKernel

pytestmark = [pytest.mark.docker, pytest.mark.asyncio(loop_scope="session")]


def as_handle(kernel: Kernel) -> KernelHandle:
    """The test kernel as the handle sessions hold (same manager and client)."""
    handle = KernelHandle(km=kernel.km, kc=kernel.kc, spec=kernel.km.kernel_spec)
    handle.kernel_info = {"language_info": {"name": "python"}, "implementation": "ipython"}
    return handle


async def value(handle: KernelHandle, expression: str) -> Any:
    msg_id = handle.kc.execute(f"import json as _j; print(_j.dumps({expression}))")
    text, error = "", None
    end = time.monotonic() + 60
    while True:
        msg = await handle.iopub.get(max(0.1, end - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            text += msg["content"]["text"]
        elif msg["msg_type"] == "error":
            error = msg["content"]["evalue"]
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            assert error is None, error
            return json.loads(text)


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


async def test_fork_in_the_container_diverges_and_cleans_up(start_kernel: StartKernel) -> None:
    kernel = await start_kernel()
    run = await kernel.run("import os\nrows = [1, 2, 3]\nhome_pid = os.getpid()")
    assert run.status == "ok"
    parent = as_handle(kernel)
    child = await fork_kernel(parent)
    pid = child.km.provisioner.process.pid  # type: ignore[union-attr]
    run_dir = Path(kernel.provisioner._run_dir)
    try:
        # Same container (same hostname), another process, the parent's state.
        assert await value(child, "[rows, os.getpid() != home_pid]") == [[1, 2, 3], True]
        assert await value(child, "os.uname().nodename") == await value(
            parent, "os.uname().nodename"
        )
        assert await value(child, "rows.append(4) or rows") == [1, 2, 3, 4]
        assert await value(parent, "rows") == [1, 2, 3]
        # Its sockets are in the kernel's sockets folder, its connection file in the conf folder.
        assert glob.glob(f"{run_dir}/s/f*-*")
        assert glob.glob(f"{run_dir}/c/f*.json")
        # A restart would need a container of its own: refused, and the fork goes on.
        with pytest.raises(KernelDiedError, match="could not be restarted"):
            await restart_kernel(child)
        assert await value(child, "rows") == [1, 2, 3, 4]
    finally:
        await child.shutdown(now=True)
    end = time.monotonic() + 30
    while not gone(pid):
        assert time.monotonic() < end, "the forked kernel is still running"
        await asyncio.sleep(0.05)
    assert glob.glob(f"{run_dir}/s/f*-*") == []
    assert glob.glob(f"{run_dir}/c/f*.json") == []
    assert await value(parent, "rows") == [1, 2, 3]


async def test_snapshot_in_the_container_undoes_a_cell(start_kernel: StartKernel) -> None:
    kernel = await start_kernel()
    assert (await kernel.run("frame = {'rows': [1, 2, 3]}")).status == "ok"
    parent = as_handle(kernel)
    snap = await take_snapshot(parent)
    run_dir = Path(kernel.provisioner._run_dir)
    try:
        assert snap.control.parent == run_dir / "s"  # in the kernel's sockets folder
        assert (await kernel.run("frame['rows'].clear()")).status == "ok"
        undone = await start_from(snap)
        try:
            assert await value(undone, "frame") == {"rows": [1, 2, 3]}
            assert await value(parent, "frame") == {"rows": []}
        finally:
            await undone.shutdown(now=True)
    finally:
        await drop(snap)
    end = time.monotonic() + 30
    while not gone(snap.pid):
        assert time.monotonic() < end, "the snapshot is still running"
        await asyncio.sleep(0.05)
    assert not snap.control.exists()
    assert glob.glob(f"{run_dir}/c/f*.json") == []


async def test_a_replaced_snapshot_socket_is_refused(start_kernel: StartKernel) -> None:
    kernel = await start_kernel()
    snap = await take_snapshot(as_handle(kernel))
    try:
        # Hostile code in the container swaps the socket for a link to another socket.
        assert (
            await kernel.run(
                f"import os\nos.unlink('/run/jx/{snap.control.name}')\n"
                f"os.symlink('/run/jx/k-1', '/run/jx/{snap.control.name}')"
            )
        ).status == "ok"
        with pytest.raises(ForkError, match="no longer the snapshot's socket"):
            await start_from(snap)
    finally:
        await drop(snap)
