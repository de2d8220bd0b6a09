"""Zygote pools: kernels forked ahead of time from a template that imported the heavy libraries.

Importing numpy, pandas and matplotlib takes a fresh kernel about a second; a
session that needs them pays it on its first cell. A zygote pays it once
(the pool that keeps its children ready: :mod:`~jupyter_exec.manager.zygote_pool`)::

    Zygote.start(key, preload)
      ├─ a kernel launched as any pooled kernel is, in <pool>/z<n>
      ├─ silent requests: import the preload modules, run the setup code
      ├─ a snapshot of it (jupyter_exec.state.snapshots): a process that serves no client,
      │    runs no code, and forks on request; the kernel that did the imports is stopped
      └─ fork(<pool>/k<n>) ─► a child kernel, moved into its own folder, ready

    ZygotePool (size N): N forked children kept ready; take() hands one out (the
    manager renames its folder to the session's work dir, as for any pooled kernel)
    and a replacement is forked in the background.

A child shares every page the zygote holds (the imported libraries) until one
side writes it, so an idle pooled child costs a few MB of its own instead of a
whole interpreter with pandas. The zygote never runs a session's code: it is
asked for forks only, over its private socket. A zygote found dead (killed, out
of memory) is started again, and the log says so; its children, already
separate processes, go on. A preload that fails (a missing module, a setup
error) is a configuration error: no retry, :class:`~jupyter_exec.KernelStartError`
naming the import, raised by ``take()`` and ``wait_ready()``.

Only local kernels: the forks of a Docker kernel live in its container, so
they would share its file system (one /work for every session), its process
namespace and its limits; the isolation between sessions that a Docker pool
gives (a container each) would be gone. See ``docs/howto/pools.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.session import Session

from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.exceptions import (
    ForkError,
    InvalidArgument,
    KernelNotAliveError,
    KernelStartError,
)
from jupyter_exec.manager.pool import PoolKey
from jupyter_exec.manager.starter import PooledKernelStarter
from jupyter_exec.options import DEFAULT_PRELOAD
from jupyter_exec.session.readthrough import ReadThrough
from jupyter_exec.state import snapshots
from jupyter_exec.state.forking import AdoptedProvisioner
from jupyter_exec.state.snapshots import Snapshot, drop, start_from, take_snapshot

__all__ = [
    "DEFAULT_PRELOAD",
    "Preload",
    "PreloadFailed",
    "Zygote",
    "ZygoteChildProvisioner",
    "restart_from_zygote",
    "run_silent",
]

log = logging.getLogger("jupyter_exec.manager")

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

_IMPORTS = """\
import importlib
for name in modules:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        raise ImportError(f"import {name} failed: {type(exc).__name__}: {exc}") from None
"""

_FREEZE = "exec('import gc\\ngc.collect()\\ngc.freeze()', {})"
"""The zygote's last request before it is frozen: every object it holds moves to the
garbage collector's permanent generation, so no collection in a child writes to (and so
copies) the pages they live on. What makes an idle child cost a few MB, not tens."""

_MOVE = """\
import os, sys
from IPython import get_ipython
os.chdir(new)
sys.path[:] = [new if entry == old else entry for entry in sys.path]
shell = get_ipython()
history = shell.user_ns.get('_dh') if shell is not None else None
if isinstance(history, list):
    history[:] = [type(history[0])(new) if history else new]
import random
random.seed()
numpy = sys.modules.get('numpy')
if numpy is not None:
    numpy.random.seed()
"""
"""Run in a fresh child: its own folder as working directory, in ``sys.path`` and ``%cd``'s
history, instead of the zygote's; and its own random numbers (``random``'s and numpy's global
generators were copied from the zygote: every child would draw the same ones). It runs in a
namespace of its own: no name is left in the user's."""


@dataclass(frozen=True)
class Preload:
    """What a zygote runs before it forks: modules to import, then setup code.

    Modules are imported without binding a name (``sys.modules`` only), so a
    session's ``import pandas as pd`` is instant and its namespace starts
    empty; ``setup`` runs in the user namespace (it may bind names). Both are
    recorded in each session's notebook, the setup as a first cell, so a
    replay or a resume runs it too.
    """

    modules: tuple[str, ...] = DEFAULT_PRELOAD
    setup: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.modules, str):
            raise InvalidArgument("zygote preload must be a list of module names, not a string")
        modules = tuple(self.modules)
        for name in modules:
            if not isinstance(name, str) or not _MODULE.match(name):
                raise InvalidArgument(
                    f"zygote preload: {name!r} is not a module name (e.g. 'pandas', "
                    "'matplotlib.pyplot'); put other code in the setup code"
                )
        if not isinstance(self.setup, str):
            raise InvalidArgument("zygote setup must be Python source code (a string)")
        object.__setattr__(self, "modules", modules)

    def import_code(self) -> str:
        """The silent request that imports the modules in a namespace of its own."""
        return f"exec({_IMPORTS!r}, {{'modules': {list(self.modules)!r}}})"

    def record(self) -> dict[str, Any]:
        """What a session's notebook metadata says its kernel started with."""
        return {"modules": list(self.modules), "setup": self.setup}

    def cell(self) -> dict[str, Any] | None:
        """The notebook cell that redoes the setup code (``None``: no setup code).

        Only the setup changes the user namespace; the imports change nothing a
        cell can see but the time ``import`` takes.
        """
        if not self.setup.strip():
            return None
        return {
            "cell_type": "code",
            "source": self.setup,
            "metadata": {"jupyter_exec": {"preload": True}},
            "outputs": [],
            "execution_count": None,
        }


async def run_silent(handle: KernelHandle, code: str, timeout: float) -> dict[str, Any]:
    """Run ``code`` silently (no history, no count, no outputs); its execute_reply."""
    try:
        reply = await handle.run_silent(code, time.monotonic() + timeout, died="")
    except KernelNotAliveError:
        raise KernelStartError("the zygote's kernel died during its preload") from None
    if reply is None:
        raise KernelStartError(f"the zygote's preload did not finish within {timeout:g} s")
    return reply


class PreloadFailed(KernelStartError):
    """The preload or setup code raised: a configuration error, not worth a retry."""


class Zygote:
    """One template: a frozen, preloaded copy of a kernel that forks new kernels on request."""

    def __init__(self, snapshot: Snapshot, folder: Path) -> None:
        self.snapshot = snapshot
        self.folder = folder

    pid = ReadThrough[int]("snapshot.pid")
    alive = ReadThrough[bool]("snapshot.alive")

    @classmethod
    async def start(
        cls, key: PoolKey, preload: Preload, folder: Path, launcher: PooledKernelStarter
    ) -> Zygote:
        """Launch a kernel for ``key`` in ``folder``, preload it, freeze it, stop it."""
        timeout = max(launcher.startup_timeout, 300.0)  # importing a large stack takes a while
        handle = await launcher.launch(key, folder)
        try:
            steps = (("preload", preload.import_code()), ("setup code", preload.setup))
            for what, code in (*steps, ("preparation", _FREEZE)):
                if not code.strip():
                    continue
                reply = await run_silent(handle, code, timeout)
                if reply.get("status") != "ok":
                    raise PreloadFailed(
                        f"the zygote's {what} failed: {reply.get('ename', 'error')}: "
                        f"{reply.get('evalue', '')} (preload {list(preload.modules)}; check "
                        "AsyncSessionManager.zygote_preload / zygote_setup)"
                    )
            snapshot = await take_snapshot(handle, timeout=timeout)
            try:
                await _own_session(snapshot.pid)
            except BaseException:
                await drop(snapshot)
                raise
        finally:
            await handle.shutdown(now=True)  # the snapshot keeps the state; no kernel is needed
        return cls(snapshot, folder)

    async def fork(self, folder: Path, timeout: float) -> KernelHandle:
        """A new kernel from the zygote, working in ``folder``, connected and ready."""
        handle = await start_from(self.snapshot, cwd=folder, timeout=timeout)
        try:
            await self.move(handle, folder, timeout)
        except BaseException:
            await handle.shutdown(now=True)
            raise
        return handle

    async def fork_into(self, connection_file: str, timeout: float) -> int:
        """Fork a kernel serving ``connection_file`` (a restart's, in place); its pid."""
        deadline = time.monotonic() + timeout
        return await snapshots.fork_into(self.snapshot, connection_file, os.getpid(), deadline)

    async def move(self, handle: KernelHandle, folder: Path, timeout: float) -> None:
        """Move a fresh child into ``folder`` and give it its own random numbers."""
        move = f"exec({_MOVE!r}, {{'new': {str(folder)!r}, 'old': {str(self.folder)!r}}})"
        reply = await run_silent(handle, move, timeout)
        if reply.get("status") != "ok":
            raise ForkError(f"a forked kernel could not move to {folder}: {reply.get('evalue')}")

    async def close(self) -> None:
        await drop(self.snapshot)


async def _own_session(pid: int) -> None:
    """Wait until the snapshot leads its own session: stopping the kernel's group must not
    reach it (it calls ``setsid`` first thing after the fork)."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if os.getsid(pid) == pid:
                return
        await asyncio.sleep(0.005)
    raise KernelStartError(f"the zygote (pid {pid}) did not detach from its kernel")


LiveZygote = Callable[[], Awaitable[Zygote]]
"""Waits until the pool's zygote is alive (started again if it died) and returns it."""


class ZygoteChildProvisioner(AdoptedProvisioner):
    """Drives a kernel forked from a zygote; a restart forks the zygote again.

    jupyter_client restarts a kernel in place: same connection file, and the
    session's client stays connected. A plain adopted kernel restarts from its
    kernelspec, empty; this one asks the zygote for a new child serving the
    same connection file and moves it into the session's work dir, so a
    restarted session starts with the preload, as every session of its pool does.
    """

    live_zygote: LiveZygote | None = None
    timeout: float = 60.0
    _zygote: Zygote | None = None  # from a restart's launch to its post_launch

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        kwargs = await super().pre_launch(**kwargs)
        kwargs["cmd"] = []  # nothing is executed: the zygote forks
        return kwargs

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        km = self.parent
        if self.live_zygote is None or km is None:
            return await super().launch_kernel(cmd, **kwargs)
        try:
            zygote = await asyncio.wait_for(self.live_zygote(), self.timeout)
        except asyncio.TimeoutError:
            raise KernelStartError(
                f"no live zygote to restart the kernel from within {self.timeout:g} s"
            ) from None
        pid = await zygote.fork_into(str(km.connection_file), self.timeout)
        self.adopt(pid, km.get_connection_info())
        self._zygote = zygote
        return self.connection_info

    async def post_launch(self, **kwargs: Any) -> None:
        await super().post_launch(**kwargs)
        zygote, self._zygote = self._zygote, None
        km = self.parent
        if zygote is None or km is None:
            return
        # A client of its own Session: jupyter_client names a client's sockets after its
        # session id, and the kernel would refuse the session's own client, reconnecting
        # under the same name, as a duplicate.
        session = Session(key=km.session.key, signature_scheme=km.session.signature_scheme)
        kc = km.client(session=session)
        kc.start_channels()
        try:
            handle = KernelHandle(km=km, kc=kc, spec=None)
            await handle.wait_ready(self.timeout)
            await zygote.move(handle, Path(kwargs.get("cwd") or zygote.folder), self.timeout)
        finally:
            kc.stop_channels()

    async def cleanup(self, restart: bool = False) -> None:
        # On a restart it stays the manager's provisioner: the next launch forks the zygote.
        await super().cleanup(restart=restart and self.live_zygote is None)


def restart_from_zygote(handle: KernelHandle, live_zygote: LiveZygote, timeout: float) -> None:
    """Make ``handle``'s kernel (a zygote's child) restart as a new child of the zygote."""
    km = handle.km
    adopted = km.provisioner
    assert isinstance(adopted, AdoptedProvisioner)
    provisioner = ZygoteChildProvisioner(
        kernel_id=km.kernel_id, kernel_spec=km.kernel_spec, parent=km
    )
    provisioner.process = adopted.process
    provisioner.connection_info = adopted.connection_info
    provisioner.leftovers = list(adopted.leftovers)
    provisioner.live_zygote = live_zygote
    provisioner.timeout = timeout
    km.provisioner = provisioner
