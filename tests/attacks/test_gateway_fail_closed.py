"""Attacks on how ``jupyter-exec gateway`` starts and takes launches: it fails closed.

The attacker is another local process. It squats the gateway's port before the command starts
and answers like a Kernel Gateway, hoping to be sent the token; it breaks the token file so the
generated config cannot load, hoping the server then starts with its defaults (no token); it
holds the response port with an idle connection or floods it, hoping to stop every launch or
to grow the gateway; it makes a launch time out, hoping the kernel's folder stays on the host.
Each attempt is refused and the asset (the token, the gateway's launches, its memory, the host)
is untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from jupyter_client.manager import AsyncKernelManager

from jupyter_exec import Session
from jupyter_exec.cluster.gateway import (
    CONFIG_FAILED,
    PROOF_PATH,
    GatewayConfig,
    GatewayProcess,
    free_port,
    gateway_env,
    port_is_taken,
    private_dirs,
    server_config,
)
from jupyter_exec.cluster.spec import kernel_spec, write_kernel_spec
from jupyter_exec.engine.kernel import OneSpec
from jupyter_exec.exceptions import BackendError
from tests.cluster.conftest import (  # noqa: F401  (fixtures, used by name)
    _gateway_environ,
    gateway_side,
    loopback_cluster,
)
from tests.cluster.kernels import GatewaySide
from tests.cluster_gateway import (
    START_TIMEOUT,
    RunningGateway,
    gateway_argv,
    gateway_environ,
)
from tests.cluster_hosts import Cluster

on_session_loop = pytest.mark.asyncio(loop_scope="session")
"""gateway_provisioners' ResponseManager lives on the loop it was created on."""

KERNELSPECS = {"default": "python3", "kernelspecs": {"python3": {"name": "python3", "spec": {}}}}


class Squatter:
    """An HTTP server on the gateway's port before the gateway: answers every request as a
    Kernel Gateway with a ``python3`` kernelspec would, and records every request it gets."""

    def __init__(self, port: int) -> None:
        self.requests: list[str] = []
        seen = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode("latin-1") if length else ""
                seen.append(f"{self.command} {self.path}\n{self.headers}\n{body}")
                data = json.dumps(KERNELSPECS).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Squatter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _environ(cluster: Cluster) -> dict[str, str]:
    return {**os.environ, "HOME": str(cluster.home)}


def _config(cluster: Cluster, port: int, token: str) -> GatewayConfig:
    return GatewayConfig(
        hosts=cluster.hosts,
        addresses=cluster.hosts,
        ssh_port=cluster.port,
        ssh_user=cluster.user,
        remote_dir=str(cluster.remote_dir),
        port=port,
        token=token,
    )


@contextlib.contextmanager
def _gateway_process(cluster: Cluster, port: int, token: str) -> Iterator[GatewayProcess]:
    """The command's server part on its own (the hosts were checked by other tests)."""
    config = _config(cluster, port, token)
    with private_dirs() as dirs:
        spec = kernel_spec(
            config.hosts,
            python=cluster.python,
            launcher=str(cluster.remote_dir / "launcher.py"),
            work_root=str(cluster.remote_dir / "kernels"),
        )
        write_kernel_spec(dirs.kernels, spec)
        gateway = GatewayProcess(config, dirs)
        try:
            yield gateway
        finally:
            gateway.stop(grace=30)


def test_a_process_squatting_the_gateway_port_never_receives_the_token(
    loopback_cluster: Cluster,  # noqa: F811
) -> None:
    token = secrets.token_urlsafe(32)
    port = free_port()
    with Squatter(port) as squatter:
        done = subprocess.run(
            gateway_argv(loopback_cluster, "--allow-this-machine", "--port", str(port)),
            env=gateway_environ(loopback_cluster, JUPYTER_EXEC_GATEWAY_TOKEN=token),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=START_TIMEOUT,
            check=False,
        )
        assert done.returncode != 0, done.stdout
        assert f"127.0.0.1:{port}" in done.stderr, done.stderr
        assert "held by another process" in done.stderr, done.stderr
        assert "url:" not in done.stdout  # nothing was announced
        assert all(token not in request for request in squatter.requests), squatter.requests
        assert token not in done.stdout + done.stderr


def test_a_squatter_that_wins_the_race_after_the_check_is_never_sent_the_token(
    loopback_cluster: Cluster,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The port was free when the command checked it; the squatter took it before the server
    could. Whatever answers there must prove it read our config before the token goes out."""
    import jupyter_exec.cluster.gateway as gateway_module

    token = secrets.token_urlsafe(32)
    port = free_port()
    monkeypatch.setattr(gateway_module, "refuse_taken_port", lambda *args: None)
    with (
        Squatter(port) as squatter,
        _gateway_process(loopback_cluster, port, token) as gateway,
    ):
        gateway.start(gateway_env(gateway.config, gateway.dirs, _environ(loopback_cluster)))
        with pytest.raises(BackendError, match=f"port 127.0.0.1:{port} is"):
            gateway.wait_ready(timeout=START_TIMEOUT)
        assert squatter.requests  # it was asked, and answered like a gateway
        for request in squatter.requests:
            assert token not in request, request
            assert request.startswith(f"GET {PROOF_PATH}?challenge="), request
        assert not gateway.dirs.token_file.exists()


def test_a_process_squatting_the_response_port_makes_the_server_refuse_to_start(
    loopback_cluster: Cluster,  # noqa: F811
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The squatter takes the response port the command chose: launchers would report the
    kernels' connection info to it. The server says which port and does not start."""
    token = secrets.token_urlsafe(32)
    port = free_port()
    with _gateway_process(loopback_cluster, port, token) as gateway:
        env = gateway_env(gateway.config, gateway.dirs, _environ(loopback_cluster))
        response_port = int(env["GP_RESPONSE_PORT"])
        with socket.create_server(("127.0.0.1", response_port)) as squatter:
            gateway.start(env)  # the server logs to this process's stderr (captured)
            with pytest.raises(BackendError, match="refused to start"):
                gateway.wait_ready(timeout=START_TIMEOUT)
            squatter.settimeout(0.1)
            with pytest.raises(TimeoutError):
                squatter.accept()  # nothing was sent to it
        text = capfd.readouterr().err
        assert f"response port 127.0.0.1:{response_port} is held by another process" in text
        assert token not in text
    assert not port_is_taken("127.0.0.1", port)


@pytest.mark.parametrize("broken", ["token file missing", "token file garbage", "no config"])
def test_a_server_whose_config_cannot_load_exits_instead_of_serving_with_defaults(
    loopback_cluster: Cluster,  # noqa: F811
    broken: str,
) -> None:
    token = secrets.token_urlsafe(32)
    port = free_port()
    default_port_was_free = not port_is_taken("127.0.0.1", 8888)
    with _gateway_process(loopback_cluster, port, token) as gateway:
        dirs = gateway.dirs
        env = gateway_env(gateway.config, dirs, _environ(loopback_cluster))
        # What the command writes, then the attacker's change to it.
        if broken != "no config":
            dirs.config_file.write_text(server_config(gateway.config, dirs), encoding="utf-8")
        if broken == "token file garbage":
            dirs.token_file.write_text("not json", encoding="utf-8")
        log_path = dirs.root / "server.log"
        with log_path.open("wb") as log_file:
            server = subprocess.Popen(
                gateway.argv(),
                env=env,
                cwd=dirs.server_root,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        listening: set[int] = set()
        deadline = time.monotonic() + START_TIMEOUT
        while server.poll() is None:  # every port it listens on, while it runs
            with contextlib.suppress(psutil.Error):
                listening |= {
                    c.laddr.port
                    for c in psutil.Process(server.pid).net_connections("inet")
                    if c.status == psutil.CONN_LISTEN
                }
            if time.monotonic() > deadline:
                server.kill()
                server.wait()
                pytest.fail(f"the server served with a broken config on {listening}")
            time.sleep(0.02)
        log = log_path.read_text(encoding="utf-8", errors="replace")
        assert server.returncode == CONFIG_FAILED, log
        assert "the server does not start" in log
        assert token not in log
        assert port not in listening, listening
        assert 8888 not in listening, listening
    assert not port_is_taken("127.0.0.1", port)
    if default_port_was_free:
        assert not port_is_taken("127.0.0.1", 8888)


# -- the response port ------------------------------------------------------------------------


def _server(gateway: RunningGateway) -> psutil.Process:
    (server,) = psutil.Process(gateway.process.pid).children()
    return server


def _response_port(gateway: RunningGateway) -> int:
    http_port = int(gateway.url.rsplit(":", 1)[1])
    ports = {
        c.laddr.port
        for c in _server(gateway).net_connections("inet")
        if c.status == psutil.CONN_LISTEN and c.laddr.port != http_port
    }
    assert len(ports) == 1, ports
    return int(ports.pop())


def _start_and_run(gateway: RunningGateway, work: Path) -> float:
    started = time.monotonic()
    with Session(backend="remote", url=gateway.url, token=gateway.token, work_dir=work) as s:
        assert s.execute("1 + 1").text == "2"
    return time.monotonic() - started


def test_an_idle_connection_and_a_flood_on_the_response_port_stop_no_launch(
    gateway: RunningGateway, tmp_path: Path
) -> None:
    port = _response_port(gateway)
    normal = _start_and_run(gateway, tmp_path / "warm")  # also settles the server's memory
    server = _server(gateway)
    rss_before = server.memory_info().rss
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    flood_sent = [0]
    flooding = threading.Event()

    def flood() -> None:
        chunk = b"A" * (1 << 20)
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)) as s:
            flooding.set()
            while flood_sent[0] < 50 * (1 << 20):
                s.sendall(chunk)
                flood_sent[0] += len(chunk)
        flooding.set()

    flooder = threading.Thread(target=flood)
    flooder.start()
    try:
        assert flooding.wait(30)
        # A launch while the attacker holds the port: it starts and runs a cell, within the
        # gateway's launch timeout (30 s), and near its normal time.
        attacked = _start_and_run(gateway, tmp_path / "attacked")
        flooder.join(60)
        assert not flooder.is_alive()
        assert attacked < max(3 * normal, normal + 10), (attacked, normal)
    finally:
        for s in idle:
            s.close()
    assert flood_sent[0] < 50 * (1 << 20)  # the gateway cut the flood short
    grown = server.memory_info().rss - rss_before
    assert grown < 8 * (1 << 20), f"the gateway grew {grown / (1 << 20):.1f} MB"


# -- a launch that times out ------------------------------------------------------------------


@on_session_loop
async def test_a_launch_that_times_out_leaves_no_kernel_folder_on_the_host(
    gateway_side: GatewaySide,  # noqa: F811
) -> None:
    """The launcher's report goes to a port that takes it and never reads (the attacker's),
    so the gateway never hears from it and gives up: the launcher is stopped and the folder
    it made on the host is removed."""
    black_hole = socket.socket()
    black_hole.bind(("127.0.0.1", 0))
    black_hole.listen(8)
    address = f"127.0.0.1:{black_hole.getsockname()[1]}"
    spec = gateway_side.spec()
    spec.argv = [address if arg == "{response_address}" else arg for arg in spec.argv]
    # The work root written as the gateway's own kernelspec writes it (one argument).
    at = spec.argv.index("--work-root")
    spec.argv[at : at + 2] = [f"--work-root={spec.argv[at + 1]}"]
    spec.metadata["kernel_provisioner"]["config"]["launch_timeout"] = 5
    km = AsyncKernelManager(kernel_name="cluster-test", kernel_spec_manager=OneSpec(spec))
    start = asyncio.ensure_future(km.start_kernel(env={"KERNEL_REMOTE_HOST": "127.0.0.2"}))
    try:
        seen = False
        while not start.done():
            kernel_id = km.kernel_id
            seen = seen or (kernel_id is not None and gateway_side.kernel_dir(kernel_id).is_dir())
            await asyncio.sleep(0.05)
        assert seen, "the launcher never made the kernel's folder"
        with pytest.raises(TimeoutError, match="launch timeout"):
            await start
        kernel_id = str(km.kernel_id)
        assert gateway_side.cluster.wait_no_kernel_processes(kernel_id, timeout=10) == []
        assert not gateway_side.kernel_dir(kernel_id).exists()
        assert not (gateway_side.cluster.log_dir / f"kernel-{kernel_id}.log").exists()
    finally:
        black_hole.close()


def test_the_command_and_the_server_agree_on_the_exit_status_and_route() -> None:
    from jupyter_exec.cluster import proof

    assert proof.CONFIG_FAILED == CONFIG_FAILED
    assert proof.PROOF_PATH == PROOF_PATH
    assert proof.__name__ == sys.modules["jupyter_exec.cluster.gateway"].PROOF_MODULE
