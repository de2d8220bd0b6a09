"""Fixtures for the cluster tests: a loopback cluster of two SSH hosts (tests/cluster_hosts.py).

* ``loopback_cluster`` (session-scoped, one per xdist worker): sshd on 127.0.0.2 and 127.0.0.3.
  Without sshd (``scripts/provision-cluster`` not run) the tests are skipped locally, and fail
  under ``CI=true`` (tests/conftest.py turns that skip into a failure).
* At the end of the session no kernel process may be left on the hosts.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster_hosts import Cluster, ClusterUnavailable, start_cluster


@pytest.fixture(scope="session")
def loopback_cluster() -> Iterator[Cluster]:
    base = Path(tempfile.mkdtemp(prefix="jx-cluster-"))
    try:
        cluster = start_cluster(base)
    except ClusterUnavailable as exc:
        pytest.skip(f"no loopback cluster: {exc}")
    try:
        yield cluster
        left = cluster.wait_no_kernel_processes(timeout=5)
        assert not left, f"kernel processes left on the hosts: {[p.cmdline() for p in left]}"
    finally:
        cluster.stop()
