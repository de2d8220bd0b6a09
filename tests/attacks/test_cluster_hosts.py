"""Attacks on the cluster's host side: the provisioner, the launcher and its listener.

The attacker is a client of the gateway choosing where and as what its kernel starts, another
user on a cluster host talking to a launcher's listener or the gateway's response port, or
whoever can put words on a launcher's command line. Every attack fails with a clear refusal
and leaves the kernels, their directories and the hosts as they were.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from jupyter_client.manager import AsyncKernelManager

import jupyter_exec.cluster.launcher as launcher_module
from jupyter_exec.engine.kernel import OneSpec
from jupyter_exec.exceptions import InvalidArgument
from tests.cluster.conftest import (  # noqa: F401  (fixtures, used by name)
    StartClusterKernel,
    _gateway_environ,
    cluster_kernel,
    gateway_side,
    loopback_cluster,
)
from tests.cluster.kernels import ClusterKernel, GatewaySide

on_session_loop = pytest.mark.asyncio(loop_scope="session")
"""gateway_provisioners' ResponseManager lives on the loop it was created on."""


def _accepted_sessions(side: GatewaySide) -> int:
    return side.cluster.sshd_log.read_text(errors="replace").count("Accepted publickey")


def _kernel_dirs(side: GatewaySide) -> set[str]:
    return {p.name for p in side.work_root.iterdir()}


def _kernel_log(kernel: ClusterKernel) -> Path:
    return kernel.side.cluster.log_dir / f"kernel-{kernel.kernel_id}.log"


def _launcher_argv(kernel_id: str, public_key: str, work_root: Path) -> list[str]:
    """The launcher run by hand, reporting to a port nothing listens on (discard, 9)."""
    return [
        sys.executable,
        launcher_module.__file__,
        "--kernel-id",
        kernel_id,
        "--response-address",
        "127.0.0.1:9",
        "--public-key",
        public_key,
        "--work-root",
        str(work_root),
    ]


@on_session_loop
@pytest.mark.parametrize(
    "pin", ["127.0.0.1", "localhost", "127.0.0.4", "10.11.12.13", "127.0.0.2; touch {marker}"]
)
async def test_pinning_a_host_outside_the_list_is_refused_before_anything_runs(
    gateway_side: GatewaySide,  # noqa: F811
    pin: str,
) -> None:
    # The injected command's marker is this test's own (a shared /tmp name was once created
    # by another test's notebook, and this test failed for it), in a folder the hosts' user
    # could write to if the pin ever reached a shell there.
    marker = gateway_side.cluster.home / f"pwned-{uuid.uuid4().hex}"
    pin = pin.format(marker=marker)
    km = AsyncKernelManager(
        kernel_name="cluster-test", kernel_spec_manager=OneSpec(gateway_side.spec())
    )
    sessions, dirs = _accepted_sessions(gateway_side), _kernel_dirs(gateway_side)
    with pytest.raises(InvalidArgument, match="is not one of this kernelspec's remote_hosts"):
        await km.start_kernel(env={"KERNEL_REMOTE_HOST": pin})
    assert _accepted_sessions(gateway_side) == sessions  # no SSH session was even opened
    assert _kernel_dirs(gateway_side) == dirs
    assert gateway_side.cluster.kernel_processes() == []
    assert not marker.exists()


@on_session_loop
@pytest.mark.parametrize("kernel_id", ["../../escape", "$(touch pwned)", "ABC; rm -rf /"])
async def test_a_kernel_id_that_is_not_a_uuid_is_refused_by_the_provisioner(
    gateway_side: GatewaySide,  # noqa: F811
    kernel_id: str,
) -> None:
    km = AsyncKernelManager(
        kernel_name="cluster-test",
        kernel_spec_manager=OneSpec(gateway_side.spec()),
        kernel_id=kernel_id,
    )
    sessions, dirs = _accepted_sessions(gateway_side), _kernel_dirs(gateway_side)
    with pytest.raises(InvalidArgument, match="is not a UUID"):
        await km.start_kernel()
    assert _accepted_sessions(gateway_side) == sessions
    assert _kernel_dirs(gateway_side) == dirs


@pytest.mark.parametrize(
    "kernel_id",
    [
        "../../escape",
        "0b4ee1b4-8c4a-4ad4-9d4f-2a5b5b8e9d11/../../escape",
        "x; touch pwned",
        "$(touch pwned)",
        "{0b4ee1b4-8c4a-4ad4-9d4f-2a5b5b8e9d11}",
        "0B4EE1B4-8C4A-4AD4-9D4F-2A5B5B8E9D11",
        "",
    ],
)
def test_a_kernel_id_with_metacharacters_or_dotdot_cannot_escape_the_work_root(
    tmp_path: Path, kernel_id: str
) -> None:
    """Straight at the launcher, as anyone who can shape its command line would."""
    from Cryptodome.PublicKey import RSA

    pem = RSA.generate(1024).publickey().export_key("PEM").decode()
    public_key = "".join(line for line in pem.splitlines() if "-----" not in line)
    work_root = tmp_path / "root" / "kernels"
    done = subprocess.run(
        _launcher_argv(kernel_id, public_key, work_root),
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "SSH_CONNECTION": "127.0.0.1 40000 127.0.0.2 22"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "jupyter-exec-launcher: error: --kernel-id must be a UUID" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no root, no escape, no pwned


@on_session_loop
async def test_a_listener_request_from_another_address_is_ignored(
    cluster_kernel: StartClusterKernel,  # noqa: F811
) -> None:
    kernel = await cluster_kernel(host="127.0.0.2")
    await kernel.run("kept = 42")
    comm_port = kernel.km.provisioner.comm_port
    # Even a request carrying the right token (as if it had leaked) is refused by address.
    token = launcher_module.listener_token(kernel.km.session.key)
    for request in ({"signum": 9, "token": token}, {"shutdown": 1, "token": token}):
        with socket.socket() as attacker:
            attacker.bind(("127.0.0.9", 0))  # another user, another address
            attacker.connect(("127.0.0.2", comm_port))
            attacker.sendall(json.dumps(request).encode())
    refusal = "ignored a listener request from 127.0.0.9 (only"
    deadline = time.monotonic() + 10
    while _kernel_log(kernel).read_text().count(refusal) < 2:
        assert time.monotonic() < deadline, "the launcher did not log two refusals"
        time.sleep(0.05)
    log = _kernel_log(kernel).read_text()
    assert "shutdown requested" not in log
    assert await kernel.km.is_alive()
    assert (await kernel.run("kept")).result == "42"
    assert kernel.kernel_dir.is_dir()


@on_session_loop
async def test_a_listener_request_without_the_token_is_ignored_even_from_the_gateways_address(
    cluster_kernel: StartClusterKernel,  # noqa: F811
) -> None:
    """Other users on the gateway's machine share its address: the token keeps them out."""
    kernel = await cluster_kernel(host="127.0.0.3")
    await kernel.run("kept = 42")
    comm_port = kernel.km.provisioner.comm_port
    for request in ({"signum": 9}, {"shutdown": 1, "token": "0" * 64}, {"shutdown": 1}):
        with socket.create_connection(("127.0.0.3", comm_port)) as attacker:
            attacker.sendall(json.dumps(request).encode())
    deadline = time.monotonic() + 10
    while _kernel_log(kernel).read_text().count("without the listener token") < 3:
        assert time.monotonic() < deadline, "the launcher did not log three refusals"
        time.sleep(0.05)
    assert "shutdown requested" not in _kernel_log(kernel).read_text()
    assert await kernel.km.is_alive()
    assert (await kernel.run("kept")).result == "42"
    assert kernel.kernel_dir.is_dir()


def _forged_payload(info: dict[str, object], public_key: str) -> bytes:
    return launcher_module.encrypt_payload(info, public_key)


@on_session_loop
async def test_a_forged_payload_on_the_response_port_starts_or_redirects_no_kernel(
    cluster_kernel: StartClusterKernel,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The gateway's public key is public (it is on every launcher's command line): a payload
    encrypted with it, or garbage, sent to the response port moves no running kernel and
    starts none."""
    from jupyter_exec.cluster.responses import BoundedResponseManager

    kernel = await cluster_kernel()
    manager = BoundedResponseManager.instance()  # the one the gateway made for that kernel
    host, port = manager.response_address.rsplit(":", 1)
    before = kernel.km.get_connection_info()
    processes = len(kernel.side.cluster.kernel_processes())
    evil = {name: 1 for name in ("shell_port", "iopub_port", "stdin_port", "hb_port")}
    forgeries = [
        b"garbage" * 100,
        base64.b64encode(b'{"version": 1, "key": "AAAA", "conn_info": "AAAA"}'),
        base64.b64encode(b'{"version": 7}'),
        _forged_payload(
            {**evil, "ip": "127.0.0.9", "key": "x", "kernel_id": kernel.kernel_id},
            manager.public_key,
        ),
        _forged_payload(
            {**evil, "ip": "127.0.0.9", "key": "x", "kernel_id": str(uuid.uuid4())},
            manager.public_key,
        ),
    ]
    with caplog.at_level(logging.DEBUG):
        for payload in forgeries:
            with socket.create_connection((host, int(port))) as attacker:
                attacker.sendall(payload)
        second = await cluster_kernel()  # the response port still serves real launches
    assert kernel.km.get_connection_info() == before
    assert (await kernel.run("1 + 1")).result == "2"
    assert (await second.run("2 + 2")).result == "4"
    assert len(kernel.side.cluster.kernel_processes()) == processes + 2  # the second kernel's


@on_session_loop
async def test_the_kernels_secrets_are_not_in_the_launchers_log_or_argv(
    cluster_kernel: StartClusterKernel,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG):
        kernel = await cluster_kernel(encryption="required")
        await kernel.run("print('hello')")
    info = kernel.km.get_connection_info()
    key = info["key"].decode() if isinstance(info["key"], bytes) else str(info["key"])
    secrets = [key, str(info["curve_secretkey"])]
    assert all(len(secret) >= 32 for secret in secrets)
    exposed = [_kernel_log(kernel).read_text(errors="replace"), caplog.text]
    for proc in kernel.side.cluster.kernel_processes(kernel.kernel_id):
        exposed.append(" ".join(proc.cmdline()))
        exposed.append(json.dumps(proc.environ()))
    assert len(exposed) == 2 + 2 * 2  # the launcher and the kernel were both looked at
    for text in exposed:
        for secret in secrets:
            assert secret not in text
    # The one place they are written: the connection file, the kernel's user's only.
    connection_file = kernel.kernel_dir / "kernel.json"
    assert connection_file.stat().st_mode & 0o777 == 0o600
    assert kernel.kernel_dir.stat().st_mode & 0o777 == 0o700  # (+ the sticky bit ipykernel sets)


@on_session_loop
async def test_a_forged_payload_racing_a_launch_is_refused_and_leaves_nothing(
    gateway_side: GatewaySide,  # noqa: F811
) -> None:
    """The attacker answers for a kernel that is starting, before its launcher does (here the
    launcher is held back 2 s by a shell in front of it), with the report's tag as an observer
    of the wire would have it (read here from the gateway: without it the response port reads
    nothing at all). The gateway refuses the forgery (it lacks the launch nonce), the start
    fails, and the real launcher is stopped over SSH."""
    from jupyter_exec.cluster.responses import BoundedResponseManager

    spec = gateway_side.spec()
    spec.argv = ["/bin/sh", "-c", 'sleep 2; exec "$0" "$@"', *spec.argv]
    km = AsyncKernelManager(kernel_name="cluster-test", kernel_spec_manager=OneSpec(spec))
    # Ours, whichever test of the module runs first (the gateway, too, makes ours first).
    manager = BoundedResponseManager.instance()
    host, port = manager.response_address.rsplit(":", 1)
    start = asyncio.ensure_future(km.start_kernel(env={"KERNEL_REMOTE_HOST": "127.0.0.2"}))
    deadline = time.monotonic() + 30
    while km.kernel_id not in manager._tags:
        assert time.monotonic() < deadline, "the launch never registered"
        await asyncio.sleep(0.01)
    tag = manager._tags[km.kernel_id]
    forged = {
        **{name: 1 for name in ("shell_port", "iopub_port", "stdin_port", "hb_port")},
        "control_port": 1,
        "ip": "127.0.0.2",
        "key": "attacker",
        "comm_port": 1,
        "kernel_id": km.kernel_id,
    }
    header = f"{launcher_module.RESPONSE_HEADER} {km.kernel_id} {tag}\n".encode()
    with socket.create_connection((host, int(port))) as attacker:
        attacker.sendall(header + _forged_payload(forged, manager.public_key))
    with pytest.raises(RuntimeError, match="was not sent by its launcher"):
        await start
    assert gateway_side.cluster.wait_no_kernel_processes(km.kernel_id, timeout=5) == []
    assert not gateway_side.kernel_dir(km.kernel_id).exists()


@pytest.mark.parametrize("planted", ["symlink", "file"])
def test_a_link_planted_at_the_kernels_dir_is_refused_and_its_target_untouched(
    tmp_path: Path, planted: str
) -> None:
    """Whoever shares the host user plants ``<work-root>/<kernel id>`` before the launch (a
    link to a directory the launcher would then chmod, fill and later remove)."""
    from Cryptodome.PublicKey import RSA

    pem = RSA.generate(1024).publickey().export_key("PEM").decode()
    public_key = "".join(line for line in pem.splitlines() if "-----" not in line)
    kernel_id = str(uuid.uuid4())
    work_root = tmp_path / "kernels"
    work_root.mkdir(mode=0o700)
    target = tmp_path / "precious"
    target.mkdir(mode=0o755)
    (target / "data.txt").write_text("keep me")
    if planted == "symlink":
        (work_root / kernel_id).symlink_to(target)
    else:
        (work_root / kernel_id).write_text("not a dir")
    done = subprocess.run(
        _launcher_argv(kernel_id, public_key, work_root),
        env={"PATH": os.environ["PATH"], "SSH_CONNECTION": "127.0.0.1 40000 127.0.0.2 22"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "is not a directory of this user (a link or planted file?)" in done.stderr
    assert sorted(p.name for p in target.iterdir()) == ["data.txt"]
    assert (target / "data.txt").read_text() == "keep me"
    assert target.stat().st_mode & 0o777 == 0o755
