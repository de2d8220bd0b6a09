"""Where a replay runs: the person's flags decide; the notebook's record can only refuse.

A notebook's ``metadata.jupyter_exec`` says which backend recorded it, but the file is
anyone's to write, a Docker kernel's included (it writes its own notebook, and can
drop every mention of Docker from it). So the record is a claim: it may keep a replay
out of the host, never send one there. The rule (:func:`choose`):

* the person named where code runs (``backend=``, ``environment=``, ``python=``; the
  CLI's ``--backend``, ``--env``, ``--python``): there, and the console says so, and
  says too when the record names Docker and the person chose the host;
* they named nothing, and the record bears any trace of Docker (:func:`docker_traces`:
  its backend, an image, a Docker kernelspec, the image's interpreter path): with
  ``--in-recorded-env`` and the recorded image's id, that image (Docker, where it ran);
  otherwise a :class:`~jupyter_exec.NotebookError` that names the traces and the flags;
* no trace: the host, the default ``local`` as always;
* a caller that hands in its own kernel (``kernel_manager=``, the REST server) chose
  already: the server decides from what it saw run (:mod:`jupyter_exec.server.origins`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_exec.engine.environments import DockerEnv, Environment
from jupyter_exec.exceptions import NotebookError
from jupyter_exec.notebook.imagepins import PinnedImage

__all__ = ["KERNEL_IMAGE_PYTHON", "Where", "choose", "docker_traces"]

KERNEL_IMAGE_PYTHON = "/opt/kernel/"
"""Where the kernel image's interpreter lives (``kernels/docker/Dockerfile``): Docker only."""

_SHOWN = 80  # characters of a notebook's string shown in a message (repr'd: printable)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _shown(value: str) -> str:
    return repr(value[:_SHOWN])


def docker_traces(metadata: Mapping[str, Any]) -> list[str]:
    """Every sign in a notebook's metadata that it was recorded by a Docker kernel.

    Any one is enough: an edit that removes the image id leaves the backend, the
    kernelspec or the interpreter's path in the image behind.
    """
    ours = _mapping(metadata.get("jupyter_exec"))
    environment = _mapping(ours.get("environment"))
    found: list[str] = []
    if ours.get("backend") == "docker":
        found.append("its session's backend is 'docker'")
    if environment.get("backend") == "docker":
        found.append("its environment's backend is 'docker'")
    if environment.get("docker_image"):
        found.append("it records a Docker image")
    name = _mapping(metadata.get("kernelspec")).get("name")
    if isinstance(name, str) and name.endswith("-docker"):
        found.append(f"its kernelspec {_shown(name)} is a Docker one")
    executable = _mapping(environment.get("interpreter")).get("executable")
    if isinstance(executable, str) and executable.startswith(KERNEL_IMAGE_PYTHON):
        found.append(f"its interpreter {_shown(executable)} is the kernel image's")
    return found


def recorded_image_id(record: Mapping[str, Any] | None) -> str | None:
    """The image id the record names, if it names one."""
    image_id = _mapping(_mapping(record).get("docker_image")).get("id")
    return image_id if isinstance(image_id, str) and image_id else None


@dataclass(frozen=True)
class Where:
    """The backend a replay runs on, the environment made for it, and why."""

    backend: str
    """``local`` (this host) or ``docker``."""
    why: str
    """The reason, in the person's terms: the flag given, or what the record says."""
    environment: Environment | None = None
    """Made from the record (``--in-recorded-env``), else None."""
    image: str = ""
    """The Docker image (a tag or an id) when ``backend`` is docker."""

    def describe(self) -> str:
        """The console's line: "replaying in Docker (image X): --backend docker given"."""
        if self.backend == "docker":
            return f"replaying in Docker (image {self.image}): {self.why}"
        if self.backend == "local":
            return f"replaying on the host: {self.why}"
        return f"replaying on the {self.backend} backend: {self.why}"

    def to_dict(self) -> dict[str, str]:
        return {"backend": self.backend, "why": self.why, "image": self.image}


def _refusal(notebook: str, traces: list[str], in_recorded_env: bool) -> NotebookError:
    docker = (
        "--backend docker (in the kernel image, the recorded pins in its Python)"
        if in_recorded_env
        else "--backend docker (in the kernel image)"
    )
    return NotebookError(
        f"{notebook} was recorded in Docker ({'; '.join(traces)}), and no backend was given: "
        "refusing to replay it on the host. The record is the notebook's own claim (a Docker "
        "kernel writes its notebook, and can drop the image from it), so it never moves a "
        f"replay out of Docker. Choose: {docker}, or --backend local to run its code on this "
        "host as you"
    )


def choose(
    notebook: str,
    metadata: Mapping[str, Any],
    *,
    backend: str | None,
    in_recorded_env: bool,
    session_kwargs: Mapping[str, Any],
) -> Where:
    """Where the replay of a notebook with this ``metadata`` runs (see the module's rule).

    ``backend`` is the person's (None: not given); ``session_kwargs`` the session options
    they gave (``environment``, ``python``, ``docker``, ``kernel_manager``). Raises
    :class:`~jupyter_exec.NotebookError` when the record names Docker and they did not
    say where; with ``in_recorded_env``, whatever making the environment raises.
    """
    from jupyter_exec.notebook import envdiff

    traces = docker_traces(metadata)
    record = envdiff.recorded(metadata)
    noted = f"; the record names Docker ({traces[0]})" if traces else ""
    if session_kwargs.get("kernel_manager") is not None:
        return Where(backend or "local", "the caller's own kernel (kernel_manager)")
    given = session_kwargs.get("environment")
    if isinstance(given, Environment) and not in_recorded_env:
        name = given.backend
        return _placed(name, f"the environment given ({given.describe()}){noted}", given)
    if session_kwargs.get("python") is not None and not in_recorded_env:
        return Where("local", f"--python given{noted}")
    if backend is not None:
        made = _made(record, backend) if in_recorded_env else None
        why = f"--backend {backend} given{noted if backend != 'docker' else ''}"
        recorded_id = recorded_image_id(record) if in_recorded_env else None
        if isinstance(made, DockerEnv) and recorded_id and made.image != recorded_id:
            why += f"; the recorded image {_shown(recorded_id)} is not here, so the kernel image"
        if isinstance(made, PinnedImage) and made.added:
            why += f"; the recorded pins it lacks mounted in: {', '.join(made.added)}"
        return _placed(backend, why, made, session_kwargs)
    if not traces:
        made = _made(record, "local") if in_recorded_env else None
        return Where("local", "no --backend given and the record names no Docker", made)
    if in_recorded_env and recorded_image_id(record) is not None:
        made = _made(record, None)  # that image by id, or an ImageError: it is not here
        return _placed(
            "docker", "no --backend given; the record names Docker, where it is rebuilt", made
        )
    raise _refusal(notebook, traces, in_recorded_env)


def _made(record: Mapping[str, Any] | None, backend: str | None) -> Environment:
    from jupyter_exec.notebook import envdiff

    if record is None:
        raise NotebookError(
            "the notebook records no environment (metadata.jupyter_exec.environment): "
            "--in-recorded-env needs a notebook recorded by jupyter-exec"
        )
    return envdiff.recorded_environment(record, backend=backend)


def _placed(
    backend: str,
    why: str,
    environment: Environment | None,
    session_kwargs: Mapping[str, Any] | None = None,
) -> Where:
    image = ""
    if backend == "docker":
        docker = _mapping((session_kwargs or {}).get("docker"))
        if isinstance(environment, DockerEnv) and environment.image:
            image = environment.image
        elif isinstance(docker.get("image"), str) and docker["image"]:
            image = str(docker["image"])
        else:
            from jupyter_exec.docker.image import DEFAULT_IMAGE

            image = DEFAULT_IMAGE
    return Where(backend, why, environment, image)


def unseen_docker_record(
    notebook: str, metadata: Mapping[str, Any], kernel_name: str, docker_kernel: str | None
) -> str | None:
    """Why a server must not replay ``notebook`` on the host kernel ``kernel_name``, or None.

    For a notebook the server did not see run (its origins know it not: a restarted
    server, a file copied in) and whose request names no kernel: the file's kernelspec
    is its own claim too, so a record with a trace of Docker is not run on a host
    kernelspec. The request's ``kernel_name`` is the person's word.
    """
    traces = docker_traces(metadata)
    if not traces or kernel_name == docker_kernel or kernel_name.endswith("-docker"):
        return None
    docker = f"'{docker_kernel}'" if docker_kernel else "a Docker kernelspec"
    return (
        f"{notebook} was recorded in Docker ({'; '.join(traces)}) and this server did not see "
        f"it run, so it is not replayed on the host kernel {kernel_name!r} on its record's "
        f'word: name the kernel in the request ("kernel_name": {docker}, or {kernel_name!r} '
        "to run its code on the server's host)"
    )
