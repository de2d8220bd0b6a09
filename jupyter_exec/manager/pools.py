"""The pools of one session manager, by key: warm pools and zygote pools, at most one per key.

A key (:class:`~jupyter_exec.manager.pool.PoolKey`) is what decides a kernel:
backend, interpreter, Docker options, network policy, environment variables.
Sessions whose options make that key take their kernels from its pool. A
zygote pool, when there is one for a key, serves that key alone: its sessions
must all start with its preload, so no plain pool is kept beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from pathlib import Path

from jupyter_exec.exceptions import InvalidArgument
from jupyter_exec.manager.pool import KernelPool, PoolKey
from jupyter_exec.manager.starter import PooledKernelStarter
from jupyter_exec.manager.zygote import Preload
from jupyter_exec.manager.zygote_pool import ZygotePool

__all__ = ["AnyPool", "Pools"]

log = logging.getLogger("jupyter_exec.manager")

AnyPool = KernelPool | ZygotePool


class Pools:
    """Every pool of one manager, in ``folder`` (``<root_dir>/.pool/<pid>-<id>``)."""

    def __init__(self, root: Path, folder: Path, concurrency: int, startup_timeout: float):
        self.root = root
        self.folder = folder
        self._starts = asyncio.Semaphore(max(1, concurrency))
        self._starter = PooledKernelStarter(startup_timeout)
        self._by_key: dict[PoolKey, AnyPool] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def all(self) -> list[AnyPool]:
        return list(self._by_key.values())

    def get(self, key: PoolKey | None) -> AnyPool | None:
        return self._by_key.get(key) if key is not None else None

    def add(self, key: PoolKey, size: int) -> AnyPool:
        """Keep ``size`` kernels of ``key`` warm (the zygote pool, if ``key`` has one)."""
        pool = self._by_key.get(key)
        if isinstance(pool, ZygotePool):
            log.info("pool %s: its sessions come from the zygote pool instead", key.label)
            return pool
        if pool is not None:
            pool.size = size
            pool.start()
            return pool
        folder = self.folder / f"p{len(self._by_key) + 1}"
        pool = KernelPool(key, size, folder, self._starter, self._starts, self.root)
        self._by_key[key] = pool
        pool.start()
        log.info("pool %s: keeping %d kernel(s) warm", key.label, size)
        return pool

    def add_zygote(self, key: PoolKey, size: int, preload: Preload) -> ZygotePool:
        """Keep ``size`` kernels of ``key`` forked from a zygote that ran ``preload``."""
        existing = self._by_key.get(key)
        if isinstance(existing, ZygotePool) and existing.preload == preload:
            existing.size = size
            existing.start()
            return existing
        if existing is not None:
            raise InvalidArgument(
                f"the sessions of {key.label} already have a pool; a zygote for them is set "
                "first (zygote_size) and once"
            )
        folder = self.folder / f"z{len(self._by_key) + 1}"
        pool = ZygotePool(key, size, preload, folder, self._starter, self._starts, self.root)
        self._by_key[key] = pool
        pool.start()
        log.info(
            "zygote pool %s: %d kernel(s) forked from a zygote with %s",
            key.label,
            size,
            ", ".join(preload.modules) or "no modules",
        )
        return pool

    async def wait(self, timeout: float) -> None:
        await asyncio.gather(*(p.wait_ready(timeout=timeout) for p in self._by_key.values()))

    async def close(self) -> None:
        """Stop every pool (their kernels, zygotes and folders)."""
        pools = list(self._by_key.values())
        self._by_key.clear()
        await asyncio.gather(*(pool.close() for pool in pools))
        await asyncio.to_thread(shutil.rmtree, self.folder, True)
        with contextlib.suppress(OSError):  # only if no other manager uses it
            self.folder.parent.rmdir()
