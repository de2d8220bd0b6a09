"""The remote backend against a real jupyter_server and a real Kernel Gateway on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from remote_servers import EG_REASON, Proxy, RefusingServer, Server, kernels_on, run_server

from jupyter_exec import (
    AsyncSession,
    BackendError,
    Execution,
    KernelStartError,
    ServerRefused,
)
from jupyter_exec.manager import AsyncSessionManager
from jupyter_exec.remote import RemoteKernelManager, start_remote_kernel
from jupyter_exec.remote.wire import decode, encode, new_message

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module", params=["jupyter_server", "kernel_gateway"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with run_server(request.param, tmp_path_factory.mktemp(request.param)) as running:
        yield running


@pytest.fixture
async def remote(server: Server, tmp_path: Path) -> AsyncIterator[AsyncSession]:
    async with AsyncSession(
        work_dir=tmp_path / "work",
        name="remote",
        backend="remote",
        url=server.url,
        token=server.token,
        timeout=30,
        interrupt_grace=5,
    ) as session:
        yield session


def km_of(session: AsyncSession) -> RemoteKernelManager:
    km = session._kernel.km  # type: ignore[union-attr]
    assert isinstance(km, RemoteKernelManager)
    return km


PNG = (
    "import base64\n"
    "from IPython.display import Image, display\n"
    "display(Image(data=base64.b64decode("
    "'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=='"
    ")))"
)
CELLS = [
    "x = 6 * 7\nprint('hello')\nx",
    "import sys\nprint('to stderr', file=sys.stderr)\nprint('to stdout')",
    "print('before'); 1 / 0",
    "from IPython.display import HTML, display\ndisplay(HTML('<b>bold</b>'))\n{'a': [1, 2]}",
    PNG,
    "for i in range(3):\n    print(i, end='\\r' if i < 2 else '\\n')",
]


def essence(execution: Execution, work_dir: Path) -> dict[str, Any]:
    """What must be equal between a local and a remote run of the same cell."""
    return {
        "status": execution.status,
        "stdout": execution.stdout,
        "stderr": execution.stderr,
        "text": execution.text,
        "error": (execution.error.ename, execution.error.evalue) if execution.error else None,
        "formats": [sorted(r.formats()) for r in execution.results],
        "files": [str(p.relative_to(work_dir)) for p in execution.files],
        "count": execution.execution_count,
    }


async def test_same_executions_as_a_local_session(
    remote: AsyncSession, tmp_path: Path, read_notebook: Any
) -> None:
    async with AsyncSession(work_dir=tmp_path / "local", name="remote", timeout=30) as local:
        for cell in CELLS:
            here, there = await local.execute(cell), await remote.execute(cell)
            assert essence(there, remote.work_dir) == essence(here, local.work_dir), cell
    png = remote.work_dir / "remote_files" / "cell-005-1.png"
    assert png.read_bytes().startswith(b"\x89PNG")
    assert remote.notebook_path is not None
    nb = read_notebook(remote.notebook_path)
    assert len(nb.cells) == len(CELLS)
    assert nb.metadata["jupyter_exec"]["backend"] == "remote"
    assert nb.metadata["language_info"]["name"] == "python"


async def test_timeout_interrupts_the_remote_kernel_and_keeps_state(remote: AsyncSession) -> None:
    await remote.execute("kept = 1")
    slow = await remote.execute("import time; time.sleep(30)", timeout=1)
    assert slow.status == "timeout"
    assert not slow.state_lost
    assert (await remote.execute("kept")).text == "1"


async def test_a_dead_remote_kernel_is_reported_and_replaced(remote: AsyncSession) -> None:
    died = await remote.execute("import os; os._exit(1)")
    assert died.status == "died"
    assert died.state_lost
    assert died.error is not None
    assert "its state is lost (no cell's state was saved yet)" in died.error.evalue
    assert (await remote.execute("2 + 2")).text == "4"


async def test_a_dead_remote_kernel_comes_back_with_the_state_saved_beside_it(
    remote: AsyncSession,
) -> None:
    """The server restarts the kernel in the same folder, where its writer saved the state."""
    assert (await remote.execute("kept = 41")).ok
    await remote.flush()
    died = await remote.execute("import os; os._exit(1)")
    assert died.status == "died"
    assert died.recovered is not None, died.error
    assert "kept" in died.recovered.names
    assert (await remote.execute("kept + 1")).text == "42"


async def test_reconnects_after_the_client_closes_the_websocket(remote: AsyncSession) -> None:
    km = km_of(remote)
    await remote.execute("state = 'kept'")
    running = asyncio.create_task(
        remote.execute(
            "import time\nfor i in range(5):\n    print(i, flush=True)\n    time.sleep(0.2)"
        )
    )
    await asyncio.sleep(0.3)
    km.connection.drop()
    result = await running
    assert result.ok
    assert result.stdout == "0\n1\n2\n3\n4\n"  # nothing lost, nothing twice
    assert km.connection.reconnects == 1
    assert (await remote.execute("state")).text == "'kept'"


async def test_survives_a_killed_connection(server: Server, tmp_path: Path) -> None:
    proxy = await Proxy(int(server.url.rsplit(":", 1)[1])).start()
    try:
        async with AsyncSession(
            work_dir=tmp_path,
            backend="remote",
            url=f"http://127.0.0.1:{proxy.port}",
            token=server.token,
            timeout=30,
        ) as session:
            await session.execute("n = 0")
            running = asyncio.create_task(
                session.execute(
                    "import time\nfor i in range(6):\n    n += 1; print(i, flush=True)\n"
                    "    time.sleep(0.25)"
                )
            )
            await asyncio.sleep(0.4)
            proxy.drop_all()
            result = await running
            assert result.ok
            assert result.stdout == "0\n1\n2\n3\n4\n5\n"
            assert (await session.execute("n")).text == "6"  # ran once, not twice
            assert km_of(session).connection.reconnects >= 1
    finally:
        await proxy.close()


async def test_close_deletes_the_remote_kernel(server: Server, tmp_path: Path) -> None:
    session = AsyncSession(work_dir=tmp_path, backend="remote", url=server.url, token=server.token)
    await session.start()
    kernel_id = session.kernel_id
    assert kernel_id in kernels_on(server)
    await session.close()
    assert kernel_id not in kernels_on(server)


async def test_errors_are_ours(server: Server, tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="token"):
        await start_remote_kernel(server.url, "wrong-token")
    with pytest.raises(KernelStartError, match="no kernel 'nope'"):
        await start_remote_kernel(server.url, server.token, "nope")
    with pytest.raises(BackendError, match="cannot reach"):
        await start_remote_kernel("http://127.0.0.1:9", server.token)
    with pytest.raises(ValueError, match="http"):
        await start_remote_kernel("ftp://example.org", None)


async def test_a_manager_pools_remote_kernels(server: Server, tmp_path: Path) -> None:
    pool = {"backend": "remote", "url": server.url, "token": server.token}
    async with AsyncSessionManager(root_dir=str(tmp_path), pools=[pool], pool_size=1) as manager:
        await manager.wait_for_pools()
        session = await manager.session("r", **pool)
        assert manager.list()[0].from_pool
        assert (await session.execute("40 + 2")).text == "42"
        assert session.kernel_id in kernels_on(server)
    assert session.kernel_id not in kernels_on(server)


@pytest.mark.parametrize("v1", [True, False])
def test_wire_round_trip(v1: bool) -> None:
    msg = new_message("execute_request", {"code": "é"}, session="s", username="u")
    msg["buffers"] = [b"\x00\x01"] if v1 else []
    channel, back = decode(encode(msg, "shell", v1=v1), v1=v1)
    assert channel == "shell"
    assert back["header"] == msg["header"]
    assert back["content"] == {"code": "é"}
    assert back["msg_type"] == "execute_request"
    if v1:
        assert [bytes(b) for b in back["buffers"]] == [b"\x00\x01"]
    with pytest.raises(ValueError, match="malformed"):
        decode(b"\x01" * 3, v1=False)


async def test_files_the_code_writes_come_home_through_the_kernel(
    remote: AsyncSession, server: Server
) -> None:
    code = (
        "import os\n"
        "os.makedirs('tables', exist_ok=True)\n"
        "open('remote-out.txt', 'w').write('from the kernel')\n"
        "open('tables/big.bin', 'wb').write(bytes(range(256)) * 40000)\n"
        "open('.hidden', 'w').write('not for the work dir')"
    )
    written = await remote.execute(code)
    assert written.ok
    work = remote.work_dir.absolute()
    assert sorted(p.relative_to(work).as_posix() for p in written.files) == [
        "remote-out.txt",
        "tables/big.bin",
    ]
    assert (work / "remote-out.txt").read_text() == "from the kernel"
    assert (work / "tables" / "big.bin").read_bytes() == bytes(range(256)) * 40000
    assert not (work / ".hidden").exists()
    # Unchanged files are not copied again; a changed one is.
    again = await remote.execute("open('remote-out.txt', 'a').write('!')")
    assert [p.name for p in again.files] == ["remote-out.txt"]
    assert (work / "remote-out.txt").read_text() == "from the kernel!"
    assert (await remote.execute("1 + 1")).files == ()
    # The server's own file API, where it has one, reaches the same file.
    km = km_of(remote)
    local = remote.work_dir / "fetched.txt"
    if server.kind == "jupyter_server":
        await km.fetch("remote-out.txt", local)
        assert local.read_text() == "from the kernel!"
    else:  # Kernel Gateway has no contents API
        with pytest.raises(BackendError, match="no contents API"):
            await km.fetch("remote-out.txt", local)


async def test_a_host_a_server_cannot_place_kernels_on_is_refused(
    server: Server, tmp_path: Path
) -> None:
    session = AsyncSession(
        work_dir=tmp_path / "w",
        backend="remote",
        url=server.url,
        token=server.token,
        host="node-that-is-not-here",
    )
    with pytest.raises(KernelStartError, match="does the server place kernels on hosts"):
        await session.start()
    assert kernels_on(server) == []  # the kernel it started anyway is gone


async def test_every_execution_says_where_the_kernel_ran(remote: AsyncSession) -> None:
    import socket

    ran = await remote.execute("1")
    assert ran.host == socket.gethostname()  # no gateway launcher: the kernel's host name
    assert remote.notebook_metadata["jupyter_exec"]["hosts"] == [socket.gethostname()]


# -- refusals: the server's reason is kept; the token hint only for real auth failures --------

# refusal -> (error class, status, reason expected verbatim, whether the token hint is right)
REFUSED = {
    "eg-username": (ServerRefused, 403, EG_REASON, False),
    "quota-message": (ServerRefused, 403, "Kernel quota reached: 5 of 5 kernels in use", False),
    "bare-403": (ServerRefused, 403, "", True),
    "proxy-403-html": (ServerRefused, 403, "", True),
    "bad-token-401": (ServerRefused, 401, "Invalid auth token", True),
    "rate-limited-429": (ServerRefused, 429, "Too many kernels started; retry in 30 s", False),
    "launch-failed-500": (KernelStartError, None, "", False),
}


@pytest.mark.parametrize("refusal", sorted(REFUSED))
async def test_a_refused_kernel_start_keeps_the_servers_reason(
    refusal: str, tmp_path: Path
) -> None:
    kind, status, reason, token_hint = REFUSED[refusal]
    async with RefusingServer(refuse_start=refusal) as server:
        with pytest.raises(kind) as caught:
            await start_remote_kernel(server.url, "tok")
        # The same error reaches a session's caller, unchanged.
        with pytest.raises(kind) as through_session:
            async with AsyncSession(
                work_dir=tmp_path, backend="remote", url=server.url, token="tok", notebook=False
            ):
                pass
    for error in (caught.value, through_session.value):
        message = str(error)
        assert ("token=" in message) is token_hint, message
        if isinstance(error, ServerRefused):
            assert (error.status, error.reason) == (status, reason)
        if reason:
            assert reason in message
    if refusal == "launch-failed-500":
        assert "Kernel died before replying to kernel_info" in str(caught.value)


@pytest.mark.parametrize("refusal", ["eg-username", "bare-403"])
async def test_a_refused_kernel_websocket_keeps_the_servers_reason(refusal: str) -> None:
    kind, status, reason, token_hint = REFUSED[refusal]
    async with RefusingServer(refuse_start=None, refuse_websocket=refusal) as server:
        with pytest.raises(kind) as caught:
            await start_remote_kernel(server.url, "tok")
        assert server.deleted == ["k1"]  # the kernel it started is not left behind
    assert isinstance(caught.value, ServerRefused)
    assert (caught.value.status, caught.value.reason) == (status, reason)
    assert ("token=" in str(caught.value)) is token_hint
    assert "k1" in str(caught.value)
