"""Warm kernel pools: kernels started ahead of time so a new session need not wait for one.

A pool holds kernels of one :class:`PoolKey` (backend + the options that shape
the kernel). Kernels are started in the background, each in a fresh folder
``<root_dir>/.pool/<manager>/<n>`` as its working directory, and handed out one
per session, never shared.

How a pooled kernel gets its session's work dir without a ``chdir``: the
manager *renames* the kernel's folder to ``<root_dir>/<session name>``. A
process's working directory (and a Docker bind mount) refers to the folder
itself, not to its path, so the kernel is now in the session's work dir - a
clean, empty one, because nothing ran in it yet. This works for any kernel
language and for Docker kernels (the container's ``/work`` follows the folder).
A remote kernel has no local folder: its pool entries carry none.

The kernel manager also remembers the cwd it launched with, for restarts;
:func:`follow_rename` points that at the new path (and tells a provisioner
that wants to know, through a ``work_dir_moved(path)`` hook).

A Docker kernel with a network policy is pooled with its own proxy, started
with it; the policy is part of the key, so a session with policy A never gets
a kernel whose proxy decides with policy B, or one with no proxy at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_exec.engine.languages import kernel_for
from jupyter_exec.engine.provisioning import WorkDirFollower, relaunch_args
from jupyter_exec.network.policy import NetworkPolicy
from jupyter_exec.session.launch import network_of

__all__ = ["KernelPool", "PoolKey", "WarmKernel", "follow_rename"]

log = logging.getLogger("jupyter_exec.manager")

POOL_DIR = ".pool"

#: Session options that shape the kernel; any other option (timeout, notebook...) does not.
KERNEL_OPTIONS = (
    "backend",
    "kernel_name",
    "python",
    "docker",
    "network",
    "env",
    "url",
    "token",
    "host",
)


def _canonical(value: Any) -> str:
    return "" if value in (None, {}, "") else json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True)
class PoolKey:
    """What makes two kernels interchangeable: backend and kernel-shaping options."""

    backend: str = "local"
    kernel_name: str = "python3"
    python: str = ""
    docker: str = ""
    env: str = ""
    url: str = ""
    token: str = field(default="", repr=False)
    host: str = ""
    """A remote kernel's pinned host: each host of a gateway has pools of its own."""
    network: NetworkPolicy | None = field(default=None, repr=False)
    """A Docker kernel's network policy (compared whole: rules, secrets and ``ask``)."""

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> PoolKey | None:
        """The key for these session options; ``None`` if such a session cannot be pooled.

        Not pooled: a given kernel manager, and an ``environment`` not yet
        resolved into ``python`` / ``backend`` / ``docker`` (it could name any kernel).
        """
        if options.get("kernel_manager") is not None or options.get("environment") is not None:
            return None
        backend = str(options.get("backend") or "local")
        policy = options.get("network")
        return cls(
            backend=backend,
            kernel_name=(  # a language picks its kernel (python3 is only the default)
                kernel_for(str(options["language"]))
                if options.get("language")
                else str(options.get("kernel_name") or "python3")
            ),
            python=str(options.get("python") or ""),
            docker=_canonical(options.get("docker")) if backend == "docker" else "",
            env=_canonical(options.get("env")),
            url=str(options.get("url") or "") if backend == "remote" else "",
            token=str(options.get("token") or "") if backend == "remote" else "",
            host=str(options.get("host") or "") if backend == "remote" else "",
            network=NetworkPolicy.from_value(policy) if policy is not None else None,
        )

    def options(self) -> dict[str, Any]:
        """The session options this key stands for (the inverse of :meth:`of`)."""
        result: dict[str, Any] = {"backend": self.backend, "kernel_name": self.kernel_name}
        if self.python:
            result["python"] = self.python
        if self.docker:
            result["docker"] = json.loads(self.docker)
        if self.env:
            result["env"] = json.loads(self.env)
        if self.url:
            result["url"] = self.url
            result["token"] = self.token or None
        if self.host:
            result["host"] = self.host
        if self.network is not None:
            result["network"] = self.network
        return result

    @property
    def label(self) -> str:
        """A short readable name for logs and listings (never the token)."""
        extra = self.python or self.url or (f"docker{self.docker}" if self.docker else "")
        if self.host:
            extra = f"{extra} host={self.host}"
        if self.network is not None:  # the policy's repr shows header names, never secrets
            extra = f"{extra} {self.network!r}".strip()
        return f"{self.backend}:{self.kernel_name}" + (f" {extra}" if extra else "")


@dataclass
class WarmKernel:
    """A started, ready kernel waiting in a pool: its manager and its folder (if local).

    ``preload``: for a kernel forked from a zygote, what the zygote ran before
    (a :class:`~jupyter_exec.manager.zygote.Preload`, recorded in the session's notebook).
    """

    km: Any
    folder: Path | None
    started: float = field(default_factory=time.monotonic)
    preload: Any = None


KernelStarter = Callable[[PoolKey, Path | None], Awaitable[Any]]
"""Starts one kernel for a key, with the given working folder; returns its kernel manager."""


def follow_rename(km: Any, folder: Path) -> None:
    """Tell ``km`` its kernel's working folder is now ``folder`` (after a rename).

    jupyter_client keeps the launch arguments for restarts; a restart must not
    try to start in the old, now missing path.
    """
    launched = relaunch_args(km)
    if launched is not None and "cwd" in launched:
        launched["cwd"] = str(folder)
    if isinstance(km.provisioner, WorkDirFollower):
        km.provisioner.work_dir_moved(folder)


async def discard(warm: WarmKernel) -> None:
    """Shut a pooled kernel down (and its network proxy) and remove its (unused) folder."""
    with contextlib.suppress(Exception):  # already dead: nothing to stop
        await warm.km.shutdown_kernel(now=True)
    proxy = network_of(warm.km)
    if proxy is not None:
        with contextlib.suppress(Exception):
            await proxy.close()
    if warm.folder is not None:
        await asyncio.to_thread(shutil.rmtree, warm.folder, True)


async def drain(task: asyncio.Task[None] | None, ready: deque[WarmKernel], timeout: float) -> None:
    """The end of a pool's close: wait for its refill ``task`` (told to stop) to end, then shut
    down every kernel still waiting in ``ready``.

    The task is cancelled only after ``timeout``: cancelled outright, a kernel half-way
    through its start would be orphaned.
    """
    if task is not None:
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except asyncio.TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    waiting = list(ready)
    ready.clear()
    await asyncio.gather(*(discard(w) for w in waiting))


class BacksOff:
    """What a pool does when starting a kernel failed: count it, keep the error to show,
    log it, and wait (doubling up to 30 s) unless the pool is stopping."""

    failures: int
    last_error: str | None
    _stop: asyncio.Event

    async def _back_off(self, exc: Exception, what: str, backoff: float) -> float:
        """Note ``exc`` (logged after ``what``), wait ``backoff`` seconds; the next backoff."""
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        log.error("%s: %s", what, exc)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop.wait(), backoff)
        return min(backoff * 2, 30.0)


class KernelPool(BacksOff):
    """Keeps ``size`` ready kernels of one key, refilling in the background.

    ``take()`` never waits: it returns a ready kernel or ``None`` (the caller
    then starts one itself). Starts across all pools share ``starts`` (a
    semaphore), so a refill does not starve the machine of CPU.
    """

    def __init__(
        self,
        key: PoolKey,
        size: int,
        folder: Path,
        starter: KernelStarter,
        starts: asyncio.Semaphore,
        root: Path,
    ) -> None:
        self.key = key
        self.root = root
        self.size = size
        self.folder = folder
        self._starter = starter
        self._starts = starts
        self._ready: deque[WarmKernel] = deque()
        self._starting = 0
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._counter = 0
        self._closing = False
        self._stop = asyncio.Event()
        self.failures = 0
        self.last_error: str | None = None

    def __repr__(self) -> str:
        return f"<KernelPool {self.key.label} ready={len(self._ready)}/{self.size}>"

    @property
    def ready(self) -> int:
        return len(self._ready)

    def start(self) -> None:
        if self._task is None:
            self._wanted.set()
            self._task = asyncio.create_task(self._refill(), name=f"pool {self.key.label}")

    async def take(self) -> WarmKernel | None:
        """A ready kernel of this pool, now, or ``None``; starts a replacement."""
        while self._ready:
            warm = self._ready.popleft()
            self._wanted.set()
            if await _alive(warm.km):
                return warm
            log.warning("pool %s: a pooled kernel had died; discarding it", self.key.label)
            await discard(warm)
        self._wanted.set()
        return None

    async def wait_ready(self, count: int | None = None, timeout: float = 120.0) -> None:
        """Wait until ``count`` (default: all) kernels are ready (for tests and benchmarks)."""
        want = self.size if count is None else count
        deadline = time.monotonic() + timeout
        while len(self._ready) < want:
            if time.monotonic() > deadline:
                raise TimeoutError(f"pool {self.key.label}: {len(self._ready)}/{want} ready")
            await asyncio.sleep(0.02)

    async def _refill(self) -> None:
        backoff = 1.0
        while not self._closing:
            await self._wanted.wait()
            self._wanted.clear()
            while not self._closing and len(self._ready) + self._starting < self.size:
                self._starting += 1
                try:
                    warm = await self._start_one()
                except Exception as exc:
                    what = f"pool {self.key.label}: could not start a kernel"
                    backoff = await self._back_off(exc, what, backoff)
                    continue
                finally:
                    self._starting -= 1
                if warm is None:
                    return
                if self._closing:
                    await discard(warm)
                    return
                backoff = 1.0
                self._ready.append(warm)

    async def _start_one(self) -> WarmKernel | None:
        async with self._starts:
            if self._closing:
                return None
            folder: Path | None = None
            if self.key.backend != "remote":
                self._counter += 1
                folder = self.folder / f"k{self._counter}"
                folder.mkdir(parents=True, exist_ok=False)
                _own_like_root(folder, self.root)
            try:
                km = await self._starter(self.key, folder)
            except BaseException:
                if folder is not None:
                    shutil.rmtree(folder, ignore_errors=True)
                raise
        return WarmKernel(km, folder)

    async def close(self, timeout: float = 60.0) -> None:
        """Stop refilling and shut down every kernel still waiting."""
        self._closing = True
        self._stop.set()
        self._wanted.set()
        task, self._task = self._task, None
        await drain(task, self._ready, timeout)
        await asyncio.to_thread(shutil.rmtree, self.folder, True)


def _own_like_root(folder: Path, root: Path) -> None:
    """As root, give a pooled work dir to the owner of the root dir.

    A session's files should belong to whoever owns the sessions' root dir; and
    a Docker kernel started by root in a root-owned dir would have the dir
    *lent* to an unprivileged uid and handed back by path, which a rename would
    break.
    """
    if os.geteuid() != 0:
        return
    owner = root.stat()
    if owner.st_uid != 0:
        with contextlib.suppress(OSError):
            os.chown(folder, owner.st_uid, owner.st_gid)


async def _alive(km: Any) -> bool:
    try:
        return bool(await km.is_alive())
    except Exception:
        return False
