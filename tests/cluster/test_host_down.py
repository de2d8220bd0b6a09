"""A host that is down is skipped and named: placement, a pinned start, a pinned session.

Each test adds a host of its own to the loopback cluster (an sshd on one more loopback
address, at the cluster's port, under a subreaper of its own) and takes it down the way a
machine goes: its sshd and everything running on it killed at once.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_exec import Execution, Session
from jupyter_exec.exceptions import ServerRefused
from tests.cluster_gateway import RunningGateway, long_cell_in_background, running_gateway
from tests.cluster_hosts import Cluster, ClusterUnavailable, ExtraHost, start_extra_host


@pytest.fixture
def extra_host(loopback_cluster: Cluster) -> Iterator[ExtraHost]:
    for last in range(4, 60):
        try:
            host = start_extra_host(loopback_cluster, f"127.0.0.{last}")
        except ClusterUnavailable:
            continue
        try:
            yield host
        finally:
            host.down()
        return
    pytest.skip("no free loopback address for one more host")


def _gateway(cluster: Cluster, extra: ExtraHost, base: Path) -> Iterator[RunningGateway]:
    remote = cluster.base / f"remote-{uuid.uuid4().hex[:8]}"
    hosts = f"{cluster.hosts[0]},{extra.address}"
    return running_gateway(  # type: ignore[return-value]
        cluster, base, "--remote-dir", str(remote), "--hosts", hosts
    )


def test_placement_skips_a_host_that_is_down_and_a_pinned_start_names_it(
    loopback_cluster: Cluster, extra_host: ExtraHost, tmp_path: Path
) -> None:
    with _gateway(loopback_cluster, extra_host, tmp_path / "gw") as gateway:  # type: ignore[attr-defined]
        extra_host.down()
        started = time.monotonic()
        kernels = [gateway.start_kernel() for _ in range(4)]  # round-robin would use both
        took = time.monotonic() - started
        for kernel_id in kernels:
            assert loopback_cluster.kernel_processes(kernel_id), gateway.log()[-3000:]
        with pytest.raises(urllib.error.HTTPError) as refused:
            gateway.start_kernel({"KERNEL_REMOTE_HOST": extra_host.address})
        refused.value.close()
        assert refused.value.code == 409
        assert extra_host.address in str(refused.value.reason)
        assert "cannot reach SSH" in str(refused.value.reason)
        with pytest.raises(ServerRefused) as session_refused:
            Session(
                backend="remote",
                url=gateway.url,
                token=gateway.token,
                work_dir=tmp_path / "work",
                env={"KERNEL_REMOTE_HOST": extra_host.address},
            ).start()
        assert extra_host.address in str(session_refused.value)
        print(f"4 starts with one host down: {took:.2f} s")
    # The gateway's stop shut every kernel of the host that stayed up down (once, under a
    # load of 15, two were found only at the end of the worker's run).
    left = loopback_cluster.wait_no_kernel_processes(timeout=30)
    assert not left, f"{[p.cmdline() for p in left]}\n{gateway.log()[-6000:]}"


def test_a_session_pinned_to_a_host_that_goes_down_ends_in_a_died_execution_saying_why(
    loopback_cluster: Cluster, extra_host: ExtraHost, tmp_path: Path
) -> None:
    with (
        _gateway(loopback_cluster, extra_host, tmp_path / "gw") as gateway,  # type: ignore[attr-defined]
        Session(
            backend="remote",
            url=gateway.url,
            token=gateway.token,
            work_dir=tmp_path / "work",
            env={"KERNEL_REMOTE_HOST": extra_host.address},
        ) as session,
    ):
        assert session.execute("x = 1; x").text == "1"
        running, done = long_cell_in_background(session)
        deadline = time.monotonic() + 60
        while not any(p.name == "started" for p in _work_files(extra_host)):
            assert time.monotonic() < deadline
            assert running.is_alive()
            time.sleep(0.05)
        went_down = time.monotonic()
        extra_host.down()
        running.join(120)
        took = time.monotonic() - went_down
        assert not running.is_alive()
        (execution,) = done
        assert isinstance(execution, Execution), repr(execution)
        assert execution.status == "died", execution
        assert execution.error is not None
        message = f"{execution.error.ename}: {execution.error.evalue}"
        assert extra_host.address in message, message
        assert "down" in message, message
        print(f"died {took:.2f} s after the host went down: {message}")


def _work_files(host: ExtraHost) -> list[Path]:
    found: list[Path] = []
    for proc in host.processes():
        try:
            found += Path(proc.cwd()).iterdir()
        except OSError:
            continue
        except Exception:  # psutil's errors for a process that just ended
            continue
    return found
