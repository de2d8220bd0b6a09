"""``jupyter-exec gateway`` on the loopback cluster: real SSH, the real command, the real server.

One gateway serves the module's placement tests (started by the command in a
subprocess, reached only through what it printed); the refusals and the stop
each run a command of their own.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_exec import Session
from jupyter_exec.cli.exits import EXIT_OK, EXIT_TROUBLE, EXIT_USAGE
from tests.cluster_gateway import RunningGateway, gateway_once, running_gateway
from tests.cluster_hosts import Cluster, free_port

HOST_OF_KERNEL = "import os; os.environ.get('JUPYTER_EXEC_HOST')"


@pytest.fixture(scope="module")
def gateway(
    loopback_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    with running_gateway(loopback_cluster, tmp_path_factory.mktemp("gateway")) as running:
        yield running


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
        words = ["host key is unknown", "ssh-keyscan", "known_hosts"]
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


def test_sigterm_shuts_every_kernel_down_and_exits_0(
    loopback_cluster: Cluster, tmp_path: Path
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
        assert gateway.stop() == EXIT_OK, gateway.log()[-3000:]
    left = loopback_cluster.wait_no_kernel_processes(timeout=5)
    assert not left, [p.cmdline() for p in left]
    assert "shutting every kernel down" in gateway.log()
