"""Making virtual environments for kernels: created, filled and marked once, shared safely.

:class:`~jupyter_exec.engine.environments.VirtualEnv` asks for a venv holding ipykernel and some
packages; :class:`VenvMaker` makes it (with ``uv`` when it is on PATH, which can also fetch a
Python version that is not installed; otherwise ``python -m venv`` and pip), streaming every
step to a progress callback, and writes a marker file holding what was asked, so the same
request finds the venv ready next time. :func:`locked` serialises work on one venv across
processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from jupyter_exec.engine.interpreters import ask_interpreter, resolve_python
from jupyter_exec.exceptions import KernelStartError

__all__ = ["MARKER", "VenvMaker", "locked", "looks_like_version", "read_marker", "venv_python"]

MARKER = ".jupyter-exec.json"
"""Written into a venv once ipykernel and the requested packages are in; holds what was asked."""


def venv_python(venv: Path) -> Path | None:
    if not (venv / "pyvenv.cfg").exists():
        return None
    for sub in ("bin/python", "Scripts/python.exe"):
        if (venv / sub).exists():
            return (venv / sub).absolute()
    return None


def read_marker(venv: Path) -> Any:
    try:
        return json.loads((venv / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def locked(venv: Path) -> Iterator[None]:
    """Serialise work on one venv across processes (two sessions asking for it at once)."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; concurrent first use is unlikely
        yield
        return
    with open(venv.parent / f".{venv.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class VenvMaker:
    """Creates venvs and installs into them, streaming every step to ``progress``."""

    def __init__(self, progress: Callable[[str], None]) -> None:
        self.progress = progress
        self.uv = shutil.which("uv")

    def base_interpreter(self, python: str | None) -> Path:
        """The interpreter a new venv is made from: this one, a version, a command or a path."""
        if python is None:
            return Path(sys.executable)
        if looks_like_version(python):
            found = shutil.which(f"python{python}")
            if found:
                return Path(found)
            if self.uv:
                return self._uv_find(python)
            raise KernelStartError(
                f"no Python {python} found (no python{python} on PATH, and uv, which could "
                "download it, is not installed). Install that version, install uv, or name "
                "an interpreter instead."
            )
        return resolve_python(python)

    def _uv_find(self, version: str) -> Path:
        assert self.uv is not None
        self.progress(f"finding (or downloading) Python {version} with uv")
        found = self._run([self.uv, "python", "find", version], "finding Python", capture=True)
        if not found.strip():
            self._run([self.uv, "python", "install", version], f"installing Python {version}")
            found = self._run([self.uv, "python", "find", version], "finding Python", capture=True)
        return Path(found.strip().splitlines()[-1])

    def version_of(self, exe: Path) -> str:
        """``3.12`` for an interpreter (the part of the version a venv is tied to)."""
        code = "import sys; print('%d.%d' % sys.version_info[:2])"
        return ask_interpreter(exe, code, check=True).stdout.strip()

    def ensure(
        self, venv: Path, python: str | None, spec: Mapping[str, Any], requirements: str | None
    ) -> None:
        """Create ``venv`` if needed, install ipykernel and the packages, write the marker."""
        created = False
        if venv_python(venv) is None:
            if venv.exists() and any(venv.iterdir()):
                raise KernelStartError(f"{venv} exists and is not a virtual environment")
            base = self.base_interpreter(python)
            self.progress(f"creating a virtual environment at {venv} (Python {spec['python']})")
            if self.uv:
                self._run(
                    [self.uv, "venv", "--seed", "--python", str(base), str(venv)],
                    "creating the venv",
                )
            else:
                self._run([str(base), "-m", "venv", str(venv)], "creating the venv")
            created = True
        exe = venv_python(venv)
        assert exe is not None
        wanted = ["ipykernel", *spec["packages"]]
        if requirements:
            wanted += ["-r", str(Path(requirements).absolute())]
        self.progress(f"installing {' '.join(wanted)} into {venv}")
        try:
            if self.uv:
                self._run([self.uv, "pip", "install", "--python", str(exe), *wanted], "installing")
            else:
                self._run(
                    [str(exe), "-m", "pip", "install", "--disable-pip-version-check", *wanted],
                    "installing",
                )
        except KernelStartError:
            if created:  # half-made: do not leave it to be mistaken for a good one
                shutil.rmtree(venv, ignore_errors=True)
            raise
        (venv / MARKER).write_text(json.dumps(dict(spec), sort_keys=True), encoding="utf-8")
        self.progress(f"virtual environment ready: {venv}")

    def _run(self, argv: list[str], what: str, *, capture: bool = False) -> str:
        """Run a command, forwarding its output line by line; raise with its tail on failure."""
        tail: deque[str] = deque(maxlen=25)
        captured: list[str] = []
        try:
            process = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                env={**os.environ, "PIP_PROGRESS_BAR": "off"},
            )
        except OSError as exc:
            raise KernelStartError(f"{what} failed: cannot run {argv[0]}: {exc}") from exc
        assert process.stdout is not None
        with process:
            for raw in process.stdout:
                line = raw.rstrip()
                if not line:
                    continue
                tail.append(line)
                if capture:
                    captured.append(line)
                else:
                    self.progress(line)
        if process.returncode != 0:
            raise KernelStartError(
                f"{what} failed (exit status {process.returncode}): {' '.join(argv)}\n"
                + "\n".join(tail)
            )
        return "\n".join(captured)


def looks_like_version(text: str) -> bool:
    parts = text.split(".")
    return 1 <= len(parts) <= 3 and all(p.isdigit() for p in parts)
