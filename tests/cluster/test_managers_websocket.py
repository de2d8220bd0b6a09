"""The gateway's kernel websocket keeps its framing when a client reconnects under its old id.

A client of any make may send a v1 frame on a websocket the server has not started reading
(tornado reads a kernel websocket only after its ``open()`` returned, which waits for the
kernel), then reconnect with the same session id. jupyter_server then closes the old handler
("Replacing stale connection"), which reads the frame still waiting on it; the stock
connection class, asking the closed handler for its framing, got none and decoded the v1
frame in the legacy one (an error, or a server stalled for minutes). The server here makes
the late start certain (``AWKWARD_WEBSOCKETS``: every websocket of a kernel after its first is
read only once another of its session replaced it) and logs ``FRAMING MIXED`` where a frame
is read in a framing other than its handshake's. Our :class:`ClusterWebsocketConnection`
must never show it; the stock class, in the same scene, must (else the scene proves nothing).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.session import Session
from jupyter_server.services.kernels.connection.base import (
    deserialize_msg_from_ws_v1,
    serialize_msg_to_ws_v1,
)
from remote_servers import AWKWARD_WEBSOCKETS, Server, run_server
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

pytestmark = pytest.mark.timeout(120)

V1 = "v1.kernel.websocket.jupyter.org"
HOLD = 10  # seconds a reconnected websocket goes unread unless replaced (the last one waits it out)
STOCK = (
    "from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection"
)
OURS = (
    "from jupyter_exec.cluster.managers import ClusterWebsocketConnection "
    "as ZMQChannelsWebsocketConnection"
)


def _server(base: Path, connection_import: str) -> Iterator[Server]:
    assert STOCK in AWKWARD_WEBSOCKETS
    config = AWKWARD_WEBSOCKETS.replace("HOLD", str(HOLD)).replace(STOCK, connection_import)
    with run_server("jupyter_server", base, config) as running:
        yield running


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _server(tmp_path_factory.mktemp("ours"), OURS)


@pytest.fixture(scope="module")
def stock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _server(tmp_path_factory.mktemp("stock"), STOCK)


async def _start_kernel(server: Server) -> str:
    response = await AsyncHTTPClient().fetch(
        f"{server.url}/api/kernels",
        method="POST",
        body=json.dumps({"name": "python3"}),
        headers={"Authorization": f"token {server.token}"},
    )
    kernel_id = json.loads(response.body)["id"]
    assert isinstance(kernel_id, str)
    return kernel_id


async def _websocket(server: Server, kernel_id: str, session_id: str) -> WebSocketClientConnection:
    url = server.url.replace("http", "ws", 1)
    request = HTTPRequest(
        f"{url}/api/kernels/{kernel_id}/channels?session_id={session_id}",
        headers={"Authorization": f"token {server.token}"},
    )
    websocket = await websocket_connect(request, subprotocols=[V1])
    assert websocket.selected_subprotocol == V1
    return websocket


def _kernel_info_request(session: Session) -> tuple[str, bytes]:
    msg = session.msg("kernel_info_request")
    frame = serialize_msg_to_ws_v1(msg, "shell", session.pack)  # type: ignore[no-untyped-call]
    return msg["header"]["msg_id"], frame


async def _reply_to(websocket: WebSocketClientConnection, msg_id: str, within: float) -> Any:
    """The type of the shell reply to ``msg_id`` on ``websocket`` (iopub passed over)."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        frame = await asyncio.wait_for(websocket.read_message(), left)
        assert frame is not None, "the server closed the websocket"
        assert isinstance(frame, bytes), "a v1 websocket got a text frame"
        channel, parts = deserialize_msg_from_ws_v1(frame)  # type: ignore[no-untyped-call]
        parent = json.loads(parts[1])
        if channel == "shell" and parent.get("msg_id") == msg_id:
            return json.loads(parts[0])["msg_type"]
    raise AssertionError(f"no reply to {msg_id} within {within} s")


async def _until_logged(server: Server, text: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while text not in server.log.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"the server never logged {text!r}"
        await asyncio.sleep(0.05)


async def _frame_left_on_a_replaced_websocket(
    server: Server,
) -> list[WebSocketClientConnection]:
    """The scene: a frame sent on a websocket the server is not reading yet, then a reconnect
    under the same session id. Returns the websockets opened, the new one last."""
    kernel_id = await _start_kernel(server)
    client = Session(key=b"")
    first = await _websocket(server, kernel_id, "first")  # read at once: the kernel is up
    msg_id, frame = _kernel_info_request(client)
    await first.write_message(frame, binary=True)
    assert await _reply_to(first, msg_id, within=60) == "kernel_info_reply"
    waiting = await _websocket(server, kernel_id, "again")  # opened, not read
    _, early = _kernel_info_request(client)
    await waiting.write_message(early, binary=True)
    again = await _websocket(server, kernel_id, "again")  # the server replaces `waiting`
    return [first, waiting, again]


async def test_the_stock_connection_reads_the_waiting_frame_in_the_wrong_framing(
    stock: Server,
) -> None:
    """The control: the scene does reach the hole in jupyter_server's own class."""
    opened = await _frame_left_on_a_replaced_websocket(stock)
    try:
        await _until_logged(stock, "FRAMING MIXED")
    finally:
        for websocket in opened:
            websocket.close()


async def test_our_connection_drops_the_waiting_frame_and_the_new_websocket_serves(
    ours: Server,
) -> None:
    opened = await _frame_left_on_a_replaced_websocket(ours)
    try:
        await _until_logged(ours, "a frame read after its websocket closed is dropped")
        msg_id, frame = _kernel_info_request(Session(key=b""))
        await opened[-1].write_message(frame, binary=True)
        assert await _reply_to(opened[-1], msg_id, within=60) == "kernel_info_reply"
    finally:
        for websocket in opened:
            websocket.close()
    log = ours.log.read_text(errors="replace")
    assert "FRAMING MIXED" not in log
    assert "struct.error" not in log
