"""Run a one-off command in a kernel's container (``docker exec``): stateless script mode, and
live commands (:class:`LiveExec`) whose output is read as it is printed.

The command runs beside the kernel, so it shares its image, mounts, uid and limits. The
Engine API has no way to signal an exec'd process, so a small Python program (the image always
has Python) starts the command *inside* the container and stops it there:

* :func:`exec_command` (script mode): output is stdout and stderr *combined in order*; the
  watchdog kills the command's whole process group when the timeout passes.
* :class:`LiveExec`: stdout and stderr stay apart and arrive as the command prints them (the
  Engine's multiplexed attach stream); the supervisor reads small frames from its own stdin
  (input for the command, end of input, a signal for its process group), and when that stdin
  closes - the host stopped following, or went away - it kills the group, so no command
  outlives the one who could stop it.
"""

from __future__ import annotations

import contextlib
import struct
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import docker
from docker.utils import socket as docker_socket

from jupyter_exec.docker.engine import docker_errors
from jupyter_exec.engine.scripts import TIMEOUT_EXIT_CODE

__all__ = ["TIMEOUT_EXIT_CODE", "LiveExec", "exec_command", "watchdog_argv"]

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


_SUPERVISOR = """\
# jupyter-exec: runs one command, passes it input and signals from the host, and kills its
# process group when the host stops listening
import os, signal, struct, subprocess, sys, threading
try:
    p = subprocess.Popen(sys.argv[2:], start_new_session=True,
                         stdin=subprocess.PIPE if sys.argv[1] == "1" else subprocess.DEVNULL)
except OSError as e:
    print(f"{sys.argv[2]}: {e.strerror}", file=sys.stderr, flush=True)
    sys.exit(127)
def control():
    read = sys.stdin.buffer.read
    while len(head := read(5)) == 5:
        kind, body = head[:1], read(struct.unpack(">I", head[1:])[0])
        try:
            if kind == b"i" and p.stdin:
                p.stdin.write(body)
                p.stdin.flush()
            elif kind == b"c" and p.stdin:
                p.stdin.close()
            elif kind == b"s":
                os.killpg(p.pid, int(body))
        except (OSError, ValueError):
            pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
threading.Thread(target=control, daemon=True).start()
code = p.wait()
os._exit(code if code >= 0 else 128 - code)  # not sys.exit: the reader still holds stdin
"""

STREAMS = {1: "stdout", 2: "stderr"}


class LiveExec:
    """One command in a container: its output as it comes, its stdin, signals to it (blocking).

    :meth:`frames` yields ``("stdout" | "stderr", bytes)`` until the command's output ends;
    :meth:`exit_code` then says how it ended (a command ended by signal ``n`` exits
    ``128 + n``). Call :meth:`close` when done: it also stops a command still running.
    """

    def __init__(
        self,
        client: docker.DockerClient,
        container_id: str,
        argv: Sequence[str],
        *,
        workdir: str,
        env: Mapping[str, str] | None = None,
        stdin: bool = False,
    ) -> None:
        self._client = client
        with docker_errors("starting a command in the kernel container"):
            self._exec_id = client.api.exec_create(
                container_id,
                ["python", "-c", _SUPERVISOR, "1" if stdin else "0", *argv],
                stdin=True,
                stdout=True,
                stderr=True,
                workdir=workdir,
                environment=dict(env or {}),
            )["Id"]
            self._socket: Any = client.api.exec_start(self._exec_id, socket=True)
        self._send_lock = threading.Lock()

    def frames(self) -> Iterator[tuple[str, bytes]]:
        """The command's output, as the Engine passes it on, until it ends."""
        with contextlib.suppress(OSError):
            frames: Any = docker_socket.frames_iter  # untyped in docker
            for stream, data in frames(self._socket, tty=False):
                if data:
                    yield STREAMS.get(stream, "stdout"), bytes(data)

    def _send(self, kind: bytes, body: bytes = b"") -> None:
        raw = getattr(self._socket, "_sock", self._socket)
        with self._send_lock, contextlib.suppress(OSError):
            raw.sendall(kind + struct.pack(">I", len(body)) + body)

    def write(self, data: bytes) -> None:
        """Input for the command's stdin (started with ``stdin=True``)."""
        for start in range(0, len(data), 1 << 16):
            self._send(b"i", data[start : start + (1 << 16)])

    def close_stdin(self) -> None:
        self._send(b"c")

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the command's process group."""
        self._send(b"s", str(int(signum)).encode())

    def exit_code(self) -> int | None:
        """How the command exited; ``None`` while it runs or if the Engine cannot say."""
        with docker_errors("reading a command's exit code"):
            info = self._client.api.exec_inspect(self._exec_id)
        code = info.get("ExitCode")
        return None if info.get("Running") or code is None else int(code)

    def close(self) -> None:
        """Close the connection: a command still running is killed by its supervisor."""
        _close_stream(self._socket)
