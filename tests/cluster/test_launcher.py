"""The launcher on real hosts, started over real SSH by jupyter_client and our provisioner.

No gateway server: an ``AsyncKernelManager`` with the ``jupyter-exec-distributed`` kernelspec
is what Kernel Gateway runs per kernel, so these tests hold the host side on its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import zmq
import zmq.asyncio
from jupyter_client.session import Session

import jupyter_exec.cluster.launcher as launcher_module
from tests.cluster.conftest import StartClusterKernel

on_session_loop = pytest.mark.asyncio(loop_scope="session")
"""gateway_provisioners' ResponseManager lives on the loop it was created on."""

KERNEL_PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


@on_session_loop
async def test_kernels_start_round_robin_on_both_hosts_and_keep_state(
    cluster_kernel: StartClusterKernel,
) -> None:
    first = await cluster_kernel()
    second = await cluster_kernel()
    assert {first.host, second.host} == set(first.side.cluster.hosts)
    for kernel, value in ((first, 1), (second, 2)):
        assert (await kernel.run(f"x = {value}")).error is None
    assert (await first.run("x + 40")).result == "41"
    assert (await second.run("x + 40")).result == "42"
    info = await first.km.provisioner.get_provisioner_info()
    assert info["assigned_host"] == first.host


@on_session_loop
async def test_a_pinned_host_is_used_every_time(cluster_kernel: StartClusterKernel) -> None:
    kernels = [await cluster_kernel(host="127.0.0.3") for _ in range(2)]
    assert [k.host for k in kernels] == ["127.0.0.3", "127.0.0.3"]
    run = await kernels[1].run("import os; print(os.environ['JUPYTER_EXEC_HOST'])")
    assert run.stdout == "127.0.0.3\n"


def _listening(proc: psutil.Process) -> set[tuple[str, int]]:
    return {
        (conn.laddr.ip, conn.laddr.port)
        for conn in proc.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    }


@on_session_loop
async def test_the_kernel_and_listener_ports_are_bound_to_the_hosts_address(
    cluster_kernel: StartClusterKernel,
) -> None:
    kernel = await cluster_kernel(host="127.0.0.2")
    info = kernel.km.get_connection_info()
    kernel_sockets = _listening(psutil.Process(kernel.kernel_pid))
    assert {("127.0.0.2", int(info[name])) for name in KERNEL_PORTS} <= kernel_sockets
    # Besides them only ipykernel's own pipe for subprocess output, on the host's loopback;
    # nothing on every interface.
    assert {ip for ip, _port in kernel_sockets} <= {"127.0.0.2", "127.0.0.1"}
    comm_port = kernel.km.provisioner.comm_port
    assert _listening(kernel.launcher()) == {("127.0.0.2", comm_port)}


@on_session_loop
async def test_cwd_and_temp_dirs_are_the_kernels_own_and_name_the_host(
    cluster_kernel: StartClusterKernel,
) -> None:
    kernel = await cluster_kernel(host="127.0.0.3")
    code = (
        "import os, tempfile\n"
        "print(os.getcwd()); print(tempfile.gettempdir()); print(os.environ['TMP'])\n"
        "print(os.environ['JUPYTER_EXEC_HOST']); print(os.environ['JUPYTER_EXEC_KERNEL_DIR'])\n"
        "open('made-here.txt', 'w').write('hi')"
    )
    cwd, tmpdir, tmp, host, kernel_dir = (await kernel.run(code)).stdout.split()
    assert Path(cwd) == kernel.kernel_dir / "work" == Path(kernel_dir)
    assert Path(tmpdir) == Path(tmp) == kernel.kernel_dir / "tmp"
    assert host == "127.0.0.3"
    for path in (kernel.kernel_dir, Path(cwd), Path(tmpdir)):
        assert path.stat().st_mode & 0o777 == 0o700  # ipykernel may add the sticky bit
    assert (Path(cwd) / "made-here.txt").read_text() == "hi"


@on_session_loop
async def test_interrupt_stops_the_cell_and_keeps_state(
    cluster_kernel: StartClusterKernel,
) -> None:
    kernel = await cluster_kernel()
    await kernel.run("kept = 7")
    msg_id = kernel.kc.execute("import time\nprint('sleeping', flush=True)\ntime.sleep(120)")
    while True:  # interrupt once the cell is surely running
        msg = await kernel.kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            break
    await kernel.km.interrupt_kernel()
    error = None
    while True:
        msg = await kernel.kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "error":
            error = msg["content"]["ename"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    assert error == "KeyboardInterrupt"
    assert (await kernel.run("kept * 6")).result == "42"


@on_session_loop
async def test_kill_9_of_the_kernel_makes_the_launcher_exit_at_once(
    cluster_kernel: StartClusterKernel,
) -> None:
    kernel = await cluster_kernel()
    launcher = kernel.launcher()
    await kernel.run("open('survives.txt', 'w').write('x')")
    os.kill(kernel.kernel_pid, signal.SIGKILL)
    gone, _alive = psutil.wait_procs([launcher], timeout=2)
    assert gone, "the launcher outlived its kernel"
    assert await kernel.km.provisioner.poll() == 0  # the gateway's poll says dead
    assert not await kernel.km.is_alive()
    # A crash is not a shutdown: the work dir stays for a restart of the same kernel id.
    assert (kernel.kernel_dir / "work" / "survives.txt").exists()
    assert kernel.side.cluster.kernel_processes(kernel.kernel_id) == []


@on_session_loop
async def test_a_restart_stays_on_its_host_and_keeps_the_files(
    cluster_kernel: StartClusterKernel,
) -> None:
    kernel = await cluster_kernel()
    host = kernel.host
    await kernel.run("lost = 1\nopen('kept.txt', 'w').write('kept')")
    await kernel.km.restart_kernel()
    kernel.reconnect()  # a restarted kernel has new ports and a new key
    await kernel.ready()
    assert kernel.host == host
    run = await kernel.run("print(open('kept.txt').read()); print('lost' in globals())")
    assert run.stdout == "kept\nFalse\n"
    assert len(kernel.side.cluster.kernel_processes(kernel.kernel_id)) == 2  # launcher, kernel


@on_session_loop
async def test_shutdown_leaves_no_process_and_removes_the_kernel_dir_within_2_s(
    cluster_kernel: StartClusterKernel,
) -> None:
    kernel = await cluster_kernel()
    cluster = kernel.side.cluster
    await kernel.run("import subprocess; child = subprocess.Popen(['sleep', '300'])")
    assert len(cluster.kernel_processes(kernel.kernel_id)) == 3  # launcher, kernel, its child
    assert kernel.kernel_dir.is_dir()
    started = time.monotonic()
    await kernel.shutdown()
    left = cluster.wait_no_kernel_processes(kernel.kernel_id, timeout=2.0)
    while kernel.kernel_dir.exists() and time.monotonic() - started < 2.0:
        await asyncio.sleep(0.05)
    elapsed = time.monotonic() - started
    assert left == []
    assert not kernel.kernel_dir.exists()
    assert elapsed < 2.0


@on_session_loop
async def test_required_transport_encryption_gives_curve_keys_and_ignores_plaintext(
    cluster_kernel: StartClusterKernel,
) -> None:
    kernel = await cluster_kernel(encryption="required")
    info = kernel.km.get_connection_info()
    assert len(info["curve_publickey"]) == len(info["curve_secretkey"]) == 40
    assert (await kernel.run("6 * 7")).result == "42"  # the curve client works
    # A plaintext client, even one holding the HMAC key, gets no reply.
    session = Session(key=info["key"], signature_scheme=info["signature_scheme"])
    context = zmq.asyncio.Context()
    sock = context.socket(zmq.DEALER)
    sock.linger = 0
    try:
        sock.connect(f"tcp://{kernel.host}:{info['shell_port']}")
        session.send(sock, "kernel_info_request", {})
        assert await sock.poll(2000) == 0
    finally:
        sock.close()
        context.term()


def _run_launcher(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, launcher_module.__file__, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env if env is not None else {"PATH": os.environ["PATH"]},
        check=False,
    )


_KEY = base64.b64encode(b"not a key").decode()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "the following arguments are required: --kernel-id"),
        (["--kernel-id", "nope"], "--kernel-id must be a UUID"),
        (["--response-address", "127.0.0.1"], "--response-address must be HOST:PORT"),
        (["--port-range", "9..1"], "--port-range 9..1 is not a range"),
        (["--transport-encryption", "maybe"], "--transport-encryption must be one of"),
        (["--work-root", "relative/dir"], "--work-root must be an absolute path"),
        (["--public-key", "%%%"], "--public-key is not base64"),
        (["--public-key", _KEY], "--public-key is not an RSA public key"),
        (["--ip", "0.0.0.0"], "would listen on every interface"),
        ([], "no address to bind: not started over SSH"),
    ],
)
def test_malformed_launcher_arguments_fail_with_a_clear_message(
    tmp_path: Path, args: list[str], message: str
) -> None:
    good = {
        "--kernel-id": "0b4ee1b4-8c4a-4ad4-9d4f-2a5b5b8e9d11",
        "--response-address": "127.0.0.1:9",
        "--public-key": _valid_public_key(),
        "--work-root": str(tmp_path / "root"),
    }
    if args:
        good[args[0]] = args[1]
    argv = [] if "required" in message else [part for pair in good.items() for part in pair]
    done = _run_launcher(*argv)
    assert done.returncode == 2
    assert message in done.stderr
    assert "jupyter-exec-launcher: error:" in done.stderr
    assert not (tmp_path / "root").exists()


def _valid_public_key() -> str:
    from Cryptodome.PublicKey import RSA

    pem = RSA.generate(1024).publickey().export_key("PEM").decode()
    return "".join(line for line in pem.splitlines() if "-----" not in line)


def test_the_payload_made_with_cryptography_opens_with_the_gateways_key() -> None:
    """Hosts may have ``cryptography`` instead of pycryptodomex: the payload is the same."""
    import json

    from Cryptodome.Cipher import AES, PKCS1_v1_5
    from Cryptodome.PublicKey import RSA
    from Cryptodome.Util.Padding import unpad
    from cryptography.hazmat.primitives.serialization import load_der_public_key

    private = RSA.generate(1024)
    der = private.publickey().export_key("DER")
    key = load_der_public_key(der)
    wrapped, body = launcher_module._encrypt_with_cryptography(key, b"k" * 16, b'{"a": 1}')
    aes_key = PKCS1_v1_5.new(private).decrypt(wrapped, b"")
    assert unpad(AES.new(aes_key, AES.MODE_ECB).decrypt(body), 16) == b'{"a": 1}'
    payload = json.loads(
        base64.b64decode(launcher_module.encrypt_payload({"b": 2}, base64.b64encode(der).decode()))
    )
    assert payload["version"] == 1
    assert set(payload) == {"version", "key", "conn_info"}


def test_the_launcher_imports_nothing_from_jupyter_exec() -> None:
    """It is copied to hosts that have no jupyter-exec: the standard library, pyzmq and a
    crypto library only (the tests above run the copy, from outside the package)."""
    import ast

    tree = ast.parse(Path(launcher_module.__file__).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names)
    assert third_party == {"Cryptodome", "cryptography", "zmq"}


def test_the_listener_wants_a_token_unless_started_by_enterprise_gateway() -> None:
    common = ["--response-address", "127.0.0.1:9", "--public-key", _valid_public_key()]
    kernel_id = "0b4ee1b4-8c4a-4ad4-9d4f-2a5b5b8e9d11"
    ours = launcher_module.parse_args(["--kernel-id", kernel_id, "--work-root", "/srv/k", *common])
    eg = launcher_module.parse_args(
        ["--RemoteProcessProxy.kernel-id", kernel_id, "--work-root", "/srv/k", *common]
    )
    explicit = launcher_module.parse_args(
        ["--kernel-id", kernel_id, "--work-root", "/srv/k", "--listener-auth", "address", *common]
    )
    assert (ours.listener_auth, eg.listener_auth, explicit.listener_auth) == (
        "token",
        "address",
        "address",
    )
    token = launcher_module.listener_token(b"k" * 64)
    assert (
        token == launcher_module.listener_token(b"k" * 64) != launcher_module.listener_token(b"j")
    )


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["KILL", "TERM"])
@pytest.mark.parametrize(
    ("spelling", "removes"), [("--RemoteProcessProxy.kernel-id", True), ("--kernel-id", False)]
)
def test_a_listener_sigkill_is_the_shutdown_only_under_enterprise_gateway(
    spelling: str, removes: bool, signum: int, tmp_path: Path
) -> None:
    """EG's kill() is a {"signum": 15}, then 9 if the kernel outlives it, never followed by a
    shutdown request: under EG's spellings either removes the kernel's folder (at once: EG
    kills the launcher right after); under ours (a restart may follow) the folder is kept."""
    kernel_id = "0b4ee1b4-8c4a-4ad4-9d4f-2a5b5b8e9d11"
    opts = launcher_module.parse_args(
        [
            spelling,
            kernel_id,
            "--work-root",
            str(tmp_path),
            "--response-address",
            "127.0.0.1:9",
            "--public-key",
            _valid_public_key(),
        ]
    )
    dirs = launcher_module.KernelDirs.make(tmp_path, kernel_id)
    launcher = launcher_module.Launcher(opts, "127.0.0.2", "127.0.0.1", dirs)
    gateway, listener_side = socket.socketpair()
    with gateway, listener_side:
        gateway.sendall(json.dumps({"signum": signum}).encode())
        gateway.shutdown(socket.SHUT_WR)
        launcher.handle_request(listener_side, "127.0.0.1", now=100.0)
    assert launcher.remove_dir is removes
    assert (launcher.stop_at is not None) is removes
    assert dirs.root.exists() is not removes
