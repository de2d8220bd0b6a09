"""The files ``jupyter-exec gateway --write enterprise-gateway`` writes, run by Enterprise Gateway.

Enterprise Gateway 3.3 (its own venv, ``scripts/provision-gateways``) started with the written
``enterprise-gateway.env``, ``jupyter_enterprise_gateway_config.py`` and the
``jupyter_exec_distributed`` kernelspec, its kernels placed on the loopback cluster's hosts over
SSH by its ``DistributedProcessProxy`` and our launcher (tests/cluster/enterprise_gateway.py).
Through it, a jupyter-exec session (the remote backend, EG's URL and token): state across cells,
a plot and changed files brought home, the kernel's log where the docs say, and nothing left on
the hosts after ``close()``; after ``kill -9`` of its kernel, the state saved on the host comes
back. EG offers and starts only the written kernelspec, and only on the
written hosts. Stopped as a process manager stops it (SIGTERM, then SIGKILL after a bound), EG
leaves no kernel, folder or log on the hosts.

One EG serves the module (per xdist worker); the stop test starts one of its own, to stop it,
and the port test one that must not start.
"""

from __future__ import annotations

import ast
import getpass
import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_exec import Session
from tests.cluster.enterprise_gateway import (
    KERNEL,
    EnterpriseGatewayMissing,
    RunningEnterpriseGateway,
    eg_executable,
    launch,
    prepare,
    running_enterprise_gateway,
)
from tests.cluster_gateway import plot_comes_home
from tests.cluster_hosts import Cluster


@pytest.fixture(scope="module")
def eg(
    loopback_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningEnterpriseGateway]:
    try:
        with running_enterprise_gateway(
            loopback_cluster, tmp_path_factory.mktemp("enterprise-gateway")
        ) as running:
            yield running
    except EnterpriseGatewayMissing as exc:
        pytest.skip(str(exc))


def _gone(eg: RunningEnterpriseGateway, cluster: Cluster, kernel_id: str) -> None:
    """No process of the kernel left on its host, and neither its folder nor its log."""
    left = cluster.wait_no_kernel_processes(kernel_id, timeout=10)
    assert not left, [p.cmdline() for p in left]
    left_files = [entry for entry in eg.left_on_hosts() if kernel_id in entry]
    launcher_log = eg.remote_dir / "logs" / f"kernel-{kernel_id}.log"
    said = launcher_log.read_text(errors="replace")[-3000:] if launcher_log.is_file() else ""
    assert not left_files, f"{left_files}\nlauncher:\n{said}\ngateway:\n{eg.log()[-3000:]}"


def test_a_session_through_enterprise_gateway_keeps_state_and_brings_files_home(
    eg: RunningEnterpriseGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    host = loopback_cluster.hosts[1]  # a pin within the written hosts is honoured
    work = tmp_path / "work"
    with Session(
        backend="remote",
        url=eg.url,
        token=eg.token,
        kernel_name=KERNEL,
        work_dir=work,
        host=host,
    ) as s:
        first = s.execute("x = 6 * 7\nimport os\nos.environ['JUPYTER_EXEC_HOST'], os.getcwd()")
        assert first.ok, first.error
        remote_host, remote_cwd = ast.literal_eval(str(first.text))
        assert first.host == remote_host == host
        kernel_id = str(s.kernel_id)
        assert Path(remote_cwd) == eg.remote_dir / "kernels" / kernel_id / "work"
        assert s.execute("x").text == "42"  # state kept between cells
        # The kernel's log goes to <remote dir>/logs (EG's own default: the hosts' /tmp).
        assert (eg.remote_dir / "logs" / f"kernel-{kernel_id}.log").is_file()
        assert not Path(f"/tmp/kernel-{kernel_id}.log").exists()

        plot_comes_home(s, work)

        wrote = s.execute("open('table.csv', 'w').write('a\\n1\\n')")
        assert wrote.ok, wrote.error
        assert (work / "table.csv").read_text() == "a\n1\n"
        changed = s.execute("open('table.csv', 'a').write('2\\n')")
        assert changed.ok, changed.error
        assert [p.name for p in changed.files] == ["table.csv"]  # brought home again
        assert (work / "table.csv").read_text() == "a\n1\n2\n"
        recorded = json.loads(Path(str(s.notebook_path)).read_text())
        assert recorded["metadata"]["jupyter_exec"]["hosts"] == [host]
    _gone(eg, loopback_cluster, kernel_id)


def test_enterprise_gateway_offers_and_starts_only_the_written_kernelspec_on_the_written_hosts(
    eg: RunningEnterpriseGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    # A kernelspec that another install left in EG's kernel path: started, it would run
    # on the gateway's own machine, not on a host. EG's allow-list alone only hides it.
    ran = tmp_path / "planted-kernel-ran"
    planted = eg.folder / "kernels" / "planted"
    planted.mkdir()
    spec = {
        "argv": [sys.executable, "-c", f"open({str(ran)!r}, 'w')", "{connection_file}"],
        "display_name": "planted",
        "language": "python",
    }
    (planted / "kernel.json").write_text(json.dumps(spec))
    user = getpass.getuser()
    started_before = eg.log().count("Kernel started")
    try:
        status, listed = eg.request("GET", "/api/kernelspecs")
        assert status == 200
        assert listed["default"] == KERNEL
        assert set(listed["kernelspecs"]) == {KERNEL}

        status, refused = eg.request(
            "POST", "/api/kernels", {"name": "planted", "env": {"KERNEL_USERNAME": user}}
        )
        assert status == 403, refused
        assert refused["reason"] == (
            f"this gateway runs only the kernelspec {KERNEL!r}, not 'planted'"
        )
        # A pin to this machine's own address would make EG skip SSH and start the launcher
        # here; to any other address, SSH there with the gateway's key (both on loopback).
        for pin in ("127.0.0.1", "127.0.0.9"):
            status, refused = eg.request(
                "POST",
                "/api/kernels",
                {"env": {"KERNEL_USERNAME": user, "KERNEL_REMOTE_HOST": pin}},
            )
            assert status == 400, refused
            assert refused["reason"] == (
                f"KERNEL_REMOTE_HOST={pin!r} is not one of {', '.join(loopback_cluster.hosts)}"
            )
        assert not ran.exists()
        assert eg.left_on_hosts() == []
        assert eg.log().count("Kernel started") == started_before
    finally:
        shutil.rmtree(planted)


def test_stopping_enterprise_gateway_as_a_process_manager_leaves_nothing_on_the_hosts(
    loopback_cluster: Cluster, tmp_path: Path
) -> None:
    try:
        eg_executable()
    except EnterpriseGatewayMissing as exc:
        pytest.skip(str(exc))
    with running_enterprise_gateway(loopback_cluster, tmp_path / "eg") as running:
        kernels = [running.start_kernel() for _ in loopback_cluster.hosts]  # round-robin
        for kernel_id in kernels:
            assert loopback_cluster.kernel_processes(kernel_id)
        assert running.left_on_hosts() == sorted(
            [f"kernels/{k}" for k in kernels] + [f"logs/kernel-{k}.log" for k in kernels]
        )
        how, took = running.stop()
        assert how == "SIGTERM", f"EG ignored SIGTERM for {took:.1f} s"
        assert running.process.returncode == 0, running.log()[-3000:]
    for kernel_id in kernels:
        left = loopback_cluster.wait_no_kernel_processes(kernel_id, timeout=10)
        assert not left, [p.cmdline() for p in left]
    # Each launcher removes its folder and log before it exits: nothing to wait for.
    assert running.left_on_hosts() == [], running.log()[-3000:]


def test_enterprise_gateway_exits_rather_than_move_when_its_port_is_taken(
    loopback_cluster: Cluster, tmp_path: Path
) -> None:
    """With the written ``EG_PORT_RETRIES=0`` EG exits when its port is held, instead of
    taking the next free one and leaving clients (and their token) to whoever holds it."""
    try:
        written = prepare(loopback_cluster, tmp_path)
    except EnterpriseGatewayMissing as exc:
        pytest.skip(str(exc))
    settings = written.settings
    with socket.socket() as squatter:
        squatter.bind((settings.gateway_ip, settings.gateway_port))
        squatter.listen()
        process = launch(loopback_cluster, written, tmp_path, token="never-sent")
        try:
            status = process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        log = (tmp_path / "enterprise-gateway.log").read_text(errors="replace")
        assert status != 0, log[-3000:]
        assert "could not be started because no available port could be found" in log, log


def test_kill_9_of_a_kernel_under_enterprise_gateway_brings_its_state_back(
    eg: RunningEnterpriseGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    """EG restarts a dead kernel under the same id, on its pinned host, in the same folder:
    the state its kernel saved there comes back, as through ``jupyter-exec gateway``."""
    host = loopback_cluster.hosts[0]
    with Session(
        backend="remote", url=eg.url, token=eg.token, kernel_name=KERNEL,
        work_dir=tmp_path / "work", host=host, timeout=180,
    ) as s:  # fmt: skip
        assert s.execute("rows = list(range(100_000))\nmark = 'eg'").ok
        s.flush()
        kernel_id = str(s.kernel_id)

        def kill(event: dict[str, object]) -> None:
            if "running" in str(event.get("text", "")):
                for process in loopback_cluster.kernel_processes(kernel_id):
                    if "ipykernel_launcher" in " ".join(process.cmdline()):
                        process.kill()

        died = s.execute(
            "print('running', flush=True)\nimport time\ntime.sleep(120)", on_output=kill
        )
        assert died.status == "died", died
        assert died.recovered is not None, died.error
        assert s.execute("mark, sum(rows)").text == "('eg', 4999950000)"
        assert s.kernel_id == kernel_id
    _gone(eg, loopback_cluster, kernel_id)
