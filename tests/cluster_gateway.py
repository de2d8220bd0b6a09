"""``jupyter-exec gateway`` as a user runs it, on the loopback cluster (tests/cluster_hosts.py).

The real command in a subprocess (``python -m jupyter_exec gateway``), with the
cluster's ``HOME`` (its SSH key and known_hosts) and its port, user, remote dir
and interpreter on the command line. :func:`running_gateway` waits for the
URL and token the command prints, and stops it with SIGTERM afterwards;
:func:`gateway_once` runs a command that is expected to end by itself (a
refusal, ``--check-only``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cluster_hosts import Cluster

START_TIMEOUT = 120.0
"""Seconds for the host checks plus the server's start on a loaded machine."""


def gateway_argv(cluster: Cluster, *extra: str, hosts: str | None = None) -> list[str]:
    """The command line for the cluster (both hosts unless ``hosts``), plus ``extra``."""
    return [
        sys.executable,
        "-m",
        "jupyter_exec",
        "gateway",
        "--hosts",
        hosts if hosts is not None else ",".join(cluster.hosts),
        "--ssh-port",
        str(cluster.port),
        "--ssh-user",
        cluster.user,
        "--remote-dir",
        str(cluster.remote_dir),
        "--python",
        cluster.python,
        *extra,
    ]


def gateway_environ(cluster: Cluster, home: Path | None = None, **more: str) -> dict[str, str]:
    """This process's environment with the cluster's HOME (or ``home``) and no gateway token."""
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_EXEC_GATEWAY_TOKEN"}
    env["HOME"] = str(home or cluster.home)
    env.update(more)
    return env


def gateway_once(
    cluster: Cluster, *extra: str, hosts: str | None = None, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a gateway command that ends by itself; its status, stdout and stderr."""
    return subprocess.run(
        gateway_argv(cluster, *extra, hosts=hosts),
        env=gateway_environ(cluster, home),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=START_TIMEOUT,
        check=False,
    )


@dataclass
class RunningGateway:
    """A started ``jupyter-exec gateway``: its process, what it printed, where it logs."""

    process: subprocess.Popen[bytes]
    url: str
    token: str
    stdout: Path
    stderr: Path

    def log(self) -> str:
        """Everything the command and its server wrote to stderr so far."""
        return self.stderr.read_text(encoding="utf-8", errors="replace")

    def printed(self) -> str:
        return self.stdout.read_text(encoding="utf-8", errors="replace")

    def start_kernel(self, env: dict[str, str] | None = None) -> str:
        """A kernel started through the gateway's REST API (``env``: its KERNEL_* asks); its id."""
        request = urllib.request.Request(
            self.url + "/api/kernels",
            data=json.dumps({"env": env or {}}).encode(),
            method="POST",
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            return str(json.load(response)["id"])

    def stop(self, timeout: float = 90.0, signum: int = signal.SIGTERM) -> int:
        """SIGTERM (as a process manager stops it) or ``signum``; its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise


@contextlib.contextmanager
def running_gateway(
    cluster: Cluster, base: Path, *extra: str, env: dict[str, str] | None = None
) -> Iterator[RunningGateway]:
    """Start the gateway on the cluster (``--allow-this-machine --port 0``); stop it afterwards."""
    base.mkdir(parents=True, exist_ok=True)
    stdout, stderr = base / "gateway.out", base / "gateway.err"
    argv = gateway_argv(cluster, "--allow-this-machine", "--port", "0", *extra)
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(
            argv,
            env=env or gateway_environ(cluster),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            text = stdout.read_text(encoding="utf-8", errors="replace")
            url = re.search(r"^url:\s+(\S+)$", text, re.MULTILINE)
            token = re.search(r"^token:\s+(\S+)$", text, re.MULTILINE)
            if url and token:
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"the gateway did not start (status {process.poll()}):\n{text}\n"
                    + stderr.read_text(encoding="utf-8", errors="replace")[-4000:]
                )
            time.sleep(0.1)
        yield RunningGateway(process, url.group(1), token.group(1), stdout, stderr)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(90)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


LONG_CELL = "import pathlib, time; pathlib.Path('started').touch(); time.sleep(300)"
"""A cell that says it started (a file ``started`` in its work dir) and then runs on."""


def long_cell_in_background(session: Any) -> tuple[threading.Thread, list[Any]]:
    """Run :data:`LONG_CELL` on ``session`` in a thread; the thread and the list that gets
    its Execution, or the exception it raised (for the test's assertion to report)."""
    done: list[Any] = []

    def run() -> None:
        try:
            done.append(session.execute(LONG_CELL))
        except BaseException as exc:  # reported by the caller's assertion
            done.append(exc)

    running = threading.Thread(target=run)
    running.start()
    return running, done


PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"
"""A cell drawing one plot: on a remote kernel its PNG must come home."""


def plot_comes_home(session: Any, work: Path) -> None:
    """Run :data:`PLOT` on ``session``: its PNG is a file of the result, in ``work``."""
    plot = session.execute(PLOT)
    assert plot.ok, plot.error
    pngs = [p for p in plot.files if p.suffix == ".png"]
    assert pngs
    assert pngs[0].read_bytes().startswith(b"\x89PNG")
    assert pngs[0].is_relative_to(work.absolute())
