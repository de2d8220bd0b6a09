"""A record's package pins in a Docker image's Python, for ``--in-recorded-env --backend docker``.

::

    image ─► a throwaway container (no network, read-only, no capabilities) says its
             Python (X.Y, glibc, machine) and its version of every recorded package
          ─► the pins it lacks: host pip install --target <cache>/docker-pins/<hash>
             (wheels for that Python and platform, no dependencies, the host's own index
             and pip config, so it works offline with a local mirror)
          ─► the kernel container mounts that folder read-only, first on PYTHONPATH

The image stays as it is (no derived image, no build); the pinned versions shadow its
own. The folder is cached by the image id and the pins, written to a temp name and
renamed, and mounted read-only: a kernel cannot change what the next replay imports.
What the image says about itself is bounded and checked for shape before it is used
on pip's command line (a recorded image id names any local image, not only ours).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_exec.engine.environments import DockerEnv, default_cache_dir
from jupyter_exec.engine.venvs import locked
from jupyter_exec.exceptions import ImageError, KernelStartError

__all__ = ["MOUNT", "PinnedImage", "pinned_image"]

MOUNT = "/opt/jx-pins"
"""Where the pinned packages are mounted in the kernel container (first on PYTHONPATH)."""

_PROBE = """\
import json, platform, sys
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except Exception:
        return None
print(json.dumps({
    "python": "%d.%d" % sys.version_info[:2],
    "implementation": sys.implementation.name,
    "machine": platform.machine(),
    "libc": list(platform.libc_ver()),
    "versions": {name: version(name) for name in sys.argv[1:]},
}))
"""
_MAX_PROBE_BYTES = 1 << 16
_PYTHON_RE = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}")
_MACHINE_RE = re.compile(r"[a-z0-9_]{1,20}")
_GLIBC_RE = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}")
_PIP_TIMEOUT = 600.0


@dataclass(frozen=True)
class PinnedImage(DockerEnv):
    """A Docker environment with the recorded pins its image lacked mounted in (``added``)."""

    added: tuple[str, ...] = ()


def _probe(image: str, names: list[str]) -> dict[str, Any]:
    """What ``image``'s Python is, and its version of each of ``names`` (None: absent)."""
    from jupyter_exec.docker.engine import connect, docker_errors

    client = connect()
    with docker_errors(f"asking image {image} for its Python"):
        raw = client.containers.run(
            image,
            ["-c", _PROBE, *names],
            entrypoint=["python"],
            remove=True,
            network_disabled=True,
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            user="65532:65532",
            environment={"HOME": "/tmp"},
            mem_limit="256m",
            pids_limit=64,
            stdout=True,
            stderr=False,
        )
    text = bytes(raw)[:_MAX_PROBE_BYTES].decode("utf-8", "replace")
    try:
        found = json.loads(text.strip().splitlines()[-1]) if text.strip() else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise ImageError(
            f"image {image} did not say which Python it has (its answer: {text!r:.200})"
        )
    return found


def _target(answer: Mapping[str, Any], image: str) -> list[str]:
    """pip's options that select wheels for the image's interpreter and platform."""
    python, machine = answer.get("python"), answer.get("machine")
    found_libc = answer.get("libc")
    libc: list[Any] = found_libc if isinstance(found_libc, list) else []
    glibc = libc[1] if len(libc) == 2 and libc[0] == "glibc" else None
    if (
        answer.get("implementation") != "cpython"
        or not isinstance(python, str)
        or not _PYTHON_RE.fullmatch(python)
        or not isinstance(machine, str)
        or not _MACHINE_RE.fullmatch(machine)
        or not isinstance(glibc, str)
        or not _GLIBC_RE.fullmatch(glibc)
    ):
        raise ImageError(
            f"image {image} runs no CPython on glibc that pip can pick wheels for "
            f"(it says {dict(answer)!r:.200}): its recorded pins cannot be added"
        )
    tag = python.replace(".", "")
    major, minor = glibc.split(".")
    return [
        "--python-version", python, "--implementation", "cp", "--abi", f"cp{tag}",
        "--platform", f"manylinux_{major}_{minor}_{machine}",
    ]  # fmt: skip


def _install(folder: Path, pins: list[str], target: list[str]) -> None:
    """``pip install --target`` the pins into ``folder`` (made whole, or not at all)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    command = [
        *(sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
        *("--no-deps", "--only-binary=:all:", "--target", str(scratch), *target, *pins),
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=_PIP_TIMEOUT, check=False
        )
        if done.returncode != 0:
            raise KernelStartError(
                f"the package index has no wheel of {', '.join(pins)} for the image's Python "
                f"({' '.join(target)}), so the recorded pins cannot be added to it: "
                f"{done.stderr.strip()[-600:]}"
            )
        os.chmod(scratch, 0o755)
        os.rename(scratch, folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def pinned_image(image: str, pins: tuple[str, ...], cache_dir: str | None = None) -> DockerEnv:
    """``image`` (empty: the kernel image) with the recorded ``pins`` its Python lacks.

    Raises :class:`~jupyter_exec.ImageError` when the image cannot say what its Python is
    and :class:`~jupyter_exec.KernelStartError` when the index has no wheel of a pin.
    """
    from jupyter_exec.docker.image import DEFAULT_IMAGE

    if not pins:
        return DockerEnv(image=image)
    shown = image or DEFAULT_IMAGE
    wanted = dict(pin.split("==", 1) for pin in pins)
    answer = _probe(shown, sorted(wanted))
    found_versions = answer.get("versions")
    versions: dict[str, Any] = found_versions if isinstance(found_versions, dict) else {}
    missing = sorted(f"{n}=={v}" for n, v in wanted.items() if versions.get(n) != v)
    if not missing:
        return DockerEnv(image=image)
    target = _target(answer, shown)
    key = json.dumps({"image": _image_id(shown), "pins": missing, "target": target})
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    folder = root / "docker-pins" / hashlib.sha256(key.encode()).hexdigest()[:16]
    with locked(folder):
        if not folder.is_dir():
            _install(folder, missing, target)
    return PinnedImage(
        image=image,
        options={"volumes": [f"{folder}:{MOUNT}:ro"], "env": {"PYTHONPATH": MOUNT}},
        added=tuple(missing),
    )


def _image_id(image: str) -> str:
    from jupyter_exec.docker.engine import connect, docker_errors

    with docker_errors(f"looking up image {image}"):
        return str(connect().images.get(image).id)
