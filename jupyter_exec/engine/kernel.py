"""Starting, watching and stopping one kernel through jupyter_client.

The seam to every backend is jupyter_client's ``AsyncKernelManager`` and its
kernel provisioners: a local kernel uses an installed kernelspec (or one made
here for a given interpreter), a Docker kernel a kernelspec naming our
provisioner. This module translates jupyter_client's and zmq's errors into
ours, once.

Finding the interpreter a kernel runs is in :mod:`~jupyter_exec.engine.interpreters`,
reading its messages off the sockets in :mod:`~jupyter_exec.engine.receiver`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import queue
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager, NoSuchKernel
from jupyter_client.manager import AsyncKernelManager

from jupyter_exec.engine.interpreters import (
    activate,
    kernel_interpreter,
    kernel_spec_for_python,
    resolve_python,
)
from jupyter_exec.engine.language_records import LANGUAGE_RECORDS
from jupyter_exec.engine.languages import install_hint, language_of_kernel
from jupyter_exec.engine.mailbox import Mailbox
from jupyter_exec.engine.provisioning import (
    ExitDescriber,
    RemoteManager,
    kernel_process,
)
from jupyter_exec.engine.receiver import Receiver
from jupyter_exec.engine.safepath import safe_python
from jupyter_exec.exceptions import (
    BackendError,
    JupyterExecError,
    KernelDiedError,
    KernelNotAliveError,
    KernelStartError,
)

__all__ = ["KernelHandle", "OneSpec", "kernel_spec_for_python", "resolve_python", "start_kernel"]
# kernel_spec_for_python and resolve_python live in jupyter_exec.engine.interpreters; they
# stay importable from here, where they were first published.

QUIET_POLL = 0.25
"""Seconds without messages after which a waiting client checks the kernel is alive."""

RESEND_FIRST = 1.0
"""Seconds a ``kernel_info_request`` of the start waits before it is sent again (doubling)."""
RESEND_MOST = 8.0


class OneSpec(KernelSpecManager):
    """A kernelspec manager that knows one in-memory spec (for ``python=``, backends, forks
    and tests that start a provisioner through jupyter_client itself)."""

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
    if isinstance(provisioner, ExitDescriber):
        told = await provisioner.exit_description()
        if told:
            return str(told)
    process = kernel_process(provisioner)
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


@dataclass
class KernelHandle:
    """A started kernel: its manager, a connected client and what it said about itself."""

    km: AsyncKernelManager
    kc: AsyncKernelClient
    kernel_info: dict[str, Any] = field(default_factory=dict)
    spec: KernelSpec | None = None
    iopub: Receiver = field(init=False)
    shell: Receiver = field(init=False)
    replies: Mailbox = field(init=False)
    """The shell replies, each to the request it answers (every reader of shell goes here)."""
    stream_guard: bool | None = field(default=None, init=False)
    """Whether the in-kernel stream guard is active (None: not tried since the kernel started)."""
    environment_capture: bool | None = field(default=None, init=False)
    """Whether the in-kernel environment capture is active (None: not tried; see envrecord)."""
    network: Any = field(default=None, init=False)
    """The session's network proxy (a Docker kernel with a policy); closed with the kernel."""
    remote_files: bool | None = field(default=None, init=False)
    """Whether a remote kernel's files come home (None: not tried; see remote_files)."""
    host: str | None = field(default=None, init=False)
    """Where a remote kernel runs, as it says (None: this machine, or not known)."""
    installs_sent: bool = field(default=False, init=False)
    """Whether a session sent this kernel process its in-kernel helpers, all in one request,
    before its first recorded cell (:mod:`jupyter_exec.engine.installs`)."""

    def __post_init__(self) -> None:
        self.iopub = Receiver(self.kc.iopub_channel)
        self.shell = Receiver(self.kc.shell_channel)
        self.replies = Mailbox(self.shell, QUIET_POLL)

    @property
    def kernel_id(self) -> str:
        return str(self.km.kernel_id)

    @property
    def language(self) -> str:
        """The language the kernel said it runs (``language_info.name``, lowercased)."""
        return str(self.kernel_info.get("language_info", {}).get("name") or "").lower()

    @property
    def remote(self) -> bool:
        """Whether the kernel runs behind a Jupyter server or gateway, away from the work dir."""
        return isinstance(self.km, RemoteManager) and self.km.remote is True

    @property
    def late_outputs(self) -> bool:
        """Whether the kernel may publish a cell's outputs after its idle status (Deno's
        does, now and then, for the ``execute_result``): a cell then waits for a fence."""
        implementation = str(self.kernel_info.get("implementation") or "").lower()
        record = LANGUAGE_RECORDS.get(self.language)
        return "deno" in implementation or (record is not None and record.late_outputs)

    @property
    def runs_ipython(self) -> bool:
        """Whether the in-kernel Python helpers may be sent to this kernel: the stream guard,
        durable state, forks and snapshots are Python source run in the kernel, meaningless
        (or worse: run as shell commands) in an R, Bash or Deno kernel.

        The one place that decides it, from what the kernel says about itself."""
        implementation = self.kernel_info.get("implementation")
        record = LANGUAGE_RECORDS.get(self.language)
        return record is not None and record.cell_state and implementation in ("ipython", None)

    def process_alive(self) -> bool:
        """Whether the kernel process runs: a cheap local check (no round trip) where possible."""
        process = kernel_process(self.km.provisioner)
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
        A request can be lost on the way too (one sent while the connection is
        being made), so one unanswered for a while is sent again, at growing
        intervals, as jupyter_client's own wait does; a late reply to an earlier
        one is dropped (the mailbox).
        """
        deadline = time.monotonic() + timeout
        resend = RESEND_FIRST
        while True:
            msg_id = self.kc.kernel_info()
            reply = await self._shell_reply(msg_id, min(deadline, time.monotonic() + resend))
            if reply is None:
                if time.monotonic() >= deadline:
                    raise KernelStartError(
                        "the kernel did not answer kernel_info within the start timeout"
                    )
                resend = min(2 * resend, RESEND_MOST)
                continue
            if await self._iopub_saw(msg_id, min(deadline, time.monotonic() + 0.3)):
                self.kernel_info = reply
                self.stream_guard = None  # a new kernel process: the guard is to be installed
                self.environment_capture = None  # and so is the environment capture
                self.remote_files = None  # and, remote, the file listing (perhaps elsewhere)
                self.installs_sent = False  # and the batch that installs them together
                return reply
            if time.monotonic() >= deadline:
                raise KernelStartError(f"the kernel did not become ready within {timeout:g} s")

    async def _shell_reply(self, msg_id: str, deadline: float) -> dict[str, Any] | None:
        try:
            return await self.shell_reply(msg_id, deadline, died="")
        except KernelNotAliveError:
            raise KernelStartError(
                f"the kernel died while starting: {await describe_exit(self.km)}"
            ) from None

    async def shell_reply(
        self, msg_id: str, deadline: float, *, died: str | None = None
    ) -> dict[str, Any] | None:
        """The content of the shell reply to ``msg_id``; None if none came by ``deadline``.

        The one wait for a reply every silent request uses (state, guard, pools). With
        ``died``, the kernel is watched while quiet, and its death raises
        :class:`KernelNotAliveError` with that message rather than waiting out the deadline.
        """

        async def quiet() -> bool:
            if died is not None and not await self.is_alive():
                raise KernelNotAliveError(died)
            return False

        msg = await self.replies.reply(msg_id, deadline, quiet)
        return None if msg is None else dict(msg["content"])

    async def run_silent(
        self,
        code: str,
        deadline: float,
        *,
        expressions: dict[str, str] | None = None,
        died: str | None = None,
    ) -> dict[str, Any] | None:
        """Run ``code`` silently (no history, no count, no outputs, no stdin); the content of
        its execute_reply, with ``expressions`` evaluated after it, as :meth:`shell_reply`."""
        msg_id = self.send_silent(code, expressions)
        return await self.shell_reply(msg_id, deadline, died=died)

    def send_silent(self, code: str, expressions: dict[str, str] | None = None) -> str:
        """Send ``code`` to run silently and return its msg_id, waiting for nothing.

        The one door for the host's own requests to a kernel (state commits and flushes, the
        idle signing, the environment record, file listings, fences, releases): a request
        sent here is answered through :attr:`replies`, by msg_id, to whoever asks for it
        with its own deadline (:meth:`shell_reply`), so no request waits on another's, and
        a reply nobody asks for is dropped. Only a session's cells go out another way
        (:mod:`jupyter_exec.engine.runner`); ``tests/test_layout.py`` holds the rest to it.
        """
        return str(
            self.kc.execute(
                code,
                silent=True,
                store_history=False,
                allow_stdin=False,
                user_expressions=expressions or {},
            )
        )

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


TCP_ONLY_KERNELS = frozenset({"deno", "java"})
"""Kernel programs (``argv[0]``) that cannot bind ZMQ's ipc transport: Deno reads the
connection file's ``ip`` as a host name; a JVM kernel's JeroMQ has no Unix sockets."""


def _speaks_ipc(km: AsyncKernelManager) -> bool:
    """Whether the kernel can bind ZMQ's ipc transport (else it gets loopback TCP)."""
    try:
        argv = km.kernel_spec.argv if km.kernel_spec is not None else []
    except NoSuchKernel:
        return True  # start_kernel reports it
    return not argv or Path(str(argv[0])).name not in TCP_ONLY_KERNELS


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
        kwargs["kernel_spec_manager"] = OneSpec(spec)
    km = AsyncKernelManager(**kwargs)
    if _local(spec) and _speaks_ipc(km):
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
    if not _speaks_ipc(km):  # Deno: plain values (no ANSI colours in text/plain), no nagging
        kernel_env.setdefault("NO_COLOR", "1")
        kernel_env.setdefault("DENO_NO_UPDATE_CHECK", "1")
    if spec is None:
        _activate(kernel_env, km)
    extra = _ipython_args(km)
    if extra and _local(km.kernel_spec):  # a host IPython kernel: its cwd never searched first
        extra += safe_python(kernel_env)
    try:
        await _launch_or_undo(km, cwd=str(cwd), env=kernel_env, extra_arguments=extra)
    except NoSuchKernel:
        raise KernelStartError(_no_such_kernel(kernel_name)) from None
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


def _no_such_kernel(kernel_name: str) -> str:
    """What to say when ``kernel_name`` is not installed: what is, and how to install it."""
    installed = ", ".join(sorted(KernelSpecManager().find_kernel_specs())) or "none"
    language = language_of_kernel(kernel_name)
    if language is None or LANGUAGE_RECORDS[language].bundled:
        how = f"{sys.executable} -m ipykernel install --user"
    else:
        how = install_hint(language)
    return f"no kernelspec named {kernel_name!r}; installed: {installed} (install it with: {how})"


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
