"""As the attacker, against what ends a kernel on a gateway's host and what a client sends it.

* The launcher now takes a listener SIGTERM under Enterprise Gateway as the end of the kernel
  and removes its folder at once, before the kernel is reaped. A process on the gateway's
  machine other than the gateway (another address) asks for that; the kernel, still alive when
  the folder goes, swapped its folder (or a file in it) for a link, a FIFO, to make the removal
  reach outside.
* Kernel ids name that folder: ids that are not a UUID in its canonical form, refused by the
  launcher (the gateway's provisioner asks the same check).
* The gateway's kernel websocket: an authenticated client sends a v1 frame whose offset count
  would make jupyter_server build 2**64 offsets; every other client of the server would wait.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.session import Session
from jupyter_server.services.kernels.connection.base import (
    deserialize_msg_from_ws_v1,
    serialize_msg_to_ws_v1,
)
from remote_servers import Server, run_server
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

import jupyter_exec.cluster.launcher as launcher_module
from jupyter_exec.cluster.managers import V1_PROTOCOL, v1_frame_in_bounds
from tests.cluster.test_launcher import _valid_public_key

KERNEL_ID = "0b4ee1b4-8c4a-4ad4-9d4f-2a5b5b8e9d11"
GATEWAY_IP = "127.0.0.1"


def _eg_launcher(work_root: Path) -> tuple[Any, Any]:
    opts = launcher_module.parse_args(
        [
            "--RemoteProcessProxy.kernel-id",
            KERNEL_ID,
            "--work-root",
            str(work_root),
            "--response-address",
            f"{GATEWAY_IP}:9",
            "--public-key",
            _valid_public_key(),
        ]
    )
    dirs = launcher_module.KernelDirs.make(work_root, KERNEL_ID)
    return launcher_module.Launcher(opts, "127.0.0.2", GATEWAY_IP, dirs), dirs


def _ask(launcher: Any, request: dict[str, Any], peer: str) -> None:
    asker, listener_side = socket.socketpair()
    with asker, listener_side:
        asker.sendall(json.dumps(request).encode())
        asker.shutdown(socket.SHUT_WR)
        launcher.handle_request(listener_side, peer, now=100.0)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
def test_a_kill_from_another_address_removes_nothing(tmp_path: Path, signum: int) -> None:
    launcher, dirs = _eg_launcher(tmp_path / "kernels")
    (dirs.work / "results.csv").write_text("a\n1\n")
    _ask(launcher, {"signum": signum}, peer="127.0.0.9")
    assert launcher.stop_at is None
    assert not launcher.remove_dir
    assert (dirs.work / "results.csv").read_text() == "a\n1\n"


def test_a_folder_swapped_for_a_link_before_the_sigterm_keeps_its_target(tmp_path: Path) -> None:
    """The kernel is alive when the folder goes: it swapped the folder for a link to one of the
    user's folders; the removal must not follow it."""
    launcher, dirs = _eg_launcher(tmp_path / "kernels")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    os.rename(dirs.root, tmp_path / "moved-away")
    dirs.root.symlink_to(precious, target_is_directory=True)
    _ask(launcher, {"signum": signal.SIGTERM}, peer=GATEWAY_IP)
    assert launcher.remove_dir
    assert (precious / "thesis.tex").read_text() == "years of work"


def test_links_and_a_fifo_planted_in_the_folder_are_removed_not_followed(tmp_path: Path) -> None:
    launcher, dirs = _eg_launcher(tmp_path / "kernels")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    (dirs.work / "to-home").symlink_to(precious, target_is_directory=True)
    (dirs.work / "to-file").symlink_to(precious / "thesis.tex")
    os.mkfifo(dirs.work / "pipe")  # opened for reading, it would block the launcher
    _ask(launcher, {"signum": signal.SIGTERM}, peer=GATEWAY_IP)
    assert not os.path.lexists(dirs.root)  # removed, and the launcher did not hang on the FIFO
    assert (precious / "thesis.tex").read_text() == "years of work"
    assert sorted(os.listdir(precious)) == ["thesis.tex"]


NOT_CANONICAL = [
    "../../etc",
    KERNEL_ID.upper(),
    "{" + KERNEL_ID + "}",
    "urn:uuid:" + KERNEL_ID,
    KERNEL_ID.replace("-", ""),
    KERNEL_ID + "\n",
    KERNEL_ID + "/..",
    "",
]


@pytest.mark.parametrize("kernel_id", NOT_CANONICAL, ids=repr)
def test_a_kernel_id_that_is_not_a_canonical_uuid_is_refused_at_both_ends(
    kernel_id: str, tmp_path: Path
) -> None:
    assert not launcher_module.is_kernel_id(kernel_id)
    with pytest.raises(launcher_module.LaunchRefused, match="must be a UUID"):
        launcher_module.parse_args(
            ["--kernel-id", kernel_id, "--work-root", str(tmp_path), "--response-address",
             f"{GATEWAY_IP}:9", "--public-key", _valid_public_key()]
        )  # fmt: skip
    assert os.listdir(tmp_path) == []
    # The gateway's side asks the same is_kernel_id before anything is sent; a real start
    # with such ids is refused in tests/attacks/test_cluster_hosts.py.


def test_a_canonical_uuid_is_a_kernel_id() -> None:
    assert launcher_module.is_kernel_id(str(uuid.uuid4()))


# --- the gateway's kernel websocket ---------------------------------------------------------

INFLATED = [
    b"\xff" * 8 + b"x" * 32,  # 2**64 - 1 offsets
    (3).to_bytes(8, "little") + (40).to_bytes(8, "little"),  # the table runs past the frame
    (2).to_bytes(8, "little") + (24).to_bytes(8, "little") + (10**9).to_bytes(8, "little"),
    (3).to_bytes(8, "little")
    + b"".join(n.to_bytes(8, "little") for n in (40, 32, 40))
    + b"x" * 8,  # offsets going back
    (0).to_bytes(8, "little"),
    b"\x01",
]


def test_the_bound_accepts_real_frames_and_refuses_inflated_ones() -> None:
    session = Session(key=b"")
    real = serialize_msg_to_ws_v1(session.msg("kernel_info_request"), "shell", session.pack)
    assert v1_frame_in_bounds(real)
    for frame in INFLATED:
        assert not v1_frame_in_bounds(frame), frame[:32]
    assert not v1_frame_in_bounds("a text frame")


@pytest.fixture(scope="module")
def gateway_side(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A Jupyter server with the gateway's websocket class, as `jupyter-exec gateway` runs."""
    config = (
        "from jupyter_exec.cluster.managers import ClusterWebsocketConnection\n"
        "c.ServerApp.kernel_websocket_connection_class = ClusterWebsocketConnection\n"
    )
    with run_server("jupyter_server", tmp_path_factory.mktemp("gateway-side"), config) as server:
        yield server


async def _kernel_websocket(server: Server) -> WebSocketClientConnection:
    headers = {"Authorization": f"token {server.token}"}
    started = await AsyncHTTPClient().fetch(
        f"{server.url}/api/kernels", method="POST", body=json.dumps({}), headers=headers
    )
    kernel_id = json.loads(started.body)["id"]
    url = server.url.replace("http", "ws", 1)
    request = HTTPRequest(f"{url}/api/kernels/{kernel_id}/channels", headers=headers)
    return await websocket_connect(request, subprotocols=[V1_PROTOCOL])


async def _kernel_info(websocket: WebSocketClientConnection, within: float) -> str:
    session = Session(key=b"")
    msg = session.msg("kernel_info_request")
    await websocket.write_message(
        serialize_msg_to_ws_v1(msg, "shell", session.pack),  # type: ignore[no-untyped-call]
        binary=True,
    )
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        frame = await asyncio.wait_for(websocket.read_message(), left)
        assert isinstance(frame, bytes)
        channel, parts = deserialize_msg_from_ws_v1(frame)  # type: ignore[no-untyped-call]
        if channel == "shell" and json.loads(parts[1]).get("msg_id") == msg["header"]["msg_id"]:
            return str(json.loads(parts[0])["msg_type"])
    raise AssertionError("no kernel_info_reply")


async def test_an_inflated_v1_frame_is_dropped_and_every_client_is_still_served(
    gateway_side: Server,
) -> None:
    attacker = await _kernel_websocket(gateway_side)
    other = await _kernel_websocket(gateway_side)
    try:
        assert await _kernel_info(attacker, within=60) == "kernel_info_reply"
        for frame in INFLATED:
            await attacker.write_message(frame, binary=True)
        # Unbounded, the first frame alone keeps the server's one thread for hours.
        assert await _kernel_info(other, within=30) == "kernel_info_reply"
        assert await _kernel_info(attacker, within=30) == "kernel_info_reply"
        log = gateway_side.log.read_text(errors="replace")
        assert log.count("a v1 frame whose offsets do not fit it is dropped") == len(INFLATED)
    finally:
        attacker.close()
        other.close()
