"""Zygote pools: kernels forked ahead of time from a template that imported the heavy libraries.

Importing numpy, pandas and matplotlib takes a fresh kernel about a second; a
session that needs them pays it on its first cell. A zygote pays it once::

    Zygote.start(key, preload)
      ├─ a kernel launched as any pooled kernel is, in <pool>/z<n>
      ├─ silent requests: import the preload modules, run the setup code
      ├─ a snapshot of it (jupyter_exec.snapshots): a process that serves no client,
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
import queue
import re
import shutil
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_exec.exceptions import ForkError, InvalidArgument, KernelStartError
from jupyter_exec.kernel import KernelHandle
from jupyter_exec.manager.pool import PoolKey, WarmKernel, _alive, _own_like_root, discard
from jupyter_exec.manager.starter import PooledKernelStarter
from jupyter_exec.snapshots import Snapshot, drop, start_from, take_snapshot

__all__ = ["DEFAULT_PRELOAD", "Preload", "Zygote", "ZygotePool"]

log = logging.getLogger("jupyter_exec.manager")

DEFAULT_PRELOAD = ("numpy", "pandas", "matplotlib")
"""What a zygote imports unless told otherwise: the usual data-analysis stack."""

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

_IMPORTS = """\
import importlib
for name in modules:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        raise ImportError(f"import {name} failed: {type(exc).__name__}: {exc}") from None
"""

_MOVE = """\
import os, sys
from IPython import get_ipython
os.chdir(new)
sys.path[:] = [new if entry == old else entry for entry in sys.path]
shell = get_ipython()
history = shell.user_ns.get('_dh') if shell is not None else None
if isinstance(history, list):
    history[:] = [type(history[0])(new) if history else new]
"""
"""Run in a fresh child: its own folder as working directory, in ``sys.path`` and ``%cd``'s
history, instead of the zygote's (a namespace of its own: no name is left in the user's)."""


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
    msg_id = handle.kc.execute(code, silent=True, store_history=False, allow_stdin=False)
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            msg = await handle.shell.get(min(0.5, remaining))
        except queue.Empty:
            if not await handle.is_alive():
                raise KernelStartError("the zygote's kernel died during its preload") from None
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            return dict(msg["content"])
    raise KernelStartError(f"the zygote's preload did not finish within {timeout:g} s")


class _PreloadFailed(KernelStartError):
    """The preload or setup code raised: a configuration error, not worth a retry."""


class Zygote:
    """One template: a frozen, preloaded copy of a kernel that forks new kernels on request."""

    def __init__(self, snapshot: Snapshot, folder: Path) -> None:
        self.snapshot = snapshot
        self.folder = folder

    @property
    def pid(self) -> int:
        return self.snapshot.pid

    @property
    def alive(self) -> bool:
        return self.snapshot.alive

    @classmethod
    async def start(
        cls, key: PoolKey, preload: Preload, folder: Path, launcher: PooledKernelStarter
    ) -> Zygote:
        """Launch a kernel for ``key`` in ``folder``, preload it, freeze it, stop it."""
        timeout = max(launcher.startup_timeout, 300.0)  # importing a large stack takes a while
        handle = await launcher.launch(key, folder)
        try:
            for what, code in (("preload", preload.import_code()), ("setup code", preload.setup)):
                if not code.strip():
                    continue
                reply = await run_silent(handle, code, timeout)
                if reply.get("status") != "ok":
                    raise _PreloadFailed(
                        f"the zygote's {what} failed: {reply.get('ename', 'error')}: "
                        f"{reply.get('evalue', '')} (preload {list(preload.modules)}; check "
                        "AsyncSessionManager.zygote_preload / zygote_setup)"
                    )
            snapshot = await take_snapshot(handle, timeout=timeout)
            await _own_session(snapshot.pid)
        finally:
            await handle.shutdown(now=True)  # the snapshot keeps the state; no kernel is needed
        return cls(snapshot, folder)

    async def fork(self, folder: Path, timeout: float) -> KernelHandle:
        """A new kernel from the zygote, working in ``folder``, connected and ready."""
        handle = await start_from(self.snapshot, cwd=folder, timeout=timeout)
        try:
            move = f"exec({_MOVE!r}, {{'new': {str(folder)!r}, 'old': {str(self.folder)!r}}})"
            reply = await run_silent(handle, move, timeout)
            if reply.get("status") != "ok":
                raise ForkError(
                    f"a forked kernel could not move to {folder}: {reply.get('evalue')}"
                )
        except BaseException:
            await handle.shutdown(now=True)
            raise
        return handle

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


class ZygotePool:
    """Keeps ``size`` kernels forked from one zygote ready; the zygote kept alive.

    The same face as :class:`~jupyter_exec.manager.pool.KernelPool` (``key``,
    ``size``, ``ready``, ``start``, ``wait_ready``, ``close``), but ``take``
    waits: every session of this key must start with the preload, so with no
    child ready one is forked on demand (a fraction of a second), never a plain kernel.
    """

    def __init__(
        self,
        key: PoolKey,
        size: int,
        preload: Preload,
        folder: Path,
        launcher: PooledKernelStarter,
        starts: asyncio.Semaphore,
        root: Path,
    ) -> None:
        if key.backend != "local":
            raise InvalidArgument(
                f"a zygote pool needs local kernels, not {key.backend!r}: the forks of a Docker "
                "kernel share its container (one /work, one process namespace, one memory "
                "limit), which is no isolation between sessions; use a warm pool (pool_size) "
                "for Docker kernels"
            )
        self.key, self.size, self.preload = key, size, preload
        self.folder, self.root = folder, root
        self._launcher, self._starts = launcher, starts
        self._ready: deque[WarmKernel] = deque()
        self._starting = 0
        self._counter = 0
        self._wanted = asyncio.Event()
        self._up = asyncio.Event()  # set while a live zygote exists (or the preload failed)
        self._closing = False
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.zygote: Zygote | None = None
        self.error: KernelStartError | None = None
        """The preload's failure: permanent until the configuration changes."""
        self.restarts = 0
        self.failures = 0
        self.last_error: str | None = None

    def __repr__(self) -> str:
        modules = list(self.preload.modules)
        return f"<ZygotePool {self.key.label} {modules} ready={self.ready}/{self.size}>"

    @property
    def ready(self) -> int:
        return len(self._ready)

    @property
    def zygote_pid(self) -> int | None:
        return self.zygote.pid if self.zygote is not None else None

    def start(self) -> None:
        if self._task is None:
            self._wanted.set()
            self._task = asyncio.create_task(self._keep(), name=f"zygote {self.key.label}")

    # -- handing out ------------------------------------------------------------------

    async def take(self, target: Path | None = None) -> WarmKernel:
        """A kernel forked from the zygote: a ready one, or one forked now.

        ``target``: the session's work dir. If it exists already (a name used
        again), the child is forked straight into it (``folder`` ``None``).
        """
        self._raise_if_failed()
        self._wanted.set()
        if target is None or not target.exists():
            while self._ready:
                warm = self._ready.popleft()
                if await _alive(warm.km):
                    return warm
                log.warning("zygote pool %s: a forked kernel had died; discarding it", self.key)
                await discard(warm)
        for attempt in (1, 2):
            zygote = await self._live_zygote()
            try:
                if target is not None and target.exists():
                    handle = await zygote.fork(target, self._timeout)
                    handle.kc.stop_channels()
                    return WarmKernel(handle.km, None, preload=self.preload)
                return await self._fork_one(zygote)
            except ForkError:
                if attempt == 2 or zygote.alive:
                    raise
                self._up.clear()  # it died under us: the keeper starts another
                self._wanted.set()
        raise AssertionError("unreachable")

    async def wait_ready(self, count: int | None = None, timeout: float = 120.0) -> None:
        """Wait until ``count`` (default: all) forked kernels are ready."""
        want = self.size if count is None else count
        deadline = time.monotonic() + timeout
        while len(self._ready) < want:
            self._raise_if_failed()
            if time.monotonic() > deadline:
                raise TimeoutError(f"zygote pool {self.key.label}: {self.ready}/{want} ready")
            await asyncio.sleep(0.02)

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise KernelStartError(str(self.error)) from self.error
        if self._closing:
            raise KernelStartError("the zygote pool is closed")

    @property
    def _timeout(self) -> float:
        return self._launcher.startup_timeout

    async def _live_zygote(self) -> Zygote:
        while True:
            await self._up.wait()
            self._raise_if_failed()
            zygote = self.zygote
            if zygote is not None and zygote.alive:
                return zygote
            self._up.clear()
            self._wanted.set()

    async def _fork_one(self, zygote: Zygote) -> WarmKernel:
        self._counter += 1
        folder = self.folder / f"k{self._counter}"
        folder.mkdir(parents=True, exist_ok=False)
        _own_like_root(folder, self.root)
        try:
            handle = await zygote.fork(folder, self._timeout)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, folder, True)
            raise
        handle.kc.stop_channels()
        return WarmKernel(handle.km, folder, preload=self.preload)

    # -- keeping the zygote and the children ------------------------------------------

    async def _keep(self) -> None:
        backoff = 1.0
        while not self._closing:
            with contextlib.suppress(asyncio.TimeoutError):  # a look at the zygote now and then
                await asyncio.wait_for(self._wanted.wait(), 2.0)
            self._wanted.clear()
            try:
                await self._fill()
                backoff = 1.0
            except _PreloadFailed:
                return  # a configuration error: no retry (take() and wait_ready() raise it)
            except Exception as exc:
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.error("zygote pool %s: %s", self.key.label, exc)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), backoff)
                backoff = min(backoff * 2, 30.0)
                self._wanted.set()

    async def _fill(self) -> None:
        """A live zygote, then forks until ``size`` children are ready."""
        if self._closing:
            return
        zygote = await self._ensure_zygote()
        while not self._closing and len(self._ready) + self._starting < self.size:
            self._starting += 1
            try:
                async with self._starts:
                    warm = await self._fork_one(zygote)
            finally:
                self._starting -= 1
            if self._closing:
                await discard(warm)
                return
            self._ready.append(warm)

    async def _ensure_zygote(self) -> Zygote:
        zygote = self.zygote
        if zygote is not None and zygote.alive:
            self._up.set()
            return zygote
        self._up.clear()
        if zygote is not None:
            self.restarts += 1
            log.warning(
                "zygote pool %s: the zygote (pid %d) died; starting a new one (restart %d)",
                self.key.label,
                zygote.pid,
                self.restarts,
            )
            await zygote.close()
            await asyncio.to_thread(shutil.rmtree, zygote.folder, True)
            self.zygote = None
        self._counter += 1
        folder = self.folder / f"z{self._counter}"
        folder.mkdir(parents=True, exist_ok=False)
        _own_like_root(folder, self.root)
        try:
            async with self._starts:
                started = time.monotonic()
                zygote = await Zygote.start(self.key, self.preload, folder, self._launcher)
        except _PreloadFailed as exc:
            await asyncio.to_thread(shutil.rmtree, folder, True)
            self.error = exc
            self._up.set()  # wake the waiters: they raise it
            log.error("zygote pool %s: %s", self.key.label, exc)
            raise
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, folder, True)
            raise
        if self._closing:
            await zygote.close()
            return zygote
        self.zygote = zygote
        self._up.set()
        log.info(
            "zygote pool %s: zygote pid %d ready with %s in %.1f s",
            self.key.label,
            zygote.pid,
            ", ".join(self.preload.modules) or "no modules",
            time.monotonic() - started,
        )
        return zygote

    async def close(self, timeout: float = 60.0) -> None:
        """Stop refilling; stop every ready child and the zygote; remove the folders."""
        self._closing = True
        self._stop.set()
        self._wanted.set()
        self._up.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except asyncio.TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        waiting = list(self._ready)
        self._ready.clear()
        await asyncio.gather(*(discard(w) for w in waiting))
        if self.zygote is not None:
            await self.zygote.close()
            self.zygote = None
        await asyncio.to_thread(shutil.rmtree, self.folder, True)
