"""Zygote pools with real kernels: sessions forked ahead of time from a preloaded template."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from jupyter_exec import AsyncSession, KernelStartError, SessionClosedError
from jupyter_exec.exceptions import InvalidArgument
from jupyter_exec.manager import AsyncSessionManager, Preload, SessionManager, ZygotePool
from tests.conftest import read_valid_notebook

SETUP = "import pandas as pd\nrows = 3"


def kernel_pid(session: object) -> int:
    return int(session._kernel.km.provisioner.process.pid)  # type: ignore[attr-defined]


def zygote_of(manager: AsyncSessionManager) -> ZygotePool:
    pool = manager.pool()
    assert isinstance(pool, ZygotePool)
    return pool


def family(pid: int) -> list[psutil.Process]:
    """The live processes that share ``pid``'s command line: the zygote's kernel's, inherited
    by the zygote and every kernel forked from it (its connection file is in it)."""
    cmdline = psutil.Process(pid).cmdline()
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["cmdline"] == cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def _running(process: psutil.Process) -> bool:
    """Still there and not a zombie (an ended process waits for its parent, or init, to reap it)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
async def zygote(tmp_path: Path) -> AsyncIterator[AsyncSessionManager]:
    """A manager whose sessions come from a zygote that imported pandas and ran SETUP."""
    async with AsyncSessionManager(
        root_dir=str(tmp_path / "root"),
        zygote_size=2,
        zygote_preload=["pandas", "json"],
        zygote_setup=SETUP,
    ) as manager:
        await manager.wait_for_pools(timeout=180)
        yield manager


async def test_a_session_starts_with_the_preload_and_records_it(
    zygote: AsyncSessionManager,
) -> None:
    s = await zygote.session("a")
    assert zygote.list()[0].from_pool
    first = await s.execute(
        "import sys; ('pandas' in sys.modules, int(pd.DataFrame({'x': range(rows)}).x.sum()))"
    )
    assert first.ok, first.error
    assert first.text == "(True, 3)"
    assert first.execution_count == 1  # the zygote's silent requests left no trace
    here = str(zygote.root / "a")
    cwd = await s.execute(f"import os; os.getcwd() == {here!r}, sys.path.count(os.getcwd()) <= 1")
    assert cwd.text == "(True, True)"
    assert s.notebook_path is not None
    nb = read_valid_notebook(s.notebook_path)
    assert nb.metadata["jupyter_exec"]["preload"] == {"modules": ["pandas", "json"], "setup": SETUP}
    setup_cell, *cells = nb.cells
    assert setup_cell.source == SETUP
    assert setup_cell.metadata["jupyter_exec"] == {"preload": True}
    assert [c.source for c in cells][:1] == [first.code]


async def test_two_sessions_are_independent_and_the_pool_refills(
    zygote: AsyncSessionManager,
) -> None:
    pool = zygote_of(zygote)
    assert pool.ready == 2
    a = await zygote.session("a")
    b = await zygote.session("b")
    c = await zygote.session("c")  # the pool was empty: forked on demand, same preload
    assert len({a.kernel_id, b.kernel_id, c.kernel_id}) == 3
    await a.execute("rows = 'changed in a'; open('mine.txt', 'w').write('a')")
    seen = await b.execute("rows, os.path.exists('mine.txt') if 'os' in dir() else None")
    assert seen.text == "(3, None)"
    assert (await c.execute("__import__('os').listdir('.')")).text.count("mine.txt") == 0
    assert (zygote.root / "a" / "mine.txt").read_text() == "a"
    assert {a.work_dir, b.work_dir, c.work_dir} == {zygote.root / n for n in "abc"}
    draw = "import random, numpy; (random.random(), float(numpy.random.random()))"
    draws = {(await s.execute(draw)).text for s in (a, b, c)}
    assert len(draws) == 3  # each child reseeded: no two sessions draw the same numbers
    await pool.wait_ready(timeout=120)
    assert pool.ready == 2


async def test_a_name_used_again_gets_a_kernel_forked_into_its_folder(
    zygote: AsyncSessionManager,
) -> None:
    s = await zygote.session("again")
    await s.execute("open('kept.txt', 'w').write('x')")
    await zygote.close_session("again")
    again = await zygote.session("again")
    here = str(zygote.root / "again")
    found = await again.execute(
        f"import os; os.getcwd() == {here!r}, open('kept.txt').read(), rows"
    )
    assert found.text == "(True, 'x', 3)"


async def test_a_killed_zygote_is_restarted_and_sessions_go_on(
    zygote: AsyncSessionManager, caplog: pytest.LogCaptureFixture
) -> None:
    pool = zygote_of(zygote)
    before = await zygote.session("before")
    old = pool.zygote_pid
    assert old is not None
    with caplog.at_level(logging.WARNING, logger="jupyter_exec.manager"):
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while pool.zygote_pid in (old, None) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
    assert pool.zygote_pid not in (old, None)
    assert pool.restarts == 1
    assert any(f"zygote (pid {old}) died" in r.getMessage() for r in caplog.records)
    assert (await before.execute("int(pd.Series([1, rows]).sum())")).text == "4"
    sessions = [await zygote.session(f"after{i}") for i in range(3)]  # more than were ready
    for s in sessions:
        assert (await s.execute("rows")).text == "3"


async def test_closing_the_manager_leaves_no_process(tmp_path: Path) -> None:
    manager = await AsyncSessionManager(
        root_dir=str(tmp_path), zygote_size=2, zygote_preload=["json"]
    ).start()
    try:
        await manager.wait_for_pools(timeout=180)
        pool = zygote_of(manager)
        s = await manager.session("s")
        await s.execute("x = 1")
        await pool.wait_ready(timeout=120)
        assert pool.zygote_pid is not None
        processes = family(pool.zygote_pid)
        assert len(processes) == 4  # the zygote, two ready kernels, the session's kernel
    finally:
        await manager.shutdown()
    deadline = time.monotonic() + 30
    while (left := [p for p in processes if _running(p)]) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert left == []
    assert not (tmp_path / ".pool").exists() or not any((tmp_path / ".pool").iterdir())


async def test_a_failing_preload_is_a_clear_error(tmp_path: Path) -> None:
    async with AsyncSessionManager(
        root_dir=str(tmp_path), zygote_size=1, zygote_preload=["json", "no_such_module_here"]
    ) as manager:
        with pytest.raises(KernelStartError, match="import no_such_module_here failed"):
            await manager.wait_for_pools(timeout=180)
        with pytest.raises(KernelStartError, match="no_such_module_here"):
            await manager.session("s")
        assert "s" not in manager
        assert zygote_of(manager).zygote_pid is None
    async with AsyncSessionManager(
        root_dir=str(tmp_path), zygote_size=1, zygote_preload=[], zygote_setup="1 / 0"
    ) as manager:
        with pytest.raises(KernelStartError, match="setup code failed: ZeroDivisionError"):
            await manager.session("t")


async def test_bad_zygote_configuration_is_refused_before_any_kernel(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="not a module name"):
        Preload(("pandas; import os",))
    with pytest.raises(InvalidArgument, match="not a string"):
        Preload("pandas")  # type: ignore[arg-type]
    manager = AsyncSessionManager(
        root_dir=str(tmp_path),
        zygote_size=1,
        session_defaults={"backend": "docker"},
    )
    with pytest.raises(InvalidArgument, match="share its container"):
        await manager.start()
    with pytest.raises(SessionClosedError):  # shut down by the failed start, nothing left
        await manager.session("s")


async def test_a_zygote_session_forks_undoes_and_restarts(zygote: AsyncSessionManager) -> None:
    s = await zygote.session("f")
    await s.execute("frame = pd.DataFrame({'x': [1, 2]})")
    [child] = await s.fork(name="f-child")
    try:
        assert (await child.execute("int(frame.x.sum()) + rows")).text == "6"
    finally:
        await child.close()
    pid = kernel_pid(s)
    await s.restart()  # a new child of the zygote, in place: the preload is in it again
    assert kernel_pid(s) != pid
    here = str(zygote.root / "f")
    check = f"import os, sys; os.getcwd() == {here!r}, 'pandas' in sys.modules, rows"
    assert (await s.execute(check + ", 'frame' in dir()")).text == "(True, True, 3, False)"
    os.kill(kernel_pid(s), signal.SIGKILL)  # a death: the session restarts it the same way
    died = await s.execute("1")
    assert not died.ok
    assert (await s.execute(check)).text == "(True, True, 3)"


async def test_replay_of_a_zygote_session_reproduces(zygote: AsyncSessionManager) -> None:
    s = await zygote.session("r")
    await s.execute("frame = pd.DataFrame({'x': range(rows)})")
    await s.execute("print(int(frame.x.sum()))")
    await s.execute("frame.shape")
    assert s.notebook_path is not None
    out = s.notebook_path.with_name("replayed.ipynb")
    command = [sys.executable, "-m", "jupyter_exec", "replay", str(s.notebook_path)]
    done = subprocess.run(
        [*command, "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    replayed = read_valid_notebook(out)
    assert replayed.cells[0].source == SETUP
    assert [o.get("text") for o in replayed.cells[2].outputs] == ["3\n"]
    await zygote.close_session("r")
    async with AsyncSession.resume(s.notebook_path) as resumed:  # a plain kernel: setup re-run
        assert (await resumed.execute("type(pd).__name__, int(frame.x.sum())")).text == (
            "('module', 3)"
        )


def test_the_blocking_manager_takes_the_same_traits(tmp_path: Path) -> None:
    with SessionManager(
        root_dir=str(tmp_path), zygote_size=1, zygote_preload=["json"], handle_sigterm=False
    ) as manager:
        manager.wait_for_pools(timeout=180)
        s = manager.session("b")
        assert s.execute("import sys; 'json' in sys.modules").text == "True"
        assert manager.list()[0].from_pool


# -- front ends: the MCP server, the E2B server and the command line --------------------------


async def test_the_mcp_server_serves_sessions_from_a_zygote(tmp_path: Path) -> None:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    argv = ["-m", "jupyter_exec.mcp", "--work-dir", str(tmp_path), "--zygote-size", "1"]
    params = StdioServerParameters(command=sys.executable, args=[*argv, "--preload", "json"])
    async with stdio_client(params) as streams, ClientSession(*streams) as client:
        await client.initialize()
        deadline = time.monotonic() + 180
        while "1/1 kernels ready" not in (listing := await _listing(client)):
            assert time.monotonic() < deadline, listing
            await asyncio.sleep(0.2)
        code = "import sys; print('json' in sys.modules, 'pandas' in sys.modules)"
        result = await client.call_tool("execute_code", {"code": code, "session": "a"})
        assert "True False" in "".join(c.text for c in result.content if c.type == "text")
        assert "kernel from the warm pool" in await _listing(client)


async def _listing(client: object) -> str:
    result = await client.call_tool("list_sessions", {})  # type: ignore[attr-defined]
    return "".join(c.text for c in result.content if c.type == "text")


def test_front_ends_take_the_zygote_options(tmp_path: Path) -> None:
    from jupyter_exec.cli import build_parser
    from jupyter_exec.cli.options import zygote_kwargs
    from jupyter_exec.e2b.app import E2BConfig, E2BServer
    from jupyter_exec.engine.environments import DockerEnv
    from jupyter_exec.mcp.server import SessionRegistry

    for command in ("mcp", "e2b"):
        args = build_parser().parse_args(
            [command, "--zygote-size", "3", "--preload", "numpy", "--preload", "scipy"]
        )
        assert zygote_kwargs(args) == {"zygote_size": 3, "zygote_preload": ["numpy", "scipy"]}
        alone = build_parser().parse_args([command, "--preload", "numpy"])
        with pytest.raises(InvalidArgument, match="give --zygote-size too"):
            zygote_kwargs(alone)
    server = E2BServer(E2BConfig(root_dir=tmp_path, zygote={"zygote_size": 2}))
    assert server.manager.zygote_size == 2
    with pytest.raises(InvalidArgument, match="local kernels only"):
        SessionRegistry(tmp_path, DockerEnv(), zygote={"zygote_size": 1})
