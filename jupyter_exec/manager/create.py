"""Making one managed session: from a zygote, from a warm pool, or started cold.

The choice lives apart from the manager's bookkeeping because it is the one
place that knows how pooled kernels are adopted: a zygote pool serves every
session of its kernel options (each must start with the preload, so no cold
fallback); a warm pool serves a new work dir (a pooled kernel's folder is
renamed into place, impossible over an existing one) or any remote session;
otherwise, or when adoption fails, the session starts its own kernel.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from jupyter_exec.boundary.folders import refuse_if_lent, trust_of
from jupyter_exec.exceptions import KernelStartError
from jupyter_exec.manager.adopt import adopt
from jupyter_exec.manager.entries import Entry, incarnation
from jupyter_exec.manager.pool import PoolKey
from jupyter_exec.manager.pools import Pools
from jupyter_exec.manager.zygote_pool import ZygotePool
from jupyter_exec.options import SessionOptions
from jupyter_exec.session.session import AsyncSession

__all__ = ["create_entry"]


async def create_entry(
    root: Path, pools: Pools | None, name: str, opts: dict[str, Any], backend: str
) -> Entry:
    """A started session ``name`` in ``<root>/<name>`` with ``opts``, and how it was made."""
    target = root / name
    if trust_of(backend) == "host":  # a name a Docker session had: its folder is not the host's
        refuse_if_lent(target, f"session {name!r} ({backend})")
    session_name = incarnation(target, name, opts)
    key = PoolKey.of(opts)
    pool = pools.get(key) if pools is not None else None
    if isinstance(pool, ZygotePool):  # every session of its key starts with the preload
        session = await adopt(await pool.take(target), target, session_name, opts)
        if session is None:
            raise KernelStartError("a kernel forked from the zygote could not be used")
        return Entry(session, backend, from_pool=True)
    if pool is not None and (backend == "remote" or not target.exists()):
        warm = await pool.take()
        if warm is not None:
            session = await adopt(warm, target, session_name, opts)
            if session is not None:
                return Entry(session, backend, from_pool=True)
    session = AsyncSession(
        options=SessionOptions.from_mapping({**opts, "work_dir": target, "name": session_name})
    )
    try:
        await session.start()
    except BaseException:
        with contextlib.suppress(Exception):
            await session.close()
        raise
    return Entry(session, backend, from_pool=False)
