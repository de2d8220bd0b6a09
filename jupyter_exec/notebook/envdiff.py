"""What differs between the environment a notebook was recorded in and the one replaying it.

A replay that differs is only half a finding without the *why*: "numpy 1.26.4
recorded, 2.1.0 here" explains a changed float before anyone reads a diff. So
the replay asks its own kernel, before the first cell, for the versions of the
distributions the record names (:func:`probe`), hashes the work-dir files the
record read, and lists every difference (:func:`differences`): interpreter,
platform, packages, Docker image, kernelspec, input files.

``--in-recorded-env`` goes one step further and replays *in* an environment made
from the record (:func:`recorded_environment`): the recorded Docker image by
its id (never pulled: there is no registry here), or a managed venv with the
recorded Python version and ``name==version`` pins from the package index,
cached by the hash of that spec (:class:`~jupyter_exec.engine.environments.VirtualEnv`).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_exec.boundary.paths import Folder
from jupyter_exec.engine.environments import DockerEnv, Environment, VirtualEnv
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.exceptions import (
    ImageError,
    KernelNotAliveError,
    KernelStartError,
    NotebookError,
    StorageError,
    WorkDirError,
)
from jupyter_exec.inkernel import env as inkernel_env
from jupyter_exec.inkernel import module_call_code
from jupyter_exec.session import envrecord

__all__ = ["differences", "here", "recorded", "recorded_environment"]

_PROBE_TIMEOUT = 30.0
MAX_HASHED_BYTES = inkernel_env.MAX_HASHED_BYTES


def recorded(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """The environment a notebook's metadata records (``jupyter_exec.environment``), if any."""
    ours = metadata.get("jupyter_exec")
    found = ours.get("environment") if isinstance(ours, Mapping) else None
    return dict(found) if isinstance(found, Mapping) else None


async def here(
    kernel: KernelHandle, record: Mapping[str, Any], backend: str, kernel_name: str
) -> dict[str, Any]:
    """The same facts about the replay's kernel: versions of the recorded packages, image."""
    names = sorted(str(n) for n in (record.get("packages") or {}))
    code = module_call_code(
        inkernel_env.__file__, inkernel_env.MODULE, "versions([])", "environment", "probe"
    )
    found: dict[str, Any] = {}
    expression = f"__import__('sys').modules[{inkernel_env.MODULE!r}].versions({names!r})"
    try:
        reply = await kernel.run_silent(
            code,
            time.monotonic() + _PROBE_TIMEOUT,
            expressions={envrecord.EXPRESSION_KEY: expression},
            died="",
        )
    except KernelNotAliveError:
        reply = None
    if reply is not None:
        found = envrecord.parse(reply.get("user_expressions") or {}) or {}
    found.update(backend=backend, kernelspec=kernel_name)
    image = await envrecord.docker_image(kernel)
    if image is not None:
        found["docker_image"] = image
    return found


def _hash(work_dir: Path, relative: str) -> str | None:
    """sha256 of a work-dir file, opened without following links; None if unreadable."""
    folder_part, name = os.path.split(relative)
    try:
        with Folder.open(work_dir, folder_part) as folder:
            found = folder.lstat(name)
            if found is None or found.st_size > MAX_HASHED_BYTES:
                return None
            return hashlib.sha256(folder.read_bytes(name, limit=MAX_HASHED_BYTES)).hexdigest()
    except (OSError, WorkDirError, StorageError):
        return None


def _version(info: Any) -> str:
    if not isinstance(info, Mapping):
        return "?"
    return f"{info.get('implementation', 'Python')} {info.get('version', '?')}"


def differences(
    record: Mapping[str, Any], now: Mapping[str, Any], work_dir: Path | None = None
) -> list[str]:
    """Each difference as a sentence, recorded value first ("six 1.16.0 recorded, 1.17.0 here")."""
    out: list[str] = []
    before, after = record.get("interpreter"), now.get("interpreter")
    if (
        isinstance(before, Mapping)
        and isinstance(after, Mapping)
        and (_version(before) != _version(after))
    ):
        out.append(f"interpreter: {_version(before)} recorded, {_version(after)} here")
    b_platform, a_platform = record.get("platform") or {}, now.get("platform") or {}
    for key in ("system", "machine"):
        if b_platform.get(key) and a_platform.get(key) and b_platform[key] != a_platform[key]:
            out.append(f"platform {key}: {b_platform[key]} recorded, {a_platform[key]} here")
    for key in ("backend", "kernelspec"):
        if record.get(key) and now.get(key) and record[key] != now[key]:
            out.append(f"{key}: {record[key]} recorded, {now[key]} here")
    b_image, a_image = record.get("docker_image") or {}, now.get("docker_image") or {}
    if b_image.get("id") and b_image.get("id") != a_image.get("id"):
        shown = a_image.get("id") or "no Docker image"
        out.append(f"Docker image: {b_image['id']} recorded, {shown} here")
    packages = now.get("packages") or {}
    for name, version in sorted((record.get("packages") or {}).items()):
        if name not in packages:
            continue  # not asked (no probe): nothing to say
        current = packages[name]
        if current is None:
            out.append(f"{name} {version} recorded, not installed here")
        elif current != version:
            out.append(f"{name} {version} recorded, {current} here")
    if work_dir is not None:
        for relative, digest in sorted((record.get("files") or {}).items()):
            found = _hash(work_dir, str(relative))
            if found is None:
                out.append(f"input file {relative}: missing or unreadable here")
            elif found != digest:
                out.append(f"input file {relative}: its content changed (sha256 differs)")
    return out


_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION_RE = re.compile(r"[0-9][0-9A-Za-z.+!_-]{0,63}")
_PYTHON_RE = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}")
_IMAGE_ID_RE = re.compile(r"sha256:[0-9a-f]{64}")


def _refuse(what: str, value: Any) -> NotebookError:
    return NotebookError(
        f"the notebook's recorded environment has an invalid {what}: {str(value)[:100]!r}; "
        "--in-recorded-env installs only plain name==version pins"
    )


def recorded_environment(
    record: Mapping[str, Any], cache_dir: str | None = None, *, backend: str | None = None
) -> Environment:
    """An environment made from the record: its Docker image by id, or a pinned venv.

    ``backend`` is where the person said it runs (:mod:`jupyter_exec.notebook.where`):
    ``local`` makes the pinned venv even from a Docker record, ``docker`` the recorded
    image (or, when it is not on this machine, the kernel image) with the recorded pins
    in its Python (:func:`pinned_image`); None follows the record (the image if it names one).

    The record comes from the notebook, which anyone may have written: every name,
    version and image id must have the plain shape of one (a name like
    ``--index-url=...`` would be an option to pip) or :class:`~jupyter_exec.NotebookError`
    says which is not, before anything is installed. Raises
    :class:`~jupyter_exec.ImageError` when the recorded image is not on this machine
    and the person did not ask for Docker themselves.
    """
    image = record.get("docker_image") or {}
    image_id = image.get("id") if isinstance(image, Mapping) else None
    if image_id is not None and (
        not isinstance(image_id, str) or not _IMAGE_ID_RE.fullmatch(image_id)
    ):
        raise _refuse("Docker image id", image_id)
    if backend == "docker":
        here = image_id if image_id and _image_here(image_id) else ""
        return pinned_image(here, _pins(record), cache_dir)
    if image_id and backend is None:
        _check_image(image_id)
        return DockerEnv(image=image_id)
    interpreter = record.get("interpreter") or {}
    version = str(interpreter.get("version", "")) if isinstance(interpreter, Mapping) else ""
    if not version:
        raise NotebookError(
            "the notebook records no interpreter (metadata.jupyter_exec.environment): "
            "it was not recorded by jupyter-exec, so --in-recorded-env cannot rebuild it"
        )
    python = ".".join(version.split(".")[:2])
    if not _PYTHON_RE.fullmatch(python):
        raise _refuse("Python version", version)
    return PinnedVenv(python=python, packages=_pins(record), cache_dir=cache_dir)


def _pins(record: Mapping[str, Any]) -> tuple[str, ...]:
    """The record's packages as ``name==version`` pins, each checked for its plain shape."""
    packages = record.get("packages") or {}
    if not isinstance(packages, Mapping):
        raise _refuse("package list", packages)
    pins: list[str] = []
    for name, pinned in sorted(packages.items()):
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise _refuse("package name", name)
        if not isinstance(pinned, str) or not _VERSION_RE.fullmatch(pinned):
            raise _refuse(f"version of {name}", pinned)
        pins.append(f"{name}=={pinned}")
    return tuple(pins)


def pinned_image(image: str, pins: tuple[str, ...], cache_dir: str | None = None) -> DockerEnv:
    """``image`` (empty: the kernel image) with the recorded pins its Python lacks
    (:mod:`jupyter_exec.notebook.imagepins`)."""
    from jupyter_exec.notebook import imagepins

    return imagepins.pinned_image(image, pins, cache_dir)


class PinnedVenv(VirtualEnv):
    """A managed venv of recorded pins; a pin the index lacks is named in the error."""

    def session_options(self, on_progress: Any = None) -> dict[str, Any]:
        try:
            return super().session_options(on_progress)
        except KernelStartError as exc:
            missing = [pin for pin in self.packages if pin in str(exc)]
            if not missing:
                raise
            raise KernelStartError(
                f"the package index has no {', '.join(missing)} (recorded in the notebook), "
                "so the recorded environment cannot be rebuilt here"
            ) from exc


def _image_here(image_id: str) -> bool:
    """Whether the engine has this image (looked up by id, never pulled)."""
    try:
        _check_image(image_id)
    except ImageError:
        return False
    return True


def _check_image(image_id: str) -> None:
    from jupyter_exec.docker.engine import connect

    def absent() -> ImageError:
        return ImageError(
            f"the recorded Docker image {image_id} is not on this machine; jupyter-exec never "
            "pulls an image by id (load it with `docker load` first)"
        )

    client = connect()
    try:
        client.images.get(image_id)
    except Exception as exc:  # docker.errors.ImageNotFound and friends: translated here
        raise absent() from exc
