"""A reconnected kernel websocket against a Jupyter server that starts reading it late.

On a loaded machine a Jupyter server reads nothing from a new kernel websocket
until the kernel answered it (tornado calls its ``open()`` first), and when a
websocket comes with the client session id of one it still holds, it closes the
old one ("Replacing stale connection"); the closed handler then reads whatever
was still waiting on it in the legacy framing, whatever its handshake chose. A
v1 frame so read stalled the server for minutes (a ``struct`` format of 100
million items), and every later request to it timed out.

The server here (``AWKWARD_WEBSOCKETS``) makes the late start certain: every
websocket of a kernel after its first is read only once another websocket of
its session replaced it, or 8 s passed; and it reports a frame read in the
wrong framing instead of decoding it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from remote_servers import AWKWARD_WEBSOCKETS, Server, run_server

from jupyter_exec import AsyncSession
from jupyter_exec.remote import RemoteKernelManager

pytestmark = pytest.mark.timeout(180)

HOLD = 8  # seconds a reconnected websocket goes unread unless replaced


@pytest.fixture(scope="module")
def awkward(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config = AWKWARD_WEBSOCKETS.replace("HOLD", str(HOLD))
    with run_server("jupyter_server", tmp_path_factory.mktemp("awkward"), config) as running:
        yield running


def km_of(session: AsyncSession) -> RemoteKernelManager:
    km = session._kernel.km  # type: ignore[union-attr]
    assert isinstance(km, RemoteKernelManager)
    return km


def mixed_frames(server: Server) -> list[str]:
    return [
        line
        for line in server.log.read_text(errors="replace").splitlines()
        if "FRAMING MIXED" in line or "struct.error" in line
    ]


async def until(condition: Any, what: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.02)


async def test_a_restart_leaves_no_frame_on_a_websocket_the_server_replaces(
    awkward: Server, tmp_path: Path
) -> None:
    async with AsyncSession(
        work_dir=tmp_path, backend="remote", url=awkward.url, token=awkward.token, timeout=60
    ) as session:
        assert (await session.execute("kept = 1")).ok
        died = await session.execute("import os; os._exit(1)")
        assert died.status == "died"
        # The reconnect after the restart waited for the server to read it, and sent its
        # probe only then: no second websocket of the session, nothing read as legacy.
        assert (await session.execute("2 + 2")).text == "4"
        assert km_of(session).restarts == 1
    assert mixed_frames(awkward) == []


async def test_a_request_waits_until_the_server_reads_the_reconnected_websocket(
    awkward: Server, tmp_path: Path
) -> None:
    async with AsyncSession(
        work_dir=tmp_path, backend="remote", url=awkward.url, token=awkward.token, timeout=90
    ) as session:
        assert (await session.execute("n = 0")).ok
        connection = km_of(session).connection
        sent = asyncio.Event()
        send = connection.send

        def watched(channel: str, msg: dict[str, Any]) -> None:
            send(channel, msg)
            if msg["msg_type"] == "execute_request":
                sent.set()

        connection.send = watched  # type: ignore[method-assign]
        connection.drop()
        await until(lambda: connection.reconnects == 1, "the first reconnect")
        # The server does not read this websocket yet: the request must not go out on it,
        # since the next reconnect (same session, for the replay) makes the server replace it.
        running = asyncio.create_task(session.execute("n += 1\nn"))
        await asyncio.wait_for(sent.wait(), 60)
        connection.drop()
        result = await running
        assert result.ok, result.error
        assert result.text == "1"  # ran once
        assert connection.reconnects == 2
        assert (await session.execute("n")).text == "1"
    assert mixed_frames(awkward) == []
