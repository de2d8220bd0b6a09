"""Starting, watching and stopping one kernel through jupyter_client.

The seam to every backend is jupyter_client's ``AsyncKernelManager`` and its
kernel provisioners: a local kernel uses an installed kernelspec (or one made
here for a given interpreter), a Docker kernel a kernelspec naming our
provisioner. This module translates jupyter_client's and zmq's errors into
ours, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import inspect
import os
import queue
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
from jupyter_client.adapter import adapt
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager, NoSuchKernel
from jupyter_client.manager import AsyncKernelManager

from jupyter_exec.exceptions import (
    BackendError,
    InvalidArgument,
    JupyterExecError,
    KernelDiedError,
    KernelStartError,
)

__all__ = ["KernelHandle", "kernel_spec_for_python", "resolve_python", "start_kernel"]

QUIET_POLL = 0.25
"""Seconds without messages after which a waiting client checks the kernel is alive."""


def resolve_python(python: str | os.PathLike[str]) -> Path:
    """An interpreter path from a path, a venv folder or a command name.

    Raises :class:`~jupyter_exec.InvalidArgument` naming the path when there
    is none there, or it is a file this user cannot run.
    """
    candidate = Path(python).expanduser()
    if candidate.is_dir():
        for sub in ("bin/python", "bin/python3", "Scripts/python.exe"):
            if (candidate / sub).exists():
                return _runnable((candidate / sub).absolute())
        raise InvalidArgument(
            f"{candidate} is a folder but not a virtual environment (no bin/python); "
            "give an interpreter or a venv"
        )
    if candidate.exists():
        return _runnable(candidate.absolute())
    found = shutil.which(str(python))
    if found:
        return Path(found)
    raise InvalidArgument(
        f"no Python interpreter at {python!r} (not a file, a venv or a command on PATH)"
    )


def _runnable(exe: Path) -> Path:
    if not exe.is_file() or not os.access(exe, os.X_OK):
        raise InvalidArgument(
            f"the interpreter {exe} is not executable (or not a file); "
            f"make it executable (chmod +x {exe}) or give another interpreter"
        )
    return exe


def kernel_interpreter(argv: Sequence[str]) -> Path:
    """The interpreter a kernelspec's argv runs (the stock spec's plain "python" is this one)."""
    argv0 = argv[0] if argv else sys.executable
    return Path(sys.executable if argv0 in ("python", "python3") else argv0)


def activate(exe: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` as if ``exe``'s environment were activated (changed in place, and returned).

    Its folder goes first on PATH and a venv's root into VIRTUAL_ENV, so ``pip``
    and console scripts in ``%%bash`` cells and subprocesses are the kernel's own.
    """
    bin_dir = str(exe.parent)
    path = env.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        env["PATH"] = f"{bin_dir}{os.pathsep}{path}" if path else bin_dir
    if (exe.parent.parent / "pyvenv.cfg").exists():
        env.setdefault("VIRTUAL_ENV", str(exe.parent.parent))
    return env


def kernel_spec_for_python(python: str | os.PathLike[str]) -> KernelSpec:
    """A kernelspec that runs ipykernel with ``python``, checking ipykernel is there."""
    exe = resolve_python(python)
    try:
        probe = subprocess.run(
            [str(exe), "-c", "import ipykernel, sys; print(sys.version.split()[0])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise InvalidArgument(f"cannot run the interpreter {exe}: {exc}") from None
    if probe.returncode != 0:
        raise KernelStartError(
            f"{exe} cannot run an IPython kernel: ipykernel is not installed there.\n"
            f"Fix: {exe} -m pip install ipykernel"
        )
    env = activate(exe, {"PATH": os.environ.get("PATH", "")})
    return KernelSpec(
        argv=[str(exe), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        display_name=f"Python {probe.stdout.strip()} ({exe})",
        language="python",
        interrupt_mode="signal",
        env=env,
        metadata={"debugger": True},
    )


class _OneSpec(KernelSpecManager):
    """A kernelspec manager that knows one in-memory spec (for ``python=`` and backends)."""

    def __init__(self, spec: KernelSpec, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._spec = spec

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return self._spec


async def describe_exit(km: AsyncKernelManager) -> str:
    """A short account of how a dead kernel ended, for the user.

    A provisioner may know better than an exit code (the Docker one can tell
    an OOM kill from ``docker kill``): its ``async exit_description()`` wins.
    """
    provisioner = km.provisioner
    describe = getattr(provisioner, "exit_description", None)
    if describe is not None:
        told = await describe()
        if told:
            return str(told)
    process = getattr(provisioner, "process", None)
    code = process.poll() if process is not None else None
    if code is None:
        return "the kernel stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = {
            "SIGKILL": " (the OOM killer or an explicit kill)",
            "SIGSEGV": " (a crash in native code)",
        }
        return f"the kernel process was killed by {name}{hint.get(name, '')}"
    return f"the kernel process exited with code {code}"


class Receiver:
    """Reads one channel's messages with as little event-loop work as possible.

    jupyter_client's async ``get_msg`` always awaits a poll future before
    receiving. Here a message that is already queued is taken at once through
    a blocking shadow of the same socket (``NOBLOCK``); only an empty socket
    costs an awaited poll. This is the hot path of every execution.
    """

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        socket: Any = getattr(channel, "socket", None)
        # Gateway kernels (jupyter_server --gateway-url) have websocket-fed
        # channels with no zmq socket: those are read through get_msg().
        self._zmq = isinstance(socket, zmq.Socket)
        self._async_socket: Any = socket
        if self._zmq:
            self._socket: zmq.Socket[bytes] = zmq.Socket.shadow(socket.underlying)
            self._session = channel.session

    def _take(self) -> dict[str, Any]:
        frames = self._socket.recv_multipart(zmq.NOBLOCK, copy=True)
        _, parts = self._session.feed_identities(frames)
        return _deserialize(self._session, parts)

    async def get(self, timeout: float) -> dict[str, Any]:
        """The next message; raises ``queue.Empty`` after ``timeout`` seconds."""
        if not self._zmq:
            msg: dict[str, Any] = await self._channel.get_msg(timeout=timeout)
            return msg
        try:
            return self._take()
        except zmq.Again:
            pass
        if await self._async_socket.poll(max(0, int(timeout * 1000)), zmq.POLLIN):
            try:
                return self._take()
            except zmq.Again:
                pass
        raise queue.Empty


def _deserialize(session: Any, parts: list[bytes]) -> dict[str, Any]:
    """``Session.deserialize`` without turning header dates into datetimes.

    The signature is checked (and remembered against replays) exactly as
    jupyter_client does; only the date parsing, a third of the client's
    work per message and never needed here (timings are kept as the ISO
    text the kernel sent), is left out.
    """
    if len(parts) < 5:
        raise ValueError(f"malformed message: {len(parts)} parts, at least 5 expected")
    if session.auth is not None:
        signature = parts[0]
        if not signature:
            raise ValueError("unsigned message")
        if signature in session.digest_history:
            raise ValueError(f"duplicate signature: {signature!r}")
        session._add_digest(signature)
        if not hmac.compare_digest(signature, session.sign(parts[1:5])):
            raise ValueError(f"invalid signature: {signature!r}")
    unpack = session.unpack
    header = unpack(parts[1])
    message = {
        "header": header,
        "msg_id": header["msg_id"],
        "msg_type": header["msg_type"],
        "parent_header": unpack(parts[2]),
        "metadata": unpack(parts[3]),
        "content": unpack(parts[4]),
        "buffers": [memoryview(b) for b in parts[5:]],
    }
    if not str(header.get("version", "5")).startswith("5"):  # another protocol: adapt it
        return dict(adapt(message))
    return message


@dataclass
class KernelHandle:
    """A started kernel: its manager, a connected client and what it said about itself."""

    km: AsyncKernelManager
    kc: AsyncKernelClient
    kernel_info: dict[str, Any] = field(default_factory=dict)
    spec: KernelSpec | None = None
    iopub: Receiver = field(init=False)
    shell: Receiver = field(init=False)
    stream_guard: bool | None = field(default=None, init=False)
    """Whether the in-kernel stream guard is active (None: not tried since the kernel started)."""
    network: Any = field(default=None, init=False)
    """The session's network proxy (a Docker kernel with a policy); closed with the kernel."""

    def __post_init__(self) -> None:
        self.iopub = Receiver(self.kc.iopub_channel)
        self.shell = Receiver(self.kc.shell_channel)

    @property
    def kernel_id(self) -> str:
        return str(self.km.kernel_id)

    def process_alive(self) -> bool:
        """Whether the kernel process runs: a cheap local check (no round trip) where possible."""
        process = getattr(self.km.provisioner, "process", None)
        if process is not None:
            return bool(process.poll() is None)
        return bool(self.km.has_kernel)

    async def is_alive(self) -> bool:
        try:
            return bool(await self.km.is_alive())
        except Exception:  # a provisioner that cannot tell is treated as dead
            return False

    async def wait_ready(self, timeout: float) -> dict[str, Any]:
        """Wait until the kernel answers on shell *and* IOPub is delivering.

        Instead of a fixed flush wait, this sends ``kernel_info_request`` and
        waits for its reply and for the IOPub status message it causes; if
        IOPub was not yet subscribed, the status is lost and it tries again.
        """
        deadline = time.monotonic() + timeout
        while True:
            msg_id = self.kc.kernel_info()
            reply = await self._shell_reply(msg_id, deadline)
            if await self._iopub_saw(msg_id, min(deadline, time.monotonic() + 0.3)):
                self.kernel_info = reply
                self.stream_guard = None  # a new kernel process: the guard is to be installed
                return reply
            if time.monotonic() >= deadline:
                raise KernelStartError(f"the kernel did not become ready within {timeout:g} s")

    async def _shell_reply(self, msg_id: str, deadline: float) -> dict[str, Any]:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KernelStartError(
                    "the kernel did not answer kernel_info within the start timeout"
                )
            try:
                msg = await self.shell.get(min(QUIET_POLL, remaining))
            except queue.Empty:
                if not await self.is_alive():
                    raise KernelStartError(
                        f"the kernel died while starting: {await describe_exit(self.km)}"
                    ) from None
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return dict(msg["content"])

    async def _iopub_saw(self, msg_id: str, deadline: float) -> bool:
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                msg = await self.iopub.get(remaining)
            except queue.Empty:
                return False
            if msg["parent_header"].get("msg_id") == msg_id:
                return True
        return False

    async def shutdown(self, *, now: bool = False, kernel: bool = True) -> None:
        """Disconnect, and (unless ``kernel=False``) stop the kernel."""
        try:
            self.kc.stop_channels()
        finally:
            try:
                if kernel and self.km.has_kernel:
                    try:
                        await self.km.shutdown_kernel(now=now)
                    except Exception:  # already dead or never answered: make sure it is gone
                        await self.km.shutdown_kernel(now=True)
            finally:
                if self.network is not None and kernel:
                    await self.network.close()


def _activate(env: dict[str, str], km: AsyncKernelManager) -> None:
    """For an installed Python kernelspec: activate its interpreter's environment."""
    try:
        spec = km.kernel_spec
    except NoSuchKernel:
        return  # start_kernel reports it
    if spec is None or not spec.argv:
        return
    exe = kernel_interpreter(spec.argv)
    if exe.name.startswith("python"):
        activate(exe, env)


IN_MEMORY_HISTORY = "--HistoryManager.hist_file=:memory:"
"""IPython keeps a session's input history in memory, as nbclient's kernels do.

Otherwise every cell is also written to the user's ``history.sqlite``: a
disk write on each round trip (the largest difference in warm latency
between a plain kernel and nbclient's), contention between concurrent
kernels on one database, and an agent's code mixed into a person's
history. The session notebook is the record of what ran.
"""


def _ipython_args(km: AsyncKernelManager) -> list[str]:
    """Extra command-line arguments for an IPython kernel (none for other kernels)."""
    try:
        argv = km.kernel_spec.argv if km.kernel_spec is not None else []
    except NoSuchKernel:
        return []  # start_kernel reports it
    return [IN_MEMORY_HISTORY] if any("ipykernel" in str(a) for a in argv) else []


def _local(spec: KernelSpec | None) -> bool:
    return spec is None or "kernel_provisioner" not in (spec.metadata or {})


def _ipc_base() -> str | None:
    """An absolute socket path prefix for an ipc kernel, or None if it would be too long.

    ZMQ names the sockets ``<prefix>-<n>``; a Unix socket path may not exceed
    107 bytes. The prefix must be absolute: kernel and client run in different
    working directories.
    """
    from jupyter_core.paths import jupyter_runtime_dir

    runtime = Path(jupyter_runtime_dir())
    runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
    base = str(runtime / f"jx-{uuid.uuid4().hex[:12]}")
    return base if len(base) + 3 <= 107 else None


async def _launch_or_undo(km: AsyncKernelManager, **kwargs: Any) -> None:
    """``km.start_kernel(**kwargs)``; cancelled half way, the process it launched is stopped.

    A cancel (a stopped command, a caller that gave up) can land after the
    kernel's process exists but before the manager has returned: the launch
    is let finish (it does not wait for the kernel to be ready, so it is quick)
    and what it started is shut down, so no kernel outlives the cancel.
    """
    launch = asyncio.ensure_future(km.start_kernel(**kwargs))
    try:
        await asyncio.shield(launch)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await launch
        with contextlib.suppress(Exception):
            await km.shutdown_kernel(now=True)
        raise


async def start_kernel(
    *,
    kernel_name: str = "python3",
    spec: KernelSpec | None = None,
    cwd: Path,
    env: dict[str, str] | None = None,
    startup_timeout: float = 60.0,
) -> KernelHandle:
    """Start a kernel (from ``spec`` if given, else the installed ``kernel_name``) and connect."""
    kwargs: dict[str, Any] = {"kernel_name": kernel_name}
    if spec is not None:
        kwargs["kernel_spec_manager"] = _OneSpec(spec)
    km = AsyncKernelManager(**kwargs)
    if _local(spec):
        ipc_base = _ipc_base()
        if ipc_base is not None:
            # Unix sockets in the user's runtime dir: no TCP port other local users
            # could reach, and no "running over TCP without encryption" warning.
            km.transport = "ipc"
            km.ip = ipc_base
    # A short shutdown wait: a kernel that ignores shutdown_request is killed soon.
    km.shutdown_wait_time = 3.0
    kernel_env = dict(os.environ if env is None else env)
    kernel_env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    if spec is None:
        _activate(kernel_env, km)
    try:
        await _launch_or_undo(km, cwd=str(cwd), env=kernel_env, extra_arguments=_ipython_args(km))
    except NoSuchKernel:
        raise KernelStartError(
            f"no kernelspec named {kernel_name!r}; installed: "
            f"{', '.join(sorted(KernelSpecManager().find_kernel_specs())) or 'none'} "
            f"(install ipykernel's with: {sys.executable} -m ipykernel install --user)"
        ) from None
    except JupyterExecError:
        raise
    except (OSError, RuntimeError, ValueError) as exc:
        raise KernelStartError(f"could not start kernel {kernel_name!r}: {exc}") from exc
    kc = km.client()
    kc.start_channels()
    handle = KernelHandle(km=km, kc=kc, spec=km.kernel_spec)
    try:
        await handle.wait_ready(startup_timeout)
    except BaseException:
        await handle.shutdown(now=True)
        raise
    return handle


async def attach_kernel(km: AsyncKernelManager, startup_timeout: float = 60.0) -> KernelHandle:
    """Connect to a kernel someone else started (a Jupyter server's, a gateway's, a pool's)."""
    kc = km.client()
    # Typed as returning None, but a gateway client's is a coroutine.
    started: Any = getattr(kc, "start_channels")()  # noqa: B009
    if inspect.isawaitable(started):  # a gateway client opens its websocket here
        await started
    try:
        spec = km.kernel_spec
        if inspect.isawaitable(spec):
            spec = await spec
    except Exception:  # e.g. a gateway's kernelspec unknown here: it is only informative
        spec = None
    handle = KernelHandle(km=km, kc=kc, spec=spec)
    try:
        await handle.wait_ready(startup_timeout)
    except BaseException:
        kc.stop_channels()
        raise
    return handle


async def restart_kernel(handle: KernelHandle, startup_timeout: float = 60.0) -> None:
    """Restart in place (same connection, so the client stays connected) and wait until ready."""
    try:
        await handle.km.restart_kernel(now=True)
    except JupyterExecError:
        raise
    except (OSError, RuntimeError) as exc:
        raise KernelDiedError(f"the kernel could not be restarted: {exc}") from exc
    await handle.wait_ready(startup_timeout)


async def interrupt_kernel(handle: KernelHandle) -> None:
    try:
        await handle.km.interrupt_kernel()
    except JupyterExecError:
        raise
    except (OSError, RuntimeError) as exc:
        raise BackendError(f"could not interrupt the kernel: {exc}") from exc
