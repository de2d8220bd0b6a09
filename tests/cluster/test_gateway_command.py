"""``jupyter-exec gateway`` on the loopback cluster: real SSH, the real command, the real server.

One gateway serves the module's placement tests (started by the command in a
subprocess, reached only through what it printed); the refusals and the stop
each run a command of their own.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from jupyter_exec import Session
from jupyter_exec.cli.exits import EXIT_OK, EXIT_TROUBLE, EXIT_USAGE
from tests.cluster_gateway import (
    RunningGateway,
    gateway_environ,
    gateway_once,
    running_gateway,
)
from tests.cluster_hosts import Cluster, free_port

HOST_OF_KERNEL = "import os; os.environ.get('JUPYTER_EXEC_HOST')"


def _get(gateway: RunningGateway, path: str) -> dict[str, object]:
    request = urllib.request.Request(
        gateway.url + path, headers={"Authorization": f"token {gateway.token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.load(response))


def _session(gateway: RunningGateway, tmp_path: Path, **kwargs: object) -> Session:
    return Session(
        backend="remote",
        url=gateway.url,
        token=gateway.token,
        work_dir=tmp_path / f"work-{len(list(tmp_path.iterdir()))}",
        **kwargs,  # type: ignore[arg-type]
    )


def _host(session: Session) -> str:
    value = ast.literal_eval(session.execute(HOST_OF_KERNEL).text or "None")
    assert isinstance(value, str), value
    return value


def test_the_printed_url_and_token_reach_a_gateway_whose_only_kernel_is_the_cluster(
    gateway: RunningGateway, loopback_cluster: Cluster
) -> None:
    printed = gateway.printed()
    for host in loopback_cluster.hosts:  # one line per host, checked before use
        assert f"{host}:{loopback_cluster.port}  ok  Python " in printed
        assert "ipykernel" in printed
    assert gateway.url.startswith("http://127.0.0.1:")
    specs = _get(gateway, "/api/kernelspecs")
    assert specs["default"] == "python3"
    assert list(specs["kernelspecs"]) == ["python3"]  # type: ignore[call-overload]
    spec = specs["kernelspecs"]["python3"]["spec"]  # type: ignore[index]
    provisioner = spec["metadata"]["kernel_provisioner"]
    assert provisioner["provisioner_name"] == "jupyter-exec-distributed"
    assert provisioner["config"]["remote_hosts"] == list(loopback_cluster.hosts)
    assert spec["metadata"]["supported_encryption"] == ["curve"]
    assert "--kernel-id={kernel_id}" in spec["argv"]
    assert f"--work-root={loopback_cluster.remote_dir}/kernels" in spec["argv"]


def test_kernels_start_round_robin_on_both_hosts_and_keep_their_state(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    with _session(gateway, tmp_path) as first, _session(gateway, tmp_path) as second:
        hosts = {_host(first), _host(second)}
        assert hosts == set(loopback_cluster.hosts)  # two launches in a row: one on each
        first.execute("x = 41")
        second.execute("x = 1")
        assert first.execute("x + 1").text == "42"
        assert second.execute("x + 1").text == "2"
        cwd = ast.literal_eval(first.execute("import os; os.getcwd()").text or "''")
        assert cwd.startswith(f"{loopback_cluster.remote_dir}/kernels/")


def test_a_host_is_pinned_with_kernel_remote_host(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    pinned = loopback_cluster.hosts[1]
    for _ in range(2):  # round-robin would place one of two on the other host
        with _session(gateway, tmp_path, env={"KERNEL_REMOTE_HOST": pinned}) as session:
            assert _host(session) == pinned


def test_check_only_checks_and_installs_without_serving(
    loopback_cluster: Cluster,
) -> None:
    done = gateway_once(loopback_cluster, "--allow-this-machine", "--check-only")
    assert done.returncode == EXIT_OK, done.stderr
    assert "token:" not in done.stdout
    lines = [line for line in done.stdout.splitlines() if "  ok  " in line]
    assert len(lines) == 2
    launcher = Path(lines[0].rsplit("launcher ", 1)[1])
    assert launcher.parent == loopback_cluster.remote_dir
    assert launcher.stat().st_mode & 0o777 == 0o700
    source = (Path(__file__).parents[2] / "jupyter_exec" / "cluster" / "launcher.py").read_bytes()
    assert launcher.read_bytes() == source


def _venv_without_ipykernel(where: Path) -> str:
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120
    )
    return str(where / "bin" / "python")


@pytest.mark.parametrize(
    "case",
    [
        "this machine without the flag",
        "127.0.0.1",
        "localhost",
        "unknown host key",
        "interpreter that does not run",
        "no ipykernel",
        "unreachable port",
    ],
)
def test_a_host_that_cannot_be_used_is_refused_clearly_before_any_server_starts(
    case: str, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    cluster = loopback_cluster
    extra: list[str] = ["--allow-this-machine"]
    hosts, home, status = None, None, EXIT_TROUBLE
    if case == "this machine without the flag":
        extra, status, words = [], EXIT_USAGE, ["loopback", "--allow-this-machine"]
    elif case in ("127.0.0.1", "localhost"):
        hosts, status = f"{cluster.hosts[0]},{case}", EXIT_USAGE
        words = ["without SSH", "127.0.0.2"]
    elif case == "unknown host key":
        home = tmp_path / "home"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "id_ed25519").write_bytes(cluster.key_path.read_bytes())
        (home / ".ssh" / "id_ed25519").chmod(0o600)
        words = ["host key is unknown", "ssh-ed25519 SHA256:", "ssh-keyscan", "known_hosts"]
    elif case == "interpreter that does not run":
        extra += ["--python", "/bin/false"]
        words = ["'/bin/false' did not run", "--python"]
    elif case == "no ipykernel":
        extra += ["--python", _venv_without_ipykernel(tmp_path / "venv")]
        words = ["has no ipykernel", "pip install ipykernel"]
    else:
        port = free_port(cluster.hosts[0])
        hosts = cluster.hosts[0]
        extra += ["--ssh-port", str(port)]
        words = ["cannot reach SSH", f"{cluster.hosts[0]}:{port}", "--ssh-port"]
    done = gateway_once(cluster, *extra, hosts=hosts, home=home)
    assert done.returncode == status, (done.stdout, done.stderr)
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("jupyter-exec: error: "), done.stderr
    for word in words:
        assert word in error, error
    assert "token:" not in done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_shuts_every_kernel_down_and_exits_0(
    signum: int, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    with running_gateway(loopback_cluster, tmp_path / "gw") as gateway:
        kernels = []
        for _ in range(2):  # started, never deleted: the gateway's stop must end them
            request = urllib.request.Request(
                gateway.url + "/api/kernels",
                data=b"{}",
                method="POST",
                headers={"Authorization": f"token {gateway.token}"},
            )
            with urllib.request.urlopen(request, timeout=120) as response:
                kernels.append(json.load(response)["id"])
        for kernel_id in kernels:
            assert loopback_cluster.kernel_processes(kernel_id), kernel_id
        assert gateway.stop(signum=signum) == EXIT_OK, gateway.log()[-3000:]
    left = loopback_cluster.wait_no_kernel_processes(timeout=5)
    assert not left, [p.cmdline() for p in left]
    assert "shutting every kernel down" in gateway.log()


def test_jupyter_server_serves_the_same_cluster_with_the_same_token_rule(
    loopback_cluster: Cluster, tmp_path: Path
) -> None:
    token = "a-token-of-my-own-" + "x" * 20  # JUPYTER_EXEC_GATEWAY_TOKEN: used, not echoed
    env = gateway_environ(loopback_cluster, JUPYTER_EXEC_GATEWAY_TOKEN=token)
    with running_gateway(
        loopback_cluster, tmp_path / "gw", "--server", "jupyter-server", env=env
    ) as started:
        assert "jupyter-server on http://127.0.0.1:" in started.printed()
        assert started.token == "$JUPYTER_EXEC_GATEWAY_TOKEN"
        assert token not in started.printed()
        gateway = dataclasses.replace(started, token=token)
        with _session(gateway, tmp_path, env={"KERNEL_REMOTE_HOST": "127.0.0.2"}) as session:
            assert _host(session) == "127.0.0.2"
            session.execute("y = 6")
            assert session.execute("y * 7").text == "42"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(gateway.url + "/api/kernels", timeout=30)
        refused.value.close()
        assert refused.value.code == 403
        assert gateway.token not in gateway.log()
        assert gateway.stop() == EXIT_OK
    assert not loopback_cluster.wait_no_kernel_processes(timeout=5)


def _rest(gateway: RunningGateway, method: str, path: str) -> dict[str, object]:
    request = urllib.request.Request(
        gateway.url + path,
        data=b"{}" if method == "POST" else None,
        method=method,
        headers={"Authorization": f"token {gateway.token}"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        body = response.read()
        return dict(json.loads(body)) if body else {}


def _delete(gateway: RunningGateway, kernel_id: str) -> int:
    try:
        _rest(gateway, "DELETE", f"/api/kernels/{kernel_id}")
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code
    return 204


def _kernels_of(cluster: Cluster, kernel_id: str) -> set[int]:
    """The pids of the ipykernel processes of ``kernel_id`` on the hosts."""
    found = set()
    for process in cluster.kernel_processes(kernel_id):
        with contextlib.suppress(psutil.Error):
            if "ipykernel_launcher" in process.cmdline():
                found.add(process.pid)
    return found


def test_a_kernel_killed_on_its_host_is_noticed_and_restarted_by_the_gateway(
    gateway: RunningGateway, loopback_cluster: Cluster
) -> None:
    kernel_id = str(_rest(gateway, "POST", "/api/kernels")["id"])
    try:
        (pid,) = _kernels_of(loopback_cluster, kernel_id)
        kernel = psutil.Process(pid)
        launched = f"Kernel ID: {kernel_id}"  # the provisioner's line for each launch
        assert gateway.log().count(launched) == 1
        kernel.kill()
        deadline = time.monotonic() + 30
        while gateway.log().count(launched) < 2:  # the restarter's poll saw the death
            assert time.monotonic() < deadline, gateway.log()[-3000:]
            time.sleep(0.05)
        assert "restarting kernel (1/" in gateway.log()
        deadline = time.monotonic() + 60
        while not _kernels_of(loopback_cluster, kernel_id) - {kernel.pid}:  # ... and came back
            assert time.monotonic() < deadline, gateway.log()[-3000:]
            time.sleep(0.1)
    finally:
        # A DELETE while the restart is still under way is answered 500 by jupyter_client's
        # MultiKernelManager (its ``ready`` future is pending); once it is over, it works.
        deadline = time.monotonic() + 60
        while (status := _delete(gateway, kernel_id)) == 500:
            assert time.monotonic() < deadline, gateway.log()[-3000:]
            time.sleep(0.5)
        assert status == 204
    assert not loopback_cluster.wait_no_kernel_processes(kernel_id, timeout=5)


def test_the_generated_configuration_says_what_the_gateway_promises(tmp_path: Path) -> None:
    from jupyter_exec.cluster.gateway import (
        TIME_TO_DEAD,
        GatewayConfig,
        PrivateDirs,
        gateway_env,
        server_config,
    )

    config = GatewayConfig(
        hosts=("127.0.0.2",),
        addresses=("127.0.0.2",),
        ssh_port=2222,
        ssh_user="someone",
        remote_dir="/srv/jx",
        port=8999,
        users=("alice",),
        token="s3cret-token",
    )
    dirs = PrivateDirs(tmp_path)
    text = server_config(config, dirs)
    assert "s3cret-token" not in text  # read from the token file at start, never written here
    assert f"c.KernelRestarter.time_to_dead = {TIME_TO_DEAD!r}" in text
    assert TIME_TO_DEAD <= 1.0  # a death is seen within about a second
    assert "c.KernelManager.transport_encryption = 'required'" in text
    assert "c.KernelManager.autorestart = True" in text
    assert "c.JupyterWebsocketPersonality.list_kernels = True" in text
    assert "c.KernelGatewayApp.ip = '127.0.0.1'" in text
    assert "c.KernelGatewayApp.default_kernel_name = 'python3'" in text
    env = gateway_env(config, dirs, {"JUPYTER_EXEC_GATEWAY_TOKEN": "x", "KG_AUTH_TOKEN": "y"})
    assert "JUPYTER_EXEC_GATEWAY_TOKEN" not in env
    assert "KG_AUTH_TOKEN" not in env
    assert env["GP_RESPONSE_IP"] == "127.0.0.1"
    assert env["GP_SSH_PORT"] == "2222"
    assert env["GP_REMOTE_USER"] == "someone"
    assert env["GP_AUTHORIZED_USERS"].split(",")[1:] == ["alice"]
    assert env["GP_KERNEL_LOG_DIR"] == "/srv/jx/logs"
    assert env["JUPYTER_PATH"] == str(dirs.data)
    # Non-blocking sockets for gateway_provisioners: its default 10 ms timeout makes asyncio's
    # accept block the server's event loop, ~30 ms added to every cell.
    assert env["GP_SOCKET_TIMEOUT"] == "0"


@pytest.mark.parametrize("bad", ["/opt/my python/bin/python", "python3;id", "$(id)", ""])
def test_a_kernelspec_value_that_would_need_shell_quoting_is_refused(bad: str) -> None:
    from jupyter_exec.cluster.spec import kernel_spec
    from jupyter_exec.exceptions import InvalidArgument

    with pytest.raises(InvalidArgument, match="shell quoting"):
        kernel_spec(["h1"], python=bad, launcher="/srv/l.py", work_root="/srv/k")
    with pytest.raises(InvalidArgument, match="shell quoting"):
        kernel_spec(["h1"], python="python3", launcher="/srv/l.py", work_root=bad or "a b")


def test_the_server_still_shuts_its_kernels_down_when_the_command_is_killed(
    loopback_cluster: Cluster, tmp_path: Path
) -> None:
    with running_gateway(loopback_cluster, tmp_path / "gw") as gateway:
        (server,) = psutil.Process(gateway.process.pid).children()
        private = Path(server.cmdline()[-1].split("=", 1)[1]).parent.parent
        kernel_id = str(_rest(gateway, "POST", "/api/kernels")["id"])
        assert loopback_cluster.kernel_processes(kernel_id)
        gateway.process.kill()  # SIGKILL: the command cannot clean up; its server is told to
        gateway.process.wait()
        server.wait(90)  # not our child: its status is not ours to read
        assert not server.is_running()
    assert not loopback_cluster.wait_no_kernel_processes(kernel_id, timeout=5)
    # The killed command could not remove its private dir; nothing secret was left in it.
    assert not (private / "token").exists()
    shutil.rmtree(private)
