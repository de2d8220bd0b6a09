"""The one place that talks to the Docker engine's client library and translates its errors.

Every call into the ``docker`` SDK runs inside :func:`docker_errors`, so callers see only
:mod:`jupyter_exec.exceptions` types (``DockerUnavailable``, ``ImageError``, ``BackendError``,
``WorkDirError``) with messages that say what to do next.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import docker
import docker.errors
import requests.exceptions

from jupyter_exec.exceptions import (
    BackendError,
    DockerUnavailable,
    ImageError,
    WorkDirError,
)

__all__ = ["connect", "docker_errors", "engine_url", "is_rootless"]

HOW_TO_START = (
    "Start a Docker engine and try again: `sudo systemctl start docker` on Linux with systemd, "
    "`sudo dockerd &` on a host without systemd, or start Docker Desktop on macOS/Windows. "
    "If it runs elsewhere, set DOCKER_HOST (or the provisioner's `docker_host` option); if you "
    "get 'permission denied', add your user to the `docker` group."
)

_clients: dict[str, docker.DockerClient] = {}
_clients_lock = threading.Lock()


def engine_url(docker_host: str = "") -> str:
    """The engine address that :func:`connect` will use, for messages."""
    return docker_host or os.environ.get("DOCKER_HOST", "") or "unix:///var/run/docker.sock"


@contextmanager
def docker_errors(action: str) -> Iterator[None]:
    """Translate ``docker`` SDK and transport errors raised while doing ``action``.

    ``action`` is a short phrase ("starting the kernel container") that prefixes the message.
    """
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise ImageError(f"{action}: image not found: {_explanation(exc)}") from exc
    except docker.errors.NotFound as exc:
        raise BackendError(f"{action}: not found: {_explanation(exc)}") from exc
    except docker.errors.APIError as exc:
        text = _explanation(exc)
        if "bind source path does not exist" in text or "invalid mount config" in text:
            raise WorkDirError(
                f"{action}: the engine cannot see a directory to mount ({text}). If this process "
                "runs in a container that talks to the host's engine (Docker-out-of-Docker), set "
                "`bind_dir` to the work dir's path on the engine's host."
            ) from exc
        raise BackendError(f"{action}: the Docker engine refused: {text}") from exc
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
        raise DockerUnavailable(
            f"{action}: no Docker engine answers at {engine_url()} ({exc}). {HOW_TO_START}"
        ) from exc
    except requests.exceptions.RequestException as exc:
        raise BackendError(f"{action}: the Docker engine did not answer properly: {exc}") from exc


def _explanation(exc: docker.errors.APIError) -> str:
    explanation = exc.explanation
    if isinstance(explanation, bytes):
        explanation = explanation.decode(errors="replace")
    return str(explanation or exc)


def connect(docker_host: str = "", *, fresh: bool = False) -> docker.DockerClient:
    """A client for the engine at ``docker_host`` (default: ``DOCKER_HOST`` / the local socket).

    Clients are cached per address because each holds a connection pool; ``fresh=True`` gives a
    private one, for a thread that blocks on a long request (``wait``) and must not hold a
    connection that others need. Raises :class:`DockerUnavailable` when nothing answers.
    """
    key = engine_url(docker_host)
    if not fresh:
        with _clients_lock:
            cached = _clients.get(key)
        if cached is not None:
            return cached
    try:
        if docker_host:
            client = docker.DockerClient(base_url=docker_host, version="auto", timeout=120)
        else:
            client = docker.from_env(timeout=120)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise DockerUnavailable(
            f"No Docker engine answers at {key}: {exc}. {HOW_TO_START}"
        ) from exc
    if not fresh:
        with _clients_lock:
            client = _clients.setdefault(key, client)
    return client


_rootless: dict[str, bool] = {}


def is_rootless(client: docker.DockerClient, docker_host: str = "") -> bool:
    """Whether the engine runs rootless (its ``SecurityOptions`` say ``name=rootless``); cached."""
    key = engine_url(docker_host)
    if key not in _rootless:
        with docker_errors("asking the Docker engine how it runs"):
            options = client.info().get("SecurityOptions") or []
        _rootless[key] = any(str(o).split(",")[0] == "name=rootless" for o in options)
    return _rootless[key]
