"""Ports for the servers a test starts, chosen where nothing else will take them.

A port found free by binding to port 0 comes from the kernel's ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999 here): between the test closing its probe
and the server binding it, any outgoing connection on the machine (a kernel's, a
client's, another worker's) may be given that same port as its source, and the server
then fails to start; two xdist workers may also pick the same one. Ports below the
ephemeral range are never handed out by the kernel, and each worker draws from a slice
of its own, so neither race can happen.
"""

from __future__ import annotations

import os
import random
import socket

LOW, HIGH = 20000, 32000
"""Below the default ephemeral range (and Debian's, 32768-60999)."""

SLICE = 1500
"""Ports per xdist worker: eight workers fit (the suite runs two; the stress mode four)."""


def _slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % ((HIGH - LOW) // SLICE) if worker.isdigit() else 0
    start = LOW + index * SLICE
    return range(start, start + SLICE)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now, from this worker's slice below the ephemeral range."""
    ports = _slice()
    for port in random.sample(ports, len(ports)):
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1} on {host}")
