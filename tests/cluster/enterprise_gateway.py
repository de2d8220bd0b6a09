"""Enterprise Gateway as an operator runs it, from the files ``--write enterprise-gateway`` wrote.

EG lives in a venv of its own (``scripts/provision-gateways``: EG 3.x pins jupyter_client 6,
jupyter_server 1 and pyzmq < 25), cached by version under ``~/.cache/jupyter-exec-tests``.
:func:`running_enterprise_gateway` writes the files for the loopback cluster with
:func:`~jupyter_exec.cluster.deploy.write_deployment` (each EG with a remote dir of its own,
its launcher installed there by ``jupyter-exec gateway --check-only``, as the written
kernelspec expects), then starts EG exactly as the env file's first lines say: a shell sources
``enterprise-gateway.env`` and execs ``jupyter enterprisegateway`` with ``JUPYTER_PATH`` and
``JUPYTER_CONFIG_PATH`` naming the written folder. It waits for the port to answer, and stops
EG as a process manager does (:meth:`RunningEnterpriseGateway.stop`: SIGTERM, then SIGKILL
after a bound).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_exec.cluster.deploy import DISTRIBUTED_KERNEL, DeploySettings, write_deployment
from tests.cluster_gateway import gateway_once
from tests.cluster_hosts import RESPONSE_IP, Cluster
from tests.ports import free_port

EG_VERSION = "3.3.0"
"""The version ``scripts/provision-gateways`` installs (keep the two in step)."""

CACHE = Path(os.environ.get("JUPYTER_EXEC_TEST_CACHE", Path.home() / ".cache/jupyter-exec-tests"))
EG_VENV = CACHE / f"enterprise-gateway-{EG_VERSION}"
START_TIMEOUT = 120.0
"""Seconds for EG's start on a loaded machine (about 2 s idle)."""
STOP_BOUND = 30.0
"""Seconds between SIGTERM and SIGKILL (systemd's ``TimeoutStopSec`` is 90 by default)."""
KERNEL = DISTRIBUTED_KERNEL


class EnterpriseGatewayMissing(RuntimeError):
    """EG's venv is not there: ``scripts/provision-gateways`` was not run."""


def eg_executable() -> Path:
    """EG's console script in its provisioned venv."""
    script = EG_VENV / "bin" / "jupyter-enterprisegateway"
    if not (EG_VENV / ".jupyter-exec-provisioned").is_file() or not script.is_file():
        raise EnterpriseGatewayMissing(
            f"Enterprise Gateway {EG_VERSION} is not installed in {EG_VENV}: "
            "run scripts/provision-gateways"
        )
    return script


@dataclass
class RunningEnterpriseGateway:
    """A started EG: its process, URL, token, the written folder and the hosts' remote dir."""

    process: subprocess.Popen[bytes]
    url: str
    token: str
    folder: Path
    remote_dir: Path
    log_path: Path
    started_in: float
    """Seconds from the start of the process to its port answering."""

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One REST call with the token; (status, decoded JSON body or None)."""
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw else None

    def start_kernel(self, **env: str) -> str:
        """A kernel of the default kernelspec (no name asked: the written default), started
        over REST; its id."""
        status, body = self.request(
            "POST", "/api/kernels", {"env": {"KERNEL_USERNAME": getpass.getuser(), **env}}
        )
        assert status == 201, (status, body, self.log()[-3000:])
        return str(body["id"])

    def left_on_hosts(self) -> list[str]:
        """What is left of kernels in the remote dir: folders in kernels/, files in logs/."""
        found = []
        for sub in ("kernels", "logs"):
            folder = self.remote_dir / sub
            if folder.is_dir():
                found += [f"{sub}/{entry.name}" for entry in folder.iterdir()]
        return sorted(found)

    def stop(self, bound: float = STOP_BOUND) -> tuple[str, float]:
        """SIGTERM, then SIGKILL if EG is still running after ``bound`` seconds, as systemd
        or Kubernetes stop a service; (the signal that ended it, seconds it took)."""
        started = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(bound)
                return "SIGTERM", time.monotonic() - started
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                return "SIGKILL", time.monotonic() - started
        return "exited before", 0.0


def write_files(cluster: Cluster, out: Path, remote_dir: Path) -> DeploySettings:
    """The enterprise-gateway target written for the cluster, into ``out``."""
    user = cluster.user
    settings = DeploySettings(
        hosts=cluster.hosts,
        ssh_port=cluster.port,
        ssh_user=user,
        python=cluster.python,
        remote_dir=str(remote_dir),
        gateway_port=free_port("127.0.0.1"),
        response_port=free_port(RESPONSE_IP),
        # The test user may run kernels; root is refused by default, and CI runs as root.
        authorized_users=(user,),
        unauthorized_users=() if user == "root" else ("root",),
    )
    write_deployment("enterprise-gateway", out, settings)
    return settings


def _wait_answering(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until ``GET /api`` answers (any HTTP status: the port is EG's and it serves)."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(url + "/api", timeout=5):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            text = log.read_text(encoding="utf-8", errors="replace")[-4000:]
            raise AssertionError(f"Enterprise Gateway did not start ({process.poll()}):\n{text}")
        time.sleep(0.05)


@dataclass
class Written:
    """The files written for one EG, the launcher installed where its kernelspec says."""

    folder: Path
    settings: DeploySettings
    remote_dir: Path


def prepare(cluster: Cluster, base: Path) -> Written:
    """Install the launcher in a remote dir of this EG's own, and write the files for it."""
    eg_executable()
    base.mkdir(parents=True, exist_ok=True)
    remote_dir = cluster.base / f"remote-eg-{uuid.uuid4().hex[:8]}"
    checked = gateway_once(
        cluster, "--check-only", "--allow-this-machine", "--remote-dir", str(remote_dir)
    )
    assert checked.returncode == 0, checked.stderr  # the launcher, where the kernelspec says
    out = base / "deploy"
    settings = write_files(cluster, out, remote_dir)
    return Written(out / "enterprise-gateway", settings, remote_dir)


def launch(cluster: Cluster, written: Written, base: Path, token: str) -> subprocess.Popen[bytes]:
    """EG started as the env file's first lines say (word for word but the token's value),
    its output in ``base/enterprise-gateway.log``."""
    folder = written.folder
    env = {
        "PATH": f"{eg_executable().parent}:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": str(cluster.home),  # EG's SSH key and known_hosts
        "JUPYTER_PATH": str(folder),
        "JUPYTER_CONFIG_PATH": str(folder),
        # Nothing of this machine's own Jupyter set-up: only the written folder counts.
        "JUPYTER_CONFIG_DIR": str(base / "jupyter-config"),
        "JUPYTER_DATA_DIR": str(base / "jupyter-data"),
        "JUPYTER_RUNTIME_DIR": str(base / "jupyter-runtime"),
        "EG_AUTH_TOKEN": token,
    }
    with (base / "enterprise-gateway.log").open("wb") as log:
        return subprocess.Popen(
            [
                "bash",
                "-c",
                "set -a; . ./enterprise-gateway.env; set +a; exec jupyter enterprisegateway",
            ],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


@contextlib.contextmanager
def running_enterprise_gateway(cluster: Cluster, base: Path) -> Iterator[RunningEnterpriseGateway]:
    """Write the files, install the launcher, start EG; stop it (SIGTERM, then SIGKILL)."""
    written = prepare(cluster, base)
    settings, folder, remote_dir = written.settings, written.folder, written.remote_dir
    token = uuid.uuid4().hex
    log_path = base / "enterprise-gateway.log"
    started = time.monotonic()
    process = launch(cluster, written, base, token)
    running = RunningEnterpriseGateway(
        process=process,
        url=f"http://{settings.gateway_ip}:{settings.gateway_port}",
        token=token,
        folder=folder,
        remote_dir=remote_dir,
        log_path=log_path,
        started_in=0.0,
    )
    try:
        _wait_answering(running.url, process, log_path)
        running.started_in = time.monotonic() - started
        yield running
    finally:
        running.stop()
