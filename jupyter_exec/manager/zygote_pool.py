"""A zygote pool: kernels forked from one zygote, kept ready, the zygote kept alive.

See :mod:`jupyter_exec.manager.zygote` for the zygote itself. The pool starts
the zygote in the background, forks ``size`` children from it into folders of
their own, and forks a replacement whenever one is taken. It looks at the
zygote every couple of seconds and whenever it forks: a dead zygote is started
again (a warning in the log says so); a preload that fails is not retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections import deque
from pathlib import Path

from jupyter_exec.exceptions import ForkError, InvalidArgument, KernelStartError
from jupyter_exec.manager.pool import (
    BacksOff,
    PoolKey,
    WarmKernel,
    _alive,
    _own_like_root,
    discard,
    drain,
)
from jupyter_exec.manager.starter import PooledKernelStarter
from jupyter_exec.manager.zygote import Preload, PreloadFailed, Zygote, restart_from_zygote

__all__ = ["ZygotePool"]

log = logging.getLogger("jupyter_exec.manager")


class ZygotePool(BacksOff):
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
                log.warning("zygote pool %s: a ready kernel had died", self.key.label)
                await discard(warm)
        for attempt in (1, 2):
            zygote = await self._live_zygote()
            try:
                if target is not None and target.exists():
                    handle = await zygote.fork(target, self._timeout)
                    restart_from_zygote(handle, self._live_zygote, self._timeout)
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
        restart_from_zygote(handle, self._live_zygote, self._timeout)
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
            except PreloadFailed:
                return  # a configuration error: no retry (take() and wait_ready() raise it)
            except Exception as exc:
                backoff = await self._back_off(exc, f"zygote pool {self.key.label}", backoff)
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
        except PreloadFailed as exc:
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
        await drain(task, self._ready, timeout)
        if self.zygote is not None:
            await self.zygote.close()
            self.zygote = None
        await asyncio.to_thread(shutil.rmtree, self.folder, True)
