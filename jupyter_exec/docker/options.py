"""Pure translation of Docker kernel options into ``docker`` SDK ``containers.run`` arguments.

Nothing here talks to an engine or touches the filesystem, so every security default can be
unit-tested by looking at the dictionary it produces. The provisioner gathers the facts (which uid,
which host paths, which labels) and this module decides how they become a container.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONTAINER_CONF_DIR",
    "CONTAINER_RUN_DIR",
    "Limits",
    "Mount",
    "RunSpec",
    "Security",
    "forwarded_env",
    "network_mode",
    "parse_volume",
    "run_kwargs",
    "split_user",
]

#: Where the per-kernel run dir (connection file and ipc sockets) is mounted inside the container.
#: Short on purpose: ipc socket paths are limited to 107 characters.
CONTAINER_RUN_DIR = "/run/jx"
#: Where the folder holding the kernel's connection file is mounted, read-only: the kernel must
#: not be able to plant a link where the host writes that file.
CONTAINER_CONF_DIR = "/run/jxc"


@dataclass(frozen=True)
class Mount:
    """A bind mount; ``source`` is a path as the *engine* sees it."""

    source: str
    target: str
    read_only: bool = True

    def as_api(self) -> dict[str, Any]:
        """The Engine API ``HostConfig.Mounts`` entry (a missing source is an error, not made)."""
        return {
            "Type": "bind",
            "Source": self.source,
            "Target": self.target,
            "ReadOnly": self.read_only,
        }


@dataclass(frozen=True)
class Security:
    """Hardening switches; the defaults are the secure ones and each can be relaxed."""

    init: bool = True
    read_only: bool = True
    tmpfs_size: str = "512m"
    tmp_exec: bool = False
    cap_drop: tuple[str, ...] = ("ALL",)
    cap_add: tuple[str, ...] = ()
    no_new_privileges: bool = True
    network: str = "none"
    packages_dir: str = "/opt/packages"
    """A writable tmpfs (exec allowed) on ``PYTHONPATH`` and pip's target, so ``pip install``
    at run time works with a read-only image; empty: none. Needs network to download."""


@dataclass(frozen=True)
class Limits:
    """Resource limits; empty string / zero means "no limit"."""

    memory: str = "2g"
    memory_swap: str = ""  # "" = equal to memory, i.e. no swap on top of the memory limit
    cpus: float = 1.0
    pids: int = 256
    nofile: int = 4096


@dataclass(frozen=True)
class RunSpec:
    """Everything needed to start one kernel container."""

    image: str
    command: tuple[str, ...]
    name: str
    user: str
    work_mount: Mount
    run_mount: Mount
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    volumes: tuple[Mount, ...] = ()
    security: Security = Security()
    limits: Limits = Limits()
    extra: Mapping[str, Any] = field(default_factory=dict)


def network_mode(network: bool | str) -> str:
    """``False`` -> no network at all, ``True`` -> the default bridge, a string -> that network."""
    if network is True:
        return "bridge"
    if network is False or network in ("", "none", "false", "False"):
        return "none"
    if network in ("true", "True"):
        return "bridge"
    return str(network)


def parse_volume(text: str) -> Mount:
    """Parse ``"host:container[:ro|rw]"``; volumes are read-only unless ``:rw`` is given.

    Read-only is the default because an extra volume is usually reference data, and a kernel
    that can rewrite it is a surprise nobody asked for.
    """
    parts = text.split(":")
    if len(parts) == 3 and parts[2] in ("ro", "rw"):
        source, target, mode = parts
    elif len(parts) == 2:
        source, target, mode = parts[0], parts[1], "ro"
    else:
        raise ValueError(f"volume {text!r} is not 'HOST_PATH:CONTAINER_PATH[:ro|rw]'")
    if not source.startswith("/") or not target.startswith("/"):
        raise ValueError(f"volume {text!r}: both paths must be absolute")
    return Mount(source=source, target=target, read_only=mode == "ro")


def _tmpfs_options(security: Security) -> str:
    opts = ["rw", "nosuid", "nodev"]
    if not security.tmp_exec:
        opts.append("noexec")
    else:
        opts.append("exec")
    if security.tmpfs_size:
        opts.append(f"size={security.tmpfs_size}")
    return ",".join(opts)


def _limit_kwargs(limits: Limits) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if limits.memory:
        kwargs["mem_limit"] = limits.memory
        # Without an explicit swap limit cgroups allow 2x memory (swap accounting), so a
        # "512m" kernel could really use 1 GiB. Equal values mean: no swap.
        kwargs["memswap_limit"] = limits.memory_swap or limits.memory
    if limits.cpus > 0:
        kwargs["nano_cpus"] = round(limits.cpus * 1e9)
    if limits.pids > 0:
        kwargs["pids_limit"] = limits.pids
    if limits.nofile > 0:
        kwargs["ulimits"] = [{"name": "nofile", "soft": limits.nofile, "hard": limits.nofile}]
    return kwargs


def _security_kwargs(security: Security) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        # The kernel must not be PID 1: ipykernel's interrupt does killpg(getpgid(pid)), which
        # for PID 1 signals every process but the kernel, and PID 1 never reaps zombies.
        "init": security.init,
        "network_mode": network_mode(security.network),
        "read_only": security.read_only,
        # IPython, matplotlib and tempfile all need a writable HOME//tmp even with a read-only root.
        "tmpfs": {"/tmp": _tmpfs_options(security)},
    }
    if security.packages_dir:
        size = f",size={security.tmpfs_size}" if security.tmpfs_size else ""
        kwargs["tmpfs"][security.packages_dir] = f"rw,exec,nosuid,nodev,mode=1777{size}"
    if security.cap_drop:
        kwargs["cap_drop"] = list(security.cap_drop)
    if security.cap_add:
        kwargs["cap_add"] = list(security.cap_add)
    if security.no_new_privileges:
        kwargs["security_opt"] = ["no-new-privileges"]
    return kwargs


def run_kwargs(spec: RunSpec) -> dict[str, Any]:
    """Keyword arguments for ``DockerClient.containers.run`` that start ``spec`` detached.

    The container is never ``auto_remove``-d by the engine: after the kernel dies its state
    (``OOMKilled``, exit code) is what tells the user why, so removal is the provisioner's job.
    ``spec.extra`` is applied last, as the escape hatch for anything not modelled here.
    """
    mounts = [spec.work_mount, spec.run_mount, *spec.volumes]
    targets = [m.target for m in mounts]
    duplicates = sorted({t for t in targets if targets.count(t) > 1})
    if duplicates:
        raise ValueError(f"two mounts target the same container path: {', '.join(duplicates)}")
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "command": list(spec.command),
        "name": spec.name,
        "user": spec.user,
        "working_dir": spec.work_mount.target,
        "environment": dict(spec.env),
        "labels": dict(spec.labels),
        "mounts": [m.as_api() for m in mounts],
        "detach": True,
        "auto_remove": False,
        "stdin_open": False,
        "tty": False,
    }
    kwargs.update(_security_kwargs(spec.security))
    packages = spec.security.packages_dir
    if packages:
        env = kwargs["environment"]
        env.setdefault("PIP_TARGET", packages)
        env["PYTHONPATH"] = ":".join(p for p in (packages, env.get("PYTHONPATH", "")) if p)
    kwargs.update(_limit_kwargs(spec.limits))
    kwargs.update(spec.extra)
    return kwargs


def split_user(user: str) -> tuple[int, int]:
    """``"1000:1000"`` -> ``(1000, 1000)``; ``"1000"`` -> ``(1000, 1000)``."""
    uid_text, _, gid_text = user.partition(":")
    try:
        uid = int(uid_text)
        gid = int(gid_text) if gid_text else uid
    except ValueError:
        raise ValueError(f"user {user!r} is not numeric 'UID[:GID]'") from None
    if uid < 0 or gid < 0:
        raise ValueError(f"user {user!r}: ids must not be negative")
    return uid, gid


def forwarded_env(
    requested: Mapping[str, str],
    inherited: Mapping[str, str],
    always: Sequence[str] = (),
) -> dict[str, str]:
    """The part of ``requested`` that the caller added or changed relative to ``inherited``.

    jupyter_client passes the kernel a full copy of this process's environment. Copying the
    host's PATH, HOME or secrets into an isolated container would be wrong, so only variables the
    caller set on purpose (a difference from ``os.environ``) cross over, plus the names in
    ``always`` (the kernelspec's own ``env`` stanza). Host-specific names never cross.
    """
    blocked = {"PATH", "HOME", "USER", "LOGNAME", "PWD", "OLDPWD", "SHELL", "TMPDIR",
               "VIRTUAL_ENV", "PYTHONHOME", "PYTHONEXECUTABLE", "JPY_PARENT_PID",
               "JPY_INTERRUPT_EVENT", "CONDA_PREFIX", "HOSTNAME"}  # fmt: skip
    keep = set(always)
    return {
        k: v
        for k, v in requested.items()
        if k not in blocked and (k in keep or inherited.get(k) != v)
    }
