"""Starting kernels for warm pools: the same kernels a session would start, made ready early.

A pooled kernel is started exactly as :class:`~jupyter_exec.AsyncSession`
would start it for the same options (kernelspec for ``python=``, Docker
kernelspec for ``backend="docker"``, the remote server's kernel for
``backend="remote"``), then warmed up and left without a client: the
session that takes it connects its own.
"""

from __future__ import annotations

import asyncio
import json
import queue
import time
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpec

from jupyter_exec.kernel import KernelHandle, kernel_spec_for_python, start_kernel
from jupyter_exec.manager.pool import PoolKey

__all__ = ["PooledKernelStarter"]


class PooledKernelStarter:
    """Starts one kernel for a :class:`PoolKey`; a ``KernelStarter`` for the pools."""

    def __init__(self, startup_timeout: float = 60.0) -> None:
        self.startup_timeout = startup_timeout
        self._specs: dict[PoolKey, KernelSpec | None] = {}

    async def __call__(self, key: PoolKey, folder: Path | None) -> Any:
        if key.backend == "remote":
            from jupyter_exec.remote import start_remote_kernel

            return await start_remote_kernel(
                key.url,
                key.token or None,
                key.kernel_name,
                self.startup_timeout,
                env=json.loads(key.env) if key.env else None,
            )
        if folder is None:
            raise ValueError("a local or Docker pooled kernel needs a folder")
        handle = await start_kernel(
            kernel_name=key.kernel_name,
            spec=await self._kernel_spec(key),
            cwd=folder,
            env=json.loads(key.env) if key.env else None,
            startup_timeout=self.startup_timeout,
        )
        try:
            await warm_up(handle, self.startup_timeout)
        finally:
            handle.kc.stop_channels()
        return handle.km

    async def _kernel_spec(self, key: PoolKey) -> KernelSpec | None:
        """The kernelspec for a key, made once (probing an interpreter takes a subprocess)."""
        if key not in self._specs:
            if key.backend == "docker":
                from jupyter_exec.backends import docker_kernel_spec

                self._specs[key] = docker_kernel_spec(json.loads(key.docker or "{}"))
            elif key.python:
                self._specs[key] = await asyncio.to_thread(kernel_spec_for_python, key.python)
            else:
                self._specs[key] = None
        return self._specs[key]


async def warm_up(handle: KernelHandle, timeout: float) -> None:
    """Run one silent no-op, so the session's first cell does not pay IPython's lazy set-up.

    ``silent`` leaves no trace: no history, no execution count, no outputs.
    Only for Python kernels, whose no-op we know.
    """
    if handle.kernel_info.get("language_info", {}).get("name") != "python":
        return
    msg_id = handle.kc.execute("pass", silent=True, store_history=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = await handle.shell.get(0.5)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            return
