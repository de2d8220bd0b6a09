"""Sessions spread over the loopback cluster, as a user runs them: ``jupyter-exec gateway`` on two
SSH hosts, and ``Session(backend="remote", url=..., host=...)`` on this side.

What the issue asks of many machines, each on real SSH, real kernels and the real gateway:
round-robin and pinned placement recorded on every Execution and in the notebook, state, plots
saved here, files written on the host brought home, a timeout that interrupts and keeps state,
``kill -9`` of the remote kernel (a ``died`` Execution within seconds, the next cell runs on a
kernel the session reconnected to, with the state saved on its host), ``close()`` leaving no
process on any host within 2 s, and every socket the session opened on loopback.
"""

from __future__ import annotations

import ast
import ipaddress
import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from jupyter_exec import Session, SessionManager
from tests.cluster_gateway import RunningGateway, plot_comes_home
from tests.cluster_hosts import Cluster


def _session(gateway: RunningGateway, work: Path, **kwargs: object) -> Session:
    return Session(
        backend="remote",
        url=gateway.url,
        token=gateway.token,
        work_dir=work,
        **kwargs,  # type: ignore[arg-type]
    )


def _wait_gone(cluster: Cluster, kernel_id: str, within: float) -> list[psutil.Process]:
    deadline = time.monotonic() + within
    while (left := cluster.kernel_processes(kernel_id)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_sessions_go_round_robin_and_record_where_they_ran(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    hosts: list[str] = []
    for n in range(4):
        with _session(gateway, tmp_path / f"s{n}") as s:
            ran = s.execute("x = 6 * 7")
            assert ran.ok, ran.error
            assert ran.host in loopback_cluster.hosts
            assert s.execute("x").text == "42"  # state kept between cells
            hosts.append(str(ran.host))
            recorded = json.loads(Path(str(s.notebook_path)).read_text())
            assert recorded["metadata"]["jupyter_exec"]["hosts"] == [ran.host]
            assert recorded["cells"][0]["metadata"]["jupyter_exec"]["host"] == ran.host
    assert set(hosts) == set(loopback_cluster.hosts)  # both hosts used
    assert all(hosts[i] != hosts[i + 1] for i in range(3))  # one after the other


@pytest.mark.parametrize("host", ["127.0.0.2", "127.0.0.3"])
def test_a_pinned_session_runs_on_its_host_with_plots_and_files_brought_home(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path, host: str
) -> None:
    work = tmp_path / "work"
    with _session(gateway, work, host=host, name="pinned") as s:
        where = s.execute("import os; os.environ['JUPYTER_EXEC_HOST'], os.getcwd()")
        assert where.host == host
        remote_host, remote_cwd = ast.literal_eval(str(where.text))
        assert remote_host == host
        assert Path(remote_cwd) != work.absolute()  # the kernel works in a folder of its own
        plot_comes_home(s, work)
        wrote = s.execute(
            "import pandas as pd\n"
            "pd.DataFrame({'a': [1, 2]}).to_csv('table.csv', index=False)\n"
            "os.makedirs('out', exist_ok=True)\n"
            "open('out/notes.txt', 'w').write('written on ' + os.environ['JUPYTER_EXEC_HOST'])"
        )
        assert wrote.ok, wrote.error
        assert sorted(p.relative_to(work.absolute()).as_posix() for p in wrote.files) == [
            "out/notes.txt",
            "table.csv",
        ]
        assert (work / "table.csv").read_text() == "a\n1\n2\n"
        assert (work / "out" / "notes.txt").read_text() == f"written on {host}"
        assert Path(remote_cwd, "table.csv").exists()  # (the same machine, here)


def test_a_timeout_interrupts_the_remote_kernel_and_keeps_state(
    gateway: RunningGateway, tmp_path: Path
) -> None:
    with _session(gateway, tmp_path / "w") as s:
        s.execute("kept = 'yes'")
        slow = s.execute("import time; time.sleep(60)", timeout=1)
        assert slow.status == "timeout"
        assert not slow.state_lost
        assert s.execute("kept").text == "'yes'"


def test_kill_9_of_the_remote_kernel_is_a_died_execution_and_the_next_cell_runs(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    with _session(gateway, tmp_path / "w", timeout=120) as s:
        assert s.execute("before = 1").ok
        kernel_id = str(s.kernel_id)
        victim = loopback_cluster.kernel_process(kernel_id)
        # A cell running when the kernel dies (the kill comes from another thread)...
        started = time.monotonic()
        killer = threading.Timer(0.5, os.kill, (victim.pid, signal.SIGKILL))
        killer.start()
        try:
            died = s.execute("import time; time.sleep(30)")
        finally:
            killer.join()
        took = time.monotonic() - started
        assert died.status == "died", died
        assert died.state_lost
        assert took < 20, f"the death took {took:.1f} s to be noticed and recovered"
        # ...and the next cell runs, on the restarted kernel, without a second restart.
        after = s.execute("'alive'")
        assert after.text == "'alive'", after.error
        assert after.host in loopback_cluster.hosts
        assert died.recovered is not None  # the state saved on its host came back
        assert s.execute("before").text == "1"
        assert s.kernel_id == kernel_id  # the same kernel id, reconnected
        launches = [
            line
            for line in gateway.log().splitlines()
            if "kernel launched" in line and kernel_id in line
        ]
        assert len(launches) == 2, launches  # its start and the server's one restart
        assert len([p for p in loopback_cluster.kernel_processes(kernel_id)]) >= 1
    assert _wait_gone(loopback_cluster, kernel_id, 2.0) == []


def test_kill_9_while_idle_then_the_next_cells_run(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    with _session(gateway, tmp_path / "w") as s:
        assert s.execute("x = 1").ok
        os.kill(loopback_cluster.kernel_process(str(s.kernel_id)).pid, signal.SIGKILL)
        first = s.execute("1 + 1")
        assert first.status in ("died", "ok")  # died if sent to the dead kernel, else ran
        second = s.execute("2 + 2")
        assert second.text == "4", second.error
        assert s.execute("3 + 3").text == "6"


def test_a_kernel_whose_host_cannot_be_reached_restarts_on_the_other_host(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    """The kernel's host drops out of the gateway's reach (here: its host key is withdrawn,
    so SSH to it is refused), then the kernel dies: the restart goes to the other host."""
    known = loopback_cluster.known_hosts
    saved = known.read_text()
    with _session(gateway, tmp_path / "w", timeout=120) as s:
        host = str(s.execute("x = 1").host)
        other = next(h for h in loopback_cluster.hosts if h != host)
        try:
            known.write_text(
                "".join(line for line in saved.splitlines(True) if f"[{host}]" not in line)
            )
            os.kill(loopback_cluster.kernel_process(str(s.kernel_id)).pid, signal.SIGKILL)
            died = s.execute("import time; time.sleep(30)")
            assert died.status == "died"
            after = s.execute("'moved'")
        finally:
            known.write_text(saved)
        assert after.text == "'moved'", after.error
        assert after.host == other
        recorded = json.loads(Path(str(s.notebook_path)).read_text())
        assert recorded["metadata"]["jupyter_exec"]["hosts"] == [host, other]
    assert "cannot be reached" in gateway.log()


def test_close_leaves_no_process_on_any_host_within_2_s(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    ids = []
    sessions = [_session(gateway, tmp_path / f"w{n}") for n in range(2)]
    for s in sessions:
        assert s.execute("import numpy; 1").ok
        ids.append(str(s.kernel_id))
        assert loopback_cluster.kernel_processes(ids[-1])
    for s, kernel_id in zip(sessions, ids, strict=True):
        s.close()
        assert _wait_gone(loopback_cluster, kernel_id, 2.0) == [], kernel_id


def test_every_socket_a_session_opens_is_on_loopback(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    me = psutil.Process()
    with _session(gateway, tmp_path / "w") as s:
        ran = s.execute("1")
        assert ran.ok
        ran_on = str(ran.host)
        kernel = loopback_cluster.kernel_process(str(s.kernel_id))
        launcher = kernel.parent()
        assert launcher is not None
        watched = [me, kernel, launcher, psutil.Process(gateway.process.pid)]
        watched += psutil.Process(gateway.process.pid).children(recursive=True)
        for proc in watched:
            for conn in proc.net_connections(kind="inet"):
                for addr in (conn.laddr, conn.raddr):
                    if addr:
                        assert ipaddress.ip_address(addr.ip).is_loopback, (proc, conn)
        # The kernel's ports are bound to its host's address, never to every address (the
        # one 127.0.0.1 listener is ipykernel's own pipe for forked subprocesses' output).
        listening = {
            c.laddr.ip
            for proc in (kernel, launcher)
            for c in proc.net_connections("inet")
            if c.status == "LISTEN"
        }
        assert ran_on in listening
        assert listening <= {ran_on, "127.0.0.1"}, listening
        assert not any(ipaddress.ip_address(ip).is_unspecified for ip in listening)


def test_a_manager_keeps_warm_pools_per_host(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    pools = [
        {"backend": "remote", "url": gateway.url, "token": gateway.token, "host": host}
        for host in loopback_cluster.hosts
    ]
    with SessionManager(root_dir=str(tmp_path), pools=pools, pool_size=1) as manager:
        manager.wait_for_pools()
        for host in loopback_cluster.hosts:
            session = manager.session(f"on-{host.replace('.', '-')}", **dict(pools[0], host=host))
            ran = session.execute("import os; os.environ['JUPYTER_EXEC_HOST']")
            assert ran.host == host
            assert ran.text == repr(host)
        assert all(info.from_pool for info in manager.list())
