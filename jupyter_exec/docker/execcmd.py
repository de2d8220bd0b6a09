"""Run a one-off command in a kernel's container (``docker exec``): stateless script mode.

The command runs beside the kernel, so it shares its image, mounts, uid and limits. Output is
stdout and stderr *combined in order*: a small Python watchdog (the image always has Python)
starts the command with stderr joined to stdout in one pipe, and kills its whole process group
when the timeout passes. The Engine API has no way to kill an exec'd process, which is why the
watchdog runs *inside* the container.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import docker

from jupyter_exec.docker.engine import docker_errors
from jupyter_exec.scripts import TIMEOUT_EXIT_CODE

__all__ = ["TIMEOUT_EXIT_CODE", "exec_command", "watchdog_argv"]

#: The exit code of a command killed for running past its timeout (as coreutils ``timeout``).

_WATCHDOG = """\
import os, signal, subprocess, sys
limit = float(sys.argv[1])
try:
    p = subprocess.Popen(sys.argv[2:], stderr=subprocess.STDOUT, start_new_session=True)
except OSError as e:
    print(f"{sys.argv[2]}: {e.strerror}", flush=True)
    sys.exit(127)
try:
    sys.exit(p.wait(None if limit <= 0 else limit))
except subprocess.TimeoutExpired:
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    print(f"\\n[timed out after {limit:g} s: killed]", flush=True)
    sys.exit(124)
"""


def watchdog_argv(argv: Sequence[str], timeout: float | None) -> list[str]:
    """Wrap ``argv`` in the in-container watchdog."""
    return ["python", "-c", _WATCHDOG, str(timeout or 0), *argv]


def exec_command(
    client: docker.DockerClient,
    container_id: str,
    argv: Sequence[str],
    *,
    workdir: str,
    timeout: float | None,
    env: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """Run ``argv`` in the container; return its exit code and combined output (blocking).

    A host-side deadline (timeout + 10 s) backs up the watchdog, in case the container itself
    stops answering.
    """
    environment = {"PYTHONUNBUFFERED": "1", **(env or {})}
    with docker_errors("starting a command in the kernel container"):
        exec_id = client.api.exec_create(
            container_id,
            watchdog_argv(argv, timeout),
            stdout=True,
            stderr=True,
            workdir=workdir,
            environment=environment,
        )["Id"]
    chunks: list[bytes] = []
    failure: list[BaseException] = []

    def _read() -> None:
        try:
            with docker_errors("reading a command's output"):
                stream = client.api.exec_start(exec_id, stream=True)
                try:
                    for chunk in stream:
                        chunks.append(chunk)
                finally:  # the SDK leaves the upgraded connection's socket to the caller
                    _close_stream(stream)
        except BaseException as exc:
            failure.append(exc)

    reader = threading.Thread(target=_read, name="jx-exec", daemon=True)
    reader.start()
    reader.join(None if timeout is None else timeout + 10)
    if failure:
        raise failure[0]
    output = b"".join(chunks).decode(errors="replace")
    if reader.is_alive():
        return TIMEOUT_EXIT_CODE, output + f"\n[no answer 10 s after the {timeout} s timeout]"
    with docker_errors("reading a command's exit code"):
        code = client.api.exec_inspect(exec_id).get("ExitCode")
    return (int(code) if code is not None else -1), output


def _close_stream(stream: Any) -> None:
    """Close the socket under an ``exec_start`` stream, read to its end or not.

    ``CancellableStream.close`` does nothing once the response reads as
    closed, yet the connection's socket stays open until garbage collection.
    """
    response = getattr(stream, "_response", None)
    raw = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    sock = getattr(getattr(raw, "raw", None), "_sock", None)
    with contextlib.suppress(Exception):
        stream.close()
    for closable in (response, sock):
        with contextlib.suppress(Exception):
            if closable is not None:
                closable.close()
