"""Helpers shared by the server tests (a module of its own: conftest modules are not importable)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import nbformat
import yaml
from jupyter_client.session import Session

from tests.ports import free_port

ENABLE_FILE = (
    Path(__file__).parents[2] / "server_extension" / "jupyter_server_config.d" / "jupyter_exec.json"
)
SPEC = Path(__file__).parents[2] / "server_extension" / "openapi.yaml"
DOCKER_KERNELSPEC = Path(__file__).parents[2] / "kernels" / "python3-docker" / "kernel.json"


def install_docker_kernelspec(data_dir: str | Path, image: str) -> str:
    """The shipped ``python3-docker`` kernelspec, on ``image``, in a test server's data dir."""
    spec = json.loads(DOCKER_KERNELSPEC.read_text())
    spec["metadata"]["kernel_provisioner"]["config"]["image"] = image
    folder = Path(data_dir) / "kernels" / "python3-docker"
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(spec))
    return "python3-docker"


def spec_operations() -> set[tuple[str, str]]:
    spec = yaml.safe_load(SPEC.read_text())
    methods = {"get", "post", "put", "patch", "delete"}
    return {
        (path, method.upper())
        for path, item in spec["paths"].items()
        for method in item
        if method in methods
    }


def served_operations(serverapp: Any) -> set[tuple[str, str]]:
    """(OpenAPI-style path, method) for every /api/exec route in the running web app."""
    base = serverapp.base_url.rstrip("/")
    found = set()

    def walk(rules: list[Any]) -> None:
        for rule in rules:
            if hasattr(rule.target, "rules"):  # a nested router (one per host pattern)
                walk(rule.target.rules)
                continue
            pattern = getattr(rule.matcher, "regex", None)
            if pattern is None or "/api/exec" not in pattern.pattern:
                continue
            path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern.pattern.rstrip("$"))
            path = path.replace("\\", "").removeprefix(base)
            for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
                if method.lower() in vars(rule.target):
                    found.add((path, method))

    walk(serverapp.web_app.default_router.rules)
    return found


def call_path(path: str) -> str:
    """A spec path with its parameters filled: the session id as 32 zeros, others as ``probe``."""
    return re.sub(r"\{\w+\}", "probe", path.replace("{session_id}", "0" * 32))


def tiny_png(width: int = 3, height: int = 2) -> bytes:
    """A valid RGB PNG made here, so tests need no image library."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def installed_extensions(python: Path) -> list[str]:
    """The server extensions the environment of ``python`` enables (its config.d files).

    A REST test's server runs ours alone unless it asks for the others: JupyterLab's and
    the language-server one's start-up probes (node, npm, R) cost a second of CPU per
    server and are not what these tests are about; the JupyterLab tests keep them all.
    """
    names: list[str] = []
    folder = python.absolute().parent.parent / "etc" / "jupyter" / "jupyter_server_config.d"
    for path in sorted(folder.glob("*.json")):
        enabled = json.loads(path.read_text()).get("ServerApp", {}).get("jpserver_extensions")
        names += [name for name, on in (enabled or {}).items() if on]
    return names


class JupyterProcess:
    """A real ``jupyter server`` / ``jupyter lab`` subprocess, isolated under ``workdir``.

    Its own config, runtime, data and IPython dirs (nothing leaks from ``~/.jupyter``),
    a known token, loopback only; stopped (by its pid) on exit, log kept in ``workdir``.
    ``jupyter server`` runs our extension alone, ``jupyter lab`` every installed one
    (``other_extensions`` says otherwise).
    """

    def __init__(
        self,
        workdir: Path,
        *args: str,
        app: str = "server",
        python: Path | None = None,
        token: str = "test-token",
        env: dict[str, str] | None = None,
        enable_extension: bool = True,
        other_extensions: bool | None = None,
    ) -> None:
        import sys

        self.workdir = workdir
        self.token = token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.root = workdir / "root"
        self.log = workdir / f"{app}.log"
        python = python or Path(sys.executable)
        self.argv = [
            str(python), "-m", "jupyterlab" if app == "lab" else "jupyter_server",
            "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
            "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
            "--allow-root", f"--ServerApp.root_dir={self.root}", *args,
        ]  # fmt: skip
        if not (app == "lab" if other_extensions is None else other_extensions):
            self.argv += [
                f"--ServerApp.jpserver_extensions={name}=False"
                for name in installed_extensions(python)
                if name.split(".")[0] != "jupyter_exec"
            ]
        self.env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(workdir / "config"),
            "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
            "JUPYTER_DATA_DIR": str(workdir / "data"),
            "IPYTHONDIR": str(workdir / "ipython"),
            **(env or {}),
        }
        self.enable_extension = enable_extension
        self.proc: Any = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def __enter__(self) -> JupyterProcess:
        import subprocess

        for sub in ("root", "config", "runtime", "data", "ipython"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        if self.enable_extension:  # the file pip installs into etc/jupyter, used as shipped
            target = self.workdir / "config" / "jupyter_server_config.d"
            target.mkdir(exist_ok=True)
            (target / ENABLE_FILE.name).write_bytes(ENABLE_FILE.read_bytes())
        self._log = self.log.open("wb")
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.workdir
        )  # (in workdir: what a server writes beside itself, e.g. a collaboration store)
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        import time

        import requests

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.argv[2]} exited: see {self.log}\n{self.tail()}")
            try:
                if requests.get(f"{self.url}/api/status", headers=self.headers, timeout=2).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"no answer from {self.url} within {timeout:g} s\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def __exit__(self, *exc: object) -> None:
        import subprocess

        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


# -- a notebook two people share (test_live_cells, test_merge) -------------------------------


def run_of(cell: dict[str, Any]) -> dict[str, Any] | None:
    return (cell.get("metadata") or {}).get("jupyter_exec", {}).get("run")


def on_disk(root: Path, path: str) -> dict[str, Any]:
    """The notebook file, validated; no cells while the room is caught writing it in place."""
    try:
        nb = nbformat.read(root / path, as_version=4)
    except (nbformat.reader.NotJSONError, ValueError):
        return {"cells": []}
    nbformat.validate(nb)
    return dict(nb)


async def run_as_person(serverapp: Any, kernel_id: str, code: str) -> dict[str, Any]:
    """Run ``code`` on the agent's kernel from another client (as JupyterLab does); the reply."""
    km = serverapp.kernel_manager.get_kernel(kernel_id)
    kc = km.client(session=Session(key=km.session.key, username="ada"))
    kc.start_channels()
    try:
        msg_id = kc.execute(code)
        while True:
            reply = await kc.get_shell_msg(timeout=60)
            if reply["parent_header"].get("msg_id") == msg_id:
                return dict(reply["content"])
    finally:
        kc.stop_channels()
