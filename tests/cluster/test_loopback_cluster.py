"""The loopback cluster itself: both hosts answer SSH as a gateway would reach them.

paramiko with the fixture's HOME (its key, its known_hosts) and ``RejectPolicy``, the same way
gateway_provisioners connects; an unknown host key is refused, so the known_hosts is what lets
the connection through.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import time
from pathlib import Path

import paramiko
import psutil
import pytest

from jupyter_exec.cluster.hosts import (
    SSHTarget,
    connect,
    install_launcher,
    launcher_source,
    remote_home,
)
from jupyter_exec.exceptions import BackendError
from tests.cluster_hosts import Cluster, start_cluster


def _connect(client: paramiko.SSHClient, cluster: Cluster, host: str) -> None:
    """Log in with the cluster's own key only (no agent, no ~/.ssh), as the fixture set it up."""
    client.connect(
        host,
        port=cluster.port,
        username=cluster.user,
        key_filename=str(cluster.key_path),
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
    )


def _client(cluster: Cluster, known_hosts: Path | None) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    if known_hosts is not None:
        client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return client


@pytest.mark.parametrize("host", ["127.0.0.2", "127.0.0.3"])
def test_each_host_runs_a_command_over_ssh(loopback_cluster: Cluster, host: str) -> None:
    cluster = loopback_cluster
    assert host in cluster.hosts
    assert cluster.port != 22
    client = _client(cluster, cluster.known_hosts)
    try:
        _connect(client, cluster, host)
        _stdin, stdout, _stderr = client.exec_command(
            'echo "$SSH_CONNECTION"; echo "$HOME"; id -un', timeout=10
        )
        connection, home, user = stdout.read().decode().split("\n")[:3]
        assert stdout.channel.recv_exit_status() == 0
    finally:
        client.close()
    # The server address the session sees is the host's own: what the launcher binds to.
    assert connection.split()[2:] == [host, str(cluster.port)]
    assert user == cluster.user
    assert Path(home).is_relative_to(cluster.remote_dir)


def test_gateway_home_is_what_paramiko_reads(
    loopback_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With only HOME set (as gateway_provisioners does it: system host keys, default key
    files), both hosts are reachable."""
    cluster = loopback_cluster
    for name, value in cluster.gateway_env().items():
        monkeypatch.setenv(name, value)
    for host in cluster.hosts:
        client = paramiko.SSHClient()
        client.load_system_host_keys()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(host, port=cluster.port, username=cluster.user, timeout=10)
            _stdin, stdout, _stderr = client.exec_command("echo ok", timeout=10)
            assert stdout.read() == b"ok\n"
        finally:
            client.close()


def test_an_unknown_host_key_is_refused(loopback_cluster: Cluster) -> None:
    client = _client(loopback_cluster, known_hosts=None)
    try:
        with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
            _connect(client, loopback_cluster, loopback_cluster.hosts[0])
    finally:
        client.close()


def test_sshd_listens_on_loopback_only(loopback_cluster: Cluster) -> None:
    addresses = set()
    for proc in psutil.Process(loopback_cluster.reaper_pid).children():
        try:  # sshd's per-connection processes come and go
            conns = proc.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        addresses |= {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}
    assert addresses == set(loopback_cluster.hosts)
    assert all(ipaddress.ip_address(a).is_loopback for a in addresses)


def test_orphans_of_the_hosts_are_listed_and_reaped(loopback_cluster: Cluster) -> None:
    """A process left running by an SSH session (as a launcher is) belongs to the subreaper,
    is listed by kernel_processes, and is gone from the list once it ends."""
    cluster = loopback_cluster
    kernel_id = "6f1c9a52-1d0e-4a3b-9c55-3e0d8f2b7a10"
    client = _client(cluster, cluster.known_hosts)
    try:
        _connect(client, cluster, cluster.hosts[1])
        _stdin, stdout, _stderr = client.exec_command(
            f'export KERNEL_ID="{kernel_id}"; nohup sleep 30 >/dev/null 2>&1 </dev/null & echo $!',
            timeout=10,
        )
        pid = int(stdout.read().decode().strip())
    finally:
        client.close()
    try:
        # ``$!`` is known at the fork; the KERNEL_ID the shell exported is in the child's
        # environment only once it has run nohup. Wait for that, never for the clock.
        assert _exec_done(pid, "sleep"), f"the orphan {pid} never ran sleep"
        listed = cluster.kernel_processes(kernel_id)
        assert [p.pid for p in listed] == [pid]
        assert pid in [p.pid for p in psutil.Process(cluster.reaper_pid).children(recursive=True)]
        assert cluster.kernel_processes("00000000-0000-0000-0000-000000000000") == []
    finally:
        with contextlib.suppress(ProcessLookupError):  # never left for the next test to find
            os.kill(pid, 9)
    assert cluster.wait_no_kernel_processes(kernel_id) == []


def _exec_done(pid: int, program: str, timeout: float = 30.0) -> bool:
    """Whether process ``pid`` came to run ``program`` within ``timeout`` (its command line
    changes at the exec; the poll only spaces out the looks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if program in psutil.Process(pid).cmdline():
                return True
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False
        time.sleep(0.02)
    return False


def test_a_host_whose_sshd_offers_no_sftp_is_told_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher goes to a host by SFTP: an sshd without the subsystem is named as the
    cause and the fix, not paramiko's "Channel closed." (an sshd of its own, on 127.0.0.4)."""
    cluster = start_cluster(tmp_path / "no-sftp", hosts=("127.0.0.4",), sftp=False)
    try:
        monkeypatch.setenv("HOME", str(cluster.home))  # the gateway side's keys and known_hosts
        target = SSHTarget("127.0.0.4", "127.0.0.4", cluster.port, cluster.user)
        with connect(target) as client:
            with pytest.raises(BackendError, match="offers no SFTP") as info:
                install_launcher(client, target, str(cluster.remote_dir), launcher_source())
            assert "Subsystem sftp" in str(info.value)
            with pytest.raises(BackendError, match="offers no SFTP"):
                remote_home(client, target)
    finally:
        cluster.stop()
