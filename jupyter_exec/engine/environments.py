"""Where code runs, said one way for the Python API, the AG2 executors, the CLI and the MCP server.

Three kinds, as AG2's ``PythonCodeExecutionTool`` offers them::

    SystemPython()                         this interpreter (or python="python3.12", a path)
    VirtualEnv(".venv")                    an existing venv; created if missing
    VirtualEnv(python="3.12", packages=["pandas"])
                                           made on demand, cached by what it holds
    DockerEnv(pip_packages=["polars"])     a hardened container (the Docker backend)

Each turns into the keyword arguments of :class:`~jupyter_exec.Session` /
:class:`~jupyter_exec.AsyncSession` with :meth:`Environment.session_options`,
which does the slow part (creating a venv and installing ipykernel and the
requested packages into it) once, showing progress. The same is reachable from
a string (``parse_environment("venv:.venv")``), which the command line's
``--env`` flags build on.

Virtual environments are made (by :mod:`jupyter_exec.engine.venvs`) with ``uv`` when it
is on PATH (fast, and it can fetch a Python version that is not installed),
otherwise with ``python -m venv`` and pip. Managed ones live in
``~/.cache/jupyter-exec/venvs/<hash>`` (``$JUPYTER_EXEC_CACHE`` overrides the
root), where the hash covers the Python version, the packages and the
requirements file's content, so the same request reuses the same venv and a
changed one gets a new venv.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_exec.engine.interpreters import resolve_python
from jupyter_exec.engine.venvs import VenvMaker, locked, read_marker, venv_python
from jupyter_exec.exceptions import InvalidArgument, KernelStartError
from jupyter_exec.network import NetworkPolicy

__all__ = [
    "DockerEnv",
    "Environment",
    "ProgressCallback",
    "SystemPython",
    "VirtualEnv",
    "parse_environment",
    "with_network",
]

ProgressCallback = Callable[[str], None]
"""Receives one line of progress at a time (venv creation, pip's output)."""


def stderr_progress(line: str) -> None:
    """Default progress: stderr, so it never mixes with a protocol on stdout (MCP over stdio)."""
    print(f"[jupyter-exec] {line}", file=sys.stderr, flush=True)


def default_cache_dir() -> Path:
    root = os.environ.get("JUPYTER_EXEC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "jupyter-exec"
    )
    return Path(root) / "venvs"


class Environment:
    """Where a session's kernel runs. Subclasses say how to get there."""

    def session_options(self, on_progress: ProgressCallback | None = None) -> dict[str, Any]:
        """Keyword arguments for ``Session`` / ``AsyncSession``, preparing what is needed first.

        May block for a while the first time (a venv being created, packages
        installed); progress lines go to ``on_progress`` (default: stderr).
        """
        raise NotImplementedError

    async def async_session_options(
        self, on_progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        """:meth:`session_options` in a worker thread, so an event loop keeps running."""
        return await asyncio.to_thread(self.session_options, on_progress)

    @property
    def backend(self) -> str:
        """``"local"`` or ``"docker"``: whether code runs with this user's rights or isolated."""
        return "local"

    def describe(self) -> str:
        """A short human description (for logs and tool descriptions)."""
        raise NotImplementedError


@dataclass(frozen=True)
class SystemPython(Environment):
    """An installed interpreter: this one (``python=None``), or a path / command name.

    The interpreter needs ipykernel; a missing one is reported with the
    command that installs it.
    """

    python: str | None = None

    def session_options(self, on_progress: ProgressCallback | None = None) -> dict[str, Any]:
        exe = sys.executable if self.python is None else str(resolve_python(self.python))
        return {"python": exe}

    def describe(self) -> str:
        return f"Python at {self.python or sys.executable}"


@dataclass(frozen=True)
class VirtualEnv(Environment):
    """A virtual environment with ipykernel and ``packages`` installed.

    ``path`` names a venv to use (created there if missing); without it a
    managed venv in the cache is used, keyed by what it holds. ``python`` is the
    interpreter to create it with: a version (``"3.12"``), a command or a
    path; default this interpreter. ``requirements_file`` is installed too.
    """

    path: str | None = None
    python: str | None = None
    packages: tuple[str, ...] = ()
    requirements_file: str | None = None
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        # Accept any sequence for packages, keep a hashable tuple.
        object.__setattr__(self, "packages", tuple(self.packages))

    def describe(self) -> str:
        where = self.path or "a cached venv"
        extra = f" with {', '.join(self.packages)}" if self.packages else ""
        return f"virtual environment {where} (Python {self.python or 'as this one'}){extra}"

    def _requirements_text(self) -> str:
        if not self.requirements_file:
            return ""
        try:
            return Path(self.requirements_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise KernelStartError(
                f"cannot read the requirements file {self.requirements_file}: {exc.strerror}"
            ) from exc

    def spec(self, interpreter_version: str) -> dict[str, Any]:
        """What the venv must hold; its hash names a managed venv."""
        return {
            "python": interpreter_version,
            "packages": sorted(self.packages),
            "requirements": self._requirements_text(),
        }

    def location(self, spec: Mapping[str, Any]) -> Path:
        if self.path is not None:
            return Path(self.path).expanduser().absolute()
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
        root = Path(self.cache_dir).expanduser() if self.cache_dir else default_cache_dir()
        return root.absolute() / f"py{spec['python']}-{digest}"

    def session_options(self, on_progress: ProgressCallback | None = None) -> dict[str, Any]:
        progress = on_progress or stderr_progress
        maker = VenvMaker(progress)
        existing = venv_python(Path(self.path).expanduser()) if self.path is not None else None
        if existing is not None:
            spec = self.spec(maker.version_of(existing))
            venv = existing.parent.parent
        else:
            spec = self.spec(maker.version_of(maker.base_interpreter(self.python)))
            venv = self.location(spec)
        with locked(venv):
            if read_marker(venv) != spec:
                maker.ensure(venv, self.python, spec, self.requirements_file)
        return {"python": str(venv_python(venv))}


@dataclass(frozen=True)
class DockerEnv(Environment):
    """A kernel in a hardened container (``Session(backend="docker")``).

    ``pip_packages``, ``requirements_file`` and ``dockerfile`` are baked into
    an image built on first use (its tag derived from that content, so it is
    built once); ``image`` names a ready image instead. ``network`` is off by
    default; ``True`` gives the container the whole network, a
    :class:`~jupyter_exec.NetworkPolicy` (or its mapping form) only the hosts
    it allows. ``options`` passes any other Docker backend option
    (``memory``, ``cpus``, ``volumes``, ...) through unchanged.
    """

    image: str = ""
    pip_packages: tuple[str, ...] = ()
    requirements_file: str = ""
    dockerfile: str = ""
    network: bool | str | NetworkPolicy | Mapping[str, Any] = False
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pip_packages", tuple(self.pip_packages))
        if isinstance(self.network, Mapping):  # a policy's mapping form: checked now
            object.__setattr__(self, "network", NetworkPolicy.from_value(self.network))

    @property
    def policy(self) -> NetworkPolicy | None:
        """The network policy the kernel's connections go through, if one was given."""
        return self.network if isinstance(self.network, NetworkPolicy) else None

    @property
    def backend(self) -> str:
        return "docker"

    def describe(self) -> str:
        what = self.image or "the jupyter-exec kernel image"
        extra = f" with {', '.join(self.pip_packages)}" if self.pip_packages else ""
        return f"Docker container from {what}{extra}"

    def docker_options(self) -> dict[str, Any]:
        """The Docker backend options (traits of ``DockerProvisioner``)."""
        options: dict[str, Any] = {"network": False if self.policy else self.network}
        if self.image:
            options["image"] = self.image
        if self.pip_packages:
            options["pip_packages"] = list(self.pip_packages)
        if self.requirements_file:
            options["requirements_file"] = str(Path(self.requirements_file).absolute())
        if self.dockerfile:
            options["dockerfile"] = str(Path(self.dockerfile).absolute())
        options.update(self.options)
        return options

    def session_options(self, on_progress: ProgressCallback | None = None) -> dict[str, Any]:
        # Image builds happen in the provisioner when the kernel starts; it
        # streams the build log to stderr itself.
        found: dict[str, Any] = {"backend": "docker", "docker": self.docker_options()}
        if self.policy is not None:
            found["network"] = self.policy
        return found


def parse_environment(
    spec: str | Environment | None = None,
    *,
    packages: Sequence[str] = (),
    python_version: str | None = None,
    requirements_file: str | None = None,
    dockerfile: str | None = None,
    network: bool | NetworkPolicy | Mapping[str, Any] | None = False,
) -> Environment:
    """An :class:`Environment` from a short string, as the CLI and the MCP server take it.

    ``local`` / ``system`` (this interpreter), ``python:<interpreter>``,
    ``venv`` (a cached venv), ``venv:<path>``, ``docker``,
    ``docker:<image>``; a bare path to a venv or an interpreter works too.
    ``packages``, ``requirements_file`` apply to venvs and Docker,
    ``python_version`` to venvs, ``dockerfile`` and ``network`` (``True``, or a
    :class:`~jupyter_exec.NetworkPolicy`) to Docker; a policy for any other
    environment is an :class:`~jupyter_exec.InvalidArgument`.
    """
    if network is not None and not isinstance(network, bool):
        plain = parse_environment(
            spec,
            packages=packages,
            python_version=python_version,
            requirements_file=requirements_file,
            dockerfile=dockerfile,
        )
        return with_network(plain, network)
    if isinstance(spec, Environment):
        return spec
    text = (spec or "local").strip()
    kind, _, target = text.partition(":")
    kind = kind.lower()
    if kind in ("local", "system") and not target:
        if packages or requirements_file or python_version:
            return VirtualEnv(
                python=python_version, packages=tuple(packages), requirements_file=requirements_file
            )
        return SystemPython()
    if kind == "python":
        return SystemPython(target or None)
    if kind == "venv":
        return VirtualEnv(
            path=target or None,
            python=python_version,
            packages=tuple(packages),
            requirements_file=requirements_file,
        )
    if kind == "docker":
        return DockerEnv(
            image=target,
            pip_packages=tuple(packages),
            requirements_file=requirements_file or "",
            dockerfile=dockerfile or "",
            network=bool(network),
        )
    candidate = Path(text).expanduser()
    if (candidate / "pyvenv.cfg").exists():
        return VirtualEnv(path=str(candidate), packages=tuple(packages))
    if candidate.is_file() or shutil.which(text):
        return SystemPython(text)
    raise InvalidArgument(
        f"unknown environment {text!r}: use local, python:<interpreter>, venv, venv:<path>, "
        "docker or docker:<image>"
    )


def with_network(
    environment: Environment, policy: NetworkPolicy | Mapping[str, Any]
) -> Environment:
    """``environment`` with its kernel's connections going through ``policy``: Docker only."""
    if not isinstance(environment, DockerEnv):
        raise InvalidArgument(
            f"a network policy is enforced only for Docker kernels, not for "
            f"{environment.describe()}, which has this machine's whole network: use "
            "environment='docker' (or a DockerEnv)"
        )
    if environment.network is True or (environment.network and environment.policy is None):
        raise InvalidArgument(
            "this Docker environment already has the whole network (network=True); "
            "a policy allows only some hosts: give one or the other"
        )
    return dataclasses.replace(environment, network=policy)
