"""Forking live local kernels and snapshots of them: real ipykernel processes, real os.fork()."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import AsyncKernelManager

from jupyter_exec.engine import guard
from jupyter_exec.engine.kernel import (
    KernelHandle,
    OneSpec,
    attach_kernel,
    kernel_spec_for_python,
    restart_kernel,
    start_kernel,
)
from jupyter_exec.exceptions import ForkError, KernelNotAliveError
from jupyter_exec.state.forking import fork_kernel
from jupyter_exec.state.snapshots import drop, start_from, take_snapshot

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

DEADLINE = 60.0


async def run(handle: KernelHandle, code: str) -> dict[str, Any]:
    """Execute ``code``; its stream text, results (text/plain), mime types and error name."""
    msg_id = handle.kc.execute(code)
    found: dict[str, Any] = {"text": "", "results": [], "mimes": [], "error": None, "count": None}
    end = time.monotonic() + DEADLINE
    while True:
        msg = await handle.iopub.get(max(0.1, end - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            found["text"] += content["text"]
        elif kind in ("execute_result", "display_data"):
            found["results"].append(content["data"].get("text/plain"))
            found["mimes"].extend(content["data"])
            if kind == "execute_result":
                found["count"] = content["execution_count"]
        elif kind == "error":
            found["error"] = content["ename"]
        elif kind == "status" and content["execution_state"] == "idle":
            return found


async def value(handle: KernelHandle, expression: str) -> Any:
    found = await run(handle, f"import json as _j; print(_j.dumps({expression}))")
    assert found["error"] is None, found
    return json.loads(found["text"])


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has exited and been reaped (no /proc entry, or not our process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


async def wait_for(condition: Any, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < end, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            found.update(int(p) for p in Path(path).read_text().split())
        except OSError:
            continue
    return found


@pytest.fixture
async def parent(tmp_path: Path) -> AsyncIterator[KernelHandle]:
    handle = await start_kernel(spec=kernel_spec_for_python(sys.executable), cwd=tmp_path)
    try:
        yield handle
    finally:
        await handle.shutdown(now=True)


@pytest.fixture
async def forks() -> AsyncIterator[list[KernelHandle]]:
    """Children made by a test; killed at the end whatever happened."""
    made: list[KernelHandle] = []
    yield made
    for child in made:
        if child.km.has_kernel:
            await child.shutdown(now=True)


def child_pid(child: KernelHandle) -> int:
    return int(child.km.provisioner.process.pid)  # type: ignore[union-attr]


def kernel_pid(handle: KernelHandle) -> int:
    return int(handle.km.provisioner.process.pid)  # type: ignore[union-attr]


async def test_child_starts_from_parent_state_and_diverges(
    parent: KernelHandle, forks: list[KernelHandle], tmp_path: Path
) -> None:
    await run(
        parent,
        "import collections\nn = 41\ndata = {'a': [1, 2]}\nseen = collections.Counter('aab')",
    )
    last = await run(parent, "n")
    child = await fork_kernel(parent, cwd=tmp_path)
    forks.append(child)
    assert child_pid(child) not in (os.getpid(), kernel_pid(parent))
    # Variables, imports and history came across; numbering goes on from the parent's.
    assert await value(child, "[n, data, seen['a'], 'collections' in dir()]") == [
        41,
        {"a": [1, 2]},
        2,
        True,
    ]
    shown = await run(child, "n + 1")
    assert shown["results"] == ["42"]
    assert shown["count"] is not None
    assert shown["count"] > last["count"]
    assert await value(child, "In[-1]") == "import json as _j; print(_j.dumps(In[-1]))"
    # Each side changes only itself.
    await run(child, "n = 1\ndata['a'].append(3)\nonly_child = True")
    await run(parent, "only_parent = True")
    assert await value(parent, "[n, data, 'only_child' in dir()]") == [41, {"a": [1, 2]}, False]
    assert await value(child, "[n, data, 'only_parent' in dir()]") == [1, {"a": [1, 2, 3]}, False]
    # No helper name of ours is left in either namespace.
    for side in (parent, child):
        assert await value(side, "[k for k in dir() if 'jx' in k or 'jupyter_exec' in k]") == []


async def test_child_output_plots_and_interrupts(
    parent: KernelHandle, forks: list[KernelHandle], tmp_path: Path
) -> None:
    await run(parent, "import matplotlib.pyplot as plt")
    child = await fork_kernel(parent, cwd=tmp_path)
    forks.append(child)
    out = await run(
        child, "import os\nprint('py')\nos.write(1, b'fd\\n')\nplt.plot([1, 3, 2]); plt.show()"
    )
    assert out["error"] is None
    assert "py" in out["text"]
    assert "image/png" in out["mimes"]
    # A SIGINT reaches the child's running cell (and only the child).
    msg_id = child.kc.execute("import time\nprint('started', flush=True)\ntime.sleep(60)")
    seen: list[str] = []
    running = asyncio.ensure_future(_error_of(child, msg_id, seen))
    await wait_for(lambda: "started" in "".join(seen), "the child runs the cell")
    await child.km.interrupt_kernel()
    assert await asyncio.wait_for(running, DEADLINE) == "KeyboardInterrupt"
    assert await value(parent, "1 + 1") == 2


async def _error_of(handle: KernelHandle, msg_id: str, seen: list[str]) -> str | None:
    error = None
    while True:
        msg = await handle.iopub.get(DEADLINE)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            seen.append(msg["content"]["text"])
        if msg["msg_type"] == "error":
            error = msg["content"]["ename"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return error


async def test_killed_child_leaves_no_process_or_file(parent: KernelHandle, tmp_path: Path) -> None:
    child = await fork_kernel(parent, cwd=tmp_path)
    pid = child_pid(child)
    connection_file = Path(child.km.connection_file)
    sockets = f"{child.km.ip}-*"
    assert connection_file.exists()
    assert glob.glob(sockets)
    assert await child.is_alive()
    await child.shutdown(now=True)
    await wait_for(lambda: process_gone(pid), f"process {pid} is gone")
    assert not connection_file.exists()
    assert glob.glob(sockets) == []
    assert pid not in children_of(kernel_pid(parent))
    assert await value(parent, "'still here'") == "still here"


async def test_polite_shutdown_ends_the_child(parent: KernelHandle, tmp_path: Path) -> None:
    child = await fork_kernel(parent, cwd=tmp_path)
    pid = child_pid(child)
    await child.shutdown()
    await wait_for(lambda: process_gone(pid), f"process {pid} is gone")


async def test_child_outlives_its_parent_kernel(parent: KernelHandle, tmp_path: Path) -> None:
    await run(parent, "kept = 'yes'")
    child = await fork_kernel(parent, cwd=tmp_path)
    try:
        await parent.shutdown(now=True)  # kills the parent's whole process group
        assert await value(child, "kept") == "yes"
    finally:
        await child.shutdown(now=True)


async def test_fork_waits_for_the_running_cell(
    parent: KernelHandle, forks: list[KernelHandle], tmp_path: Path
) -> None:
    parent.kc.execute("import time\ntime.sleep(1)\nafter_sleep = 3")
    child = await fork_kernel(parent, cwd=tmp_path)
    forks.append(child)
    assert await value(child, "after_sleep") == 3


async def test_fork_that_times_out_never_happens(parent: KernelHandle, tmp_path: Path) -> None:
    parent.kc.execute("import time\ntime.sleep(2)")
    with pytest.raises(ForkError, match="did not fork within"):
        await fork_kernel(parent, cwd=tmp_path, timeout=0.3)
    # The queued request reaches the kernel after its deadline and is refused there.
    assert await value(parent, "'after'") == "after"
    assert children_of(kernel_pid(parent)) == set()


async def test_dead_kernel_cannot_be_forked(parent: KernelHandle, tmp_path: Path) -> None:
    os.kill(kernel_pid(parent), signal.SIGKILL)
    await wait_for(lambda: parent.km.provisioner.process.poll() is not None, "the kernel died")  # type: ignore[union-attr]
    with pytest.raises(KernelNotAliveError, match="not running"):
        await fork_kernel(parent, cwd=tmp_path)


async def test_fork_of_a_fork(
    parent: KernelHandle, forks: list[KernelHandle], tmp_path: Path
) -> None:
    await run(parent, "depth = 0")
    child = await fork_kernel(parent, cwd=tmp_path)
    forks.append(child)
    await run(child, "depth += 1")
    grandchild = await fork_kernel(child, cwd=tmp_path)
    forks.append(grandchild)
    await run(grandchild, "depth += 1")
    assert [await value(k, "depth") for k in (parent, child, grandchild)] == [0, 1, 2]


async def test_snapshot_starts_kernels_with_the_state_it_froze(
    parent: KernelHandle, forks: list[KernelHandle], tmp_path: Path
) -> None:
    await run(parent, "frame = {'rows': [1, 2, 3]}\nstep = 1")
    snap = await take_snapshot(parent)
    try:
        assert snap.alive
        # The cell to undo: it corrupts the data and adds a name.
        await run(parent, "frame['rows'].clear()\nstep = 2\nmistake = True")
        undone = await start_from(snap, cwd=tmp_path)
        forks.append(undone)
        assert await value(undone, "[frame, step, 'mistake' in dir()]") == [
            {"rows": [1, 2, 3]},
            1,
            False,
        ]
        # The snapshot is unchanged by what its kernels do: a second one starts the same.
        await run(undone, "step = 10")
        again = await start_from(snap, cwd=tmp_path)
        forks.append(again)
        assert await value(again, "step") == 1
        assert await value(parent, "[frame, step]") == [{"rows": []}, 2]
    finally:
        await drop(snap)
    await wait_for(lambda: process_gone(snap.pid), "the snapshot process is gone")
    assert not snap.control.exists()
    # Kernels started from it outlive it.
    assert await value(forks[0], "step") == 10
    with pytest.raises(ForkError, match="has ended"):
        await start_from(snap, cwd=tmp_path)


async def test_snapshot_outlives_its_kernel(parent: KernelHandle, tmp_path: Path) -> None:
    snap = await take_snapshot(parent)
    try:
        await parent.shutdown(now=True)
        child = await start_from(snap, cwd=tmp_path)
        try:
            assert await value(child, "1 + 1") == 2
        finally:
            await child.shutdown(now=True)
    finally:
        await drop(snap)


async def test_restarting_a_fork_gives_a_fresh_kernel(
    parent: KernelHandle, forks: list[KernelHandle], tmp_path: Path
) -> None:
    await run(parent, "inherited = 1")
    child = await fork_kernel(parent, cwd=tmp_path)
    forks.append(child)
    pid = child_pid(child)
    await restart_kernel(child)  # what a session does after a death or a stuck timeout
    await wait_for(lambda: process_gone(pid), "the forked process is gone")
    assert await value(child, "'inherited' in dir()") is False
    assert await value(child, "__import__('os').getcwd()") == str(tmp_path)
    assert await value(parent, "inherited") == 1


async def test_the_stream_guard_works_in_a_fork(
    parent: KernelHandle, forks: list[KernelHandle], tmp_path: Path
) -> None:
    """A fork keeps the parent's guard hooks; the host's install finds them and they spill."""
    assert await guard.install(parent, tmp_path)
    child = await fork_kernel(parent, cwd=tmp_path)
    forks.append(child)
    assert child.stream_guard is None  # a new kernel process as far as the host is concerned
    assert await guard.install(child, tmp_path)
    cell = guard.CellGuard(tmp_path, "files", 0, budget=10)
    msg = child.kc.session.msg(
        "execute_request",
        {"code": "print('x' * 1000)", "silent": False, "store_history": True},
        metadata=cell.metadata,
    )
    child.kc.shell_channel.send(msg)
    seen = ""
    end = time.monotonic() + DEADLINE
    while True:
        reply = await child.iopub.get(max(0.1, end - time.monotonic()))
        if reply["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
            continue
        if reply["msg_type"] == "stream":
            seen += reply["content"]["text"]
        if reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
            break
    assert seen == "x" * 10  # the budget went out; the rest stayed in the kernel's file
    rest = tmp_path / cell.files["stdout"]
    assert rest.read_text() == "x" * 990 + "\n"


def listening_on(port: int) -> bool:
    """Whether some socket listens on 127.0.0.1:``port`` (a bind attempt says)."""
    import socket

    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not listening
    try:
        probe.bind(("127.0.0.1", port))
    except OSError:
        return True
    finally:
        probe.close()
    return False


async def test_a_fork_does_not_keep_its_parents_ports(tmp_path: Path) -> None:
    """A TCP kernel (as a Jupyter server runs them): its ports are free once it is gone."""
    km = AsyncKernelManager(kernel_spec_manager=OneSpec(kernel_spec_for_python(sys.executable)))
    assert km.transport == "tcp"
    await km.start_kernel(cwd=str(tmp_path))
    parent = await attach_kernel(km)
    ports = [km.shell_port, km.iopub_port, km.stdin_port, km.control_port, km.hb_port]
    child = await fork_kernel(parent, cwd=tmp_path)
    try:
        await parent.shutdown(now=True)
        await wait_for(
            lambda: not any(listening_on(port) for port in ports), "the parent's ports are free"
        )
        assert await value(child, "'child alive'") == "child alive"
    finally:
        await child.shutdown(now=True)


async def test_a_kernel_with_cuda_initialised_is_refused(
    parent: KernelHandle, tmp_path: Path
) -> None:
    # Stands in for torch after torch.cuda.init(): only is_initialized() is consulted.
    await run(
        parent,
        "import sys, types\n"
        "fake = types.ModuleType('torch')\n"
        "fake.cuda = types.SimpleNamespace(is_initialized=lambda: True)\n"
        "sys.modules['torch'] = fake",
    )
    with pytest.raises(ForkError, match="initialised CUDA"):
        await fork_kernel(parent, cwd=tmp_path)
    assert children_of(kernel_pid(parent)) == set()
