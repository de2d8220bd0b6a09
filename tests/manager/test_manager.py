"""Session managers with real kernels: pools, limits, culling, concurrency, shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from jupyter_exec import AsyncSession, NetworkPolicy, SessionClosedError, SessionNotFound
from jupyter_exec.exceptions import InvalidArgument, SessionLimitError
from jupyter_exec.manager import AsyncSessionManager, PoolKey, SessionManager
from jupyter_exec.state.generations import state_folder
from tests.generation_helpers import flush


def kernel_pid(session: object) -> int:
    """The local kernel's process id (through jupyter_client's provisioner)."""
    km = session._kernel.km  # type: ignore[attr-defined]
    return int(km.provisioner.process.pid)


@pytest.fixture
async def pooled(tmp_path: Path) -> AsyncIterator[AsyncSessionManager]:
    """A manager with a full pool of two local kernels."""
    async with AsyncSessionManager(root_dir=str(tmp_path / "root"), pool_size=2) as manager:
        await manager.wait_for_pools()
        yield manager


async def test_pooled_session_is_clean_private_and_in_its_work_dir(
    pooled: AsyncSessionManager,
) -> None:
    pool = pooled.pool()
    assert pool is not None
    assert pool.ready == 2
    a = await pooled.session("a")
    b = await pooled.session("b")
    assert [i.from_pool for i in pooled.list()] == [True, True]
    assert a.kernel_id != b.kernel_id
    assert a.work_dir == pooled.root / "a"
    cwd = await a.execute("import os; os.getcwd()")
    assert cwd.text == repr(str(pooled.root / "a"))
    # Nothing but the session's own notebook (and its hidden spare) and, once its writer has
    # flushed (waited for, never timed), the cell's saved state; and a fresh namespace.
    await flush(a)
    listed = {p.name for p in a.work_dir.iterdir()} - {".a.ipynb.jx-tmp"}
    assert listed == {"a.ipynb", state_folder("a")}
    fresh = await a.execute("[n for n in globals() if not n.startswith('_')]")
    assert "os" in fresh.text
    assert fresh.execution_count == 2  # the silent warm-up left no trace
    await a.execute("x = 'mine'")
    leaked = await b.execute("x")
    assert leaked.error is not None
    assert leaked.error.ename == "NameError"
    # The pool refills in the background.
    await pool.wait_ready(timeout=60)
    assert pool.ready == 2


async def test_a_pooled_kernel_restarts_in_its_renamed_work_dir(
    pooled: AsyncSessionManager,
) -> None:
    s = await pooled.session("r")
    await s.restart()
    cwd = await s.execute("import os; os.getcwd()")
    assert cwd.text == repr(str(pooled.root / "r"))


async def test_get_or_create_list_close(pooled: AsyncSessionManager) -> None:
    first, again = await asyncio.gather(pooled.session("x"), pooled.session("x"))
    assert first is again
    assert await pooled.session("x") is first
    assert pooled.get("x") is first
    assert "x" in pooled
    assert [i.name for i in pooled.list()] == ["x"]
    await pooled.close_session("x")
    assert "x" not in pooled
    with pytest.raises(SessionNotFound):
        pooled.get("x")
    with pytest.raises(SessionNotFound):
        await pooled.close_session("x")
    with pytest.raises(InvalidArgument, match="session name"):
        await pooled.session("../escape")
    with pytest.raises(TypeError, match="work_dir"):
        await pooled.session("y", work_dir="/tmp")


async def test_a_name_used_again_keeps_files_and_the_old_notebook(
    pooled: AsyncSessionManager,
) -> None:
    s = await pooled.session("n")
    await s.execute("open('data.txt', 'w').write('kept')")
    await pooled.close_session("n")
    again = await pooled.session("n")
    assert again is not s
    assert not pooled.list()[0].from_pool  # the work dir exists: started in place
    assert again.notebook_path == pooled.root / "n" / "n-2.ipynb"
    assert (pooled.root / "n" / "n.ipynb").exists()
    read = await again.execute("open('data.txt').read()")
    assert read.text == "'kept'"


async def test_limits(tmp_path: Path) -> None:
    async with AsyncSessionManager(
        root_dir=str(tmp_path), max_sessions=2, max_sessions_per_backend={"local": 1}
    ) as manager:
        await manager.session("one")
        with pytest.raises(SessionLimitError, match="max_sessions_per_backend"):
            await manager.session("two")
        await manager.close_session("one")
        await manager.session("two")
        manager.max_sessions_per_backend = {}
        await manager.session("three")
        with pytest.raises(SessionLimitError, match="max_sessions=2"):
            await manager.session("four")


async def test_add_manages_a_session_the_caller_makes(tmp_path: Path) -> None:
    """The host seam (the server extension's): the caller's session, the manager's rules."""
    made: list[AsyncSession] = []

    async def make() -> AsyncSession:
        session = AsyncSession(work_dir=tmp_path / "elsewhere", name="mine")
        made.append(session)
        return await session.start()

    async with AsyncSessionManager(
        root_dir=str(tmp_path / "root"), max_sessions_per_backend={"docker": 1}
    ) as manager:
        mine = await manager.add("x", make, backend="docker")
        assert mine.work_dir == tmp_path / "elsewhere"
        assert await manager.add("x", make) is mine
        assert manager.get("x") is mine
        [info] = manager.list()
        assert (info.name, info.backend, info.from_pool, info.alive) == ("x", "docker", False, True)
        with pytest.raises(SessionLimitError, match="max_sessions_per_backend"):
            await manager.add("y", make, backend="docker")
        assert made == [mine]  # refused before make() ran: no kernel started
    assert mine.closed  # shutdown closes what was added too


async def test_idle_sessions_are_culled_busy_ones_are_not(tmp_path: Path) -> None:
    async with AsyncSessionManager(root_dir=str(tmp_path), cull_idle_timeout=0.6) as manager:
        idle = await manager.session("idle")
        busy = await manager.session("busy")
        running = asyncio.create_task(busy.execute("import time; time.sleep(2)"))
        await asyncio.sleep(1.5)
        names = [i.name for i in manager.list()]
        assert names == ["busy"]
        with pytest.raises(SessionClosedError):
            await idle.execute("1")
        assert (await running).ok
        await asyncio.sleep(1.5)
        assert manager.list() == []


async def test_sessions_run_in_parallel_and_one_session_queues_in_order(tmp_path: Path) -> None:
    async with AsyncSessionManager(root_dir=str(tmp_path)) as manager:
        a, b = await asyncio.gather(manager.session("a"), manager.session("b"))
        start = time.monotonic()
        await asyncio.gather(
            a.execute("import time; time.sleep(1)"), b.execute("import time; time.sleep(1)")
        )
        assert time.monotonic() - start < 1.8  # not 2 s: the kernels ran at the same time
        await a.execute("order = []")
        cells = [f"import time; time.sleep(0.05); order.append({i}); {i}" for i in range(6)]
        results = await asyncio.gather(*(a.execute(c) for c in cells))
        assert [r.text for r in results] == [str(i) for i in range(6)]
        assert (await a.execute("order")).text == "[0, 1, 2, 3, 4, 5]"
        counts = [r.execution_count for r in results]
        assert counts == sorted(counts)


async def test_cancelling_a_waiting_execution_leaves_the_running_one_alone(
    tmp_path: Path,
) -> None:
    async with AsyncSessionManager(root_dir=str(tmp_path)) as manager:
        s = await manager.session("c")
        running = asyncio.create_task(s.execute("import time; time.sleep(0.8); print('first')"))
        await asyncio.sleep(0.2)
        waiting = asyncio.create_task(s.execute("print('never')"))
        after = asyncio.create_task(s.execute("print('third')"))
        await asyncio.sleep(0.1)
        waiting.cancel()
        first = await running
        assert first.ok
        assert first.stdout == "first\n"
        with pytest.raises(asyncio.CancelledError):
            await waiting
        third = await after
        assert third.stdout == "third\n"
        assert third.execution_count == first.execution_count + 1  # 'never' never ran
        assert s.notebook_path is not None
        assert "never" not in s.notebook_path.read_text()


async def test_shutdown_stops_every_kernel_and_pooled_kernel(tmp_path: Path) -> None:
    manager = await AsyncSessionManager(root_dir=str(tmp_path), pool_size=1).start()
    await manager.wait_for_pools()
    s = await manager.session("s")
    pool = manager.pool()
    assert pool is not None
    await pool.wait_ready()
    pids = [kernel_pid(s), *(int(w.km.provisioner.process.pid) for w in pool._ready)]
    await manager.shutdown()
    await manager.shutdown()  # idempotent
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    assert not (tmp_path / ".pool").exists() or not any((tmp_path / ".pool").iterdir())
    with pytest.raises(SessionClosedError):
        await manager.session("t")


def test_pool_keys_ignore_options_that_do_not_shape_the_kernel() -> None:
    assert PoolKey.of({}) == PoolKey.of({"backend": "local", "timeout": 5, "notebook": False})
    assert PoolKey.of({"env": {"A": "1"}}) != PoolKey.of({})
    docker = PoolKey.of({"backend": "docker", "docker": {"memory": "1g", "network": True}})
    same = PoolKey.of({"backend": "docker", "docker": {"network": True, "memory": "1g"}})
    assert docker == same
    assert docker is not None
    assert docker.options() == {
        "backend": "docker",
        "kernel_name": "python3",
        "docker": {"memory": "1g", "network": True},
    }
    assert PoolKey.of({"kernel_manager": object()}) is None
    remote = PoolKey.of({"backend": "remote", "url": "http://h", "token": "secret"})
    assert remote is not None
    assert "secret" not in repr(remote)
    assert "secret" not in remote.label


def test_pool_keys_tell_network_policies_apart() -> None:
    docker = {"backend": "docker"}
    a = NetworkPolicy(allow=["pypi.org"], secrets={"pypi.org": {"Authorization": "s3cret"}})
    keys = [
        PoolKey.of({**docker, "network": a}),
        PoolKey.of({**docker, "network": {"allow": ["pypi.org"]}}),  # no secrets: another key
        PoolKey.of({**docker, "network": {"allow": ["example.org"]}}),
        PoolKey.of(docker),
    ]
    assert len(set(keys)) == 4
    assert keys[0] == PoolKey.of({**docker, "network": NetworkPolicy.from_value(a)})
    assert keys[1] == PoolKey.of({**docker, "network": NetworkPolicy(allow=["pypi.org"])})
    asking = PoolKey.of({**docker, "network": NetworkPolicy(allow=["pypi.org"], ask=print)})
    assert asking not in keys  # a policy that asks someone is not one that does not
    assert keys[0] is not None
    assert keys[0].options()["network"] == a
    assert "s3cret" not in repr(keys[0]) + keys[0].label
    assert "pypi.org" in keys[0].label
    assert PoolKey.of({"environment": "docker"}) is None  # resolved first, then keyed


def test_blocking_manager(tmp_path: Path) -> None:
    with SessionManager(root_dir=str(tmp_path), pool_size=1, handle_sigterm=False) as manager:
        manager.wait_for_pools()
        s = manager.session("a")
        assert manager.session("a") is s
        assert s.execute("21 * 2").text == "42"
        assert manager.execute("b", "print('b')").stdout == "b\n"
        assert len(manager) == 2
        pid = kernel_pid(s.async_session)
        manager.close_session("a")
        assert "a" not in manager
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


def test_close_closes_the_manager_and_close_name_is_the_old_spelling(tmp_path: Path) -> None:
    """``close()`` closes the object it is called on; one session is ``close_session(name)``,
    and the 0.2 spelling ``close(name)`` still closes just that session, with a warning."""
    manager = SessionManager(root_dir=str(tmp_path), handle_sigterm=False)
    manager.execute("a", "1")
    manager.execute("b", "1")
    with pytest.warns(DeprecationWarning, match=r"close_session\(name\)"):
        manager.close("a")
    assert "a" not in manager
    assert "b" in manager
    manager.close()
    assert len(manager) == 0
    with pytest.raises(SessionClosedError):
        manager.session("c")
    manager.close()  # idempotent


SIGTERM_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from jupyter_exec.manager import SessionManager
    manager = SessionManager(root_dir=sys.argv[1], pool_size=1)
    manager.wait_for_pools()
    s = manager.session("a")
    manager.wait_for_pools()
    pool = manager.async_manager.pool()
    pids = [s.async_session._kernel.km.provisioner.process.pid]
    pids += [w.km.provisioner.process.pid for w in pool._ready]
    print(" ".join(map(str, pids)), flush=True)
    time.sleep(60)
    """
)


def test_sigterm_shuts_everything_down(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_SCRIPT, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        pids = [int(p) for p in process.stdout.readline().split()]
        assert len(pids) == 2
        assert all(psutil.pid_exists(p) for p in pids)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == -signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        process.stdout.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if psutil.pid_exists(p)]
    assert (tmp_path / "a" / "a.ipynb").exists()


def test_no_sigterm_handler_replaced_in_a_host_app(tmp_path: Path) -> None:
    def host_handler(signum: int, frame: object) -> None:  # pragma: no cover - never called
        pass

    previous = signal.signal(signal.SIGTERM, host_handler)
    try:
        with SessionManager(root_dir=str(tmp_path)):
            assert signal.getsignal(signal.SIGTERM) is host_handler
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert os.path.isdir(tmp_path)


async def test_misspelt_options_are_refused_before_any_kernel_starts(tmp_path: Path) -> None:
    async with AsyncSessionManager(root_dir=tmp_path / "root") as manager:
        with pytest.raises(InvalidArgument, match="unknown session option\\(s\\) 'tiemout'"):
            await manager.session("a", tiemout=3)
        with pytest.raises(InvalidArgument, match="'pythn'"):
            await manager.add_pool(size=1, pythn="python3")
        assert manager.list() == []
        assert manager.kernel_pools == []


async def test_a_kernel_started_with_a_policy_is_attached_only_with_that_policy() -> None:
    from jupyter_exec.options import SessionOptions
    from jupyter_exec.session.launch import launch_kernel, lend_network, network_of

    class Proxy:
        policy = NetworkPolicy(allow=["pypi.org"])

    class Manager:  # what a pool hands out; never reached: refused before any attach
        pass

    km = Manager()
    lend_network(km, Proxy())
    assert network_of(km) is not None
    assert network_of(Manager()) is None
    with pytest.raises(InvalidArgument, match="started with a network policy"):
        await launch_kernel(SessionOptions(kernel_manager=km), None)
    other = SessionOptions(backend="docker", network={"allow": ["example.org"]}, kernel_manager=km)
    with pytest.raises(InvalidArgument, match="not to a given kernel"):
        await launch_kernel(other, None)  # another policy: this kernel's proxy decides otherwise
