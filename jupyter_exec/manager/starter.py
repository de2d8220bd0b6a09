"""Starting kernels for warm pools: the same kernels a session would start, made ready early.

A pooled kernel is launched by :func:`~jupyter_exec.session.launch.launch_kernel`, exactly
as :class:`~jupyter_exec.AsyncSession` would launch it for the same options,
then warmed up and left without a client: the session that takes it connects
its own. A kernel with a network policy keeps its proxy (lent to its kernel
manager, :func:`~jupyter_exec.session.launch.lend_network`) for the session to take over.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpec

from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.manager.pool import PoolKey
from jupyter_exec.options import DEFAULT_STARTUP_TIMEOUT, SessionOptions
from jupyter_exec.session.launch import kernel_spec, launch_kernel, lend_network

__all__ = ["PooledKernelStarter"]


class PooledKernelStarter:
    """Starts one kernel for a :class:`PoolKey`; a ``KernelStarter`` for the pools."""

    def __init__(self, startup_timeout: float = DEFAULT_STARTUP_TIMEOUT) -> None:
        self.startup_timeout = startup_timeout
        self._specs: dict[PoolKey, KernelSpec | None] = {}

    async def __call__(self, key: PoolKey, folder: Path | None) -> Any:
        handle = await self.launch(key, folder)
        try:
            await warm_up(handle, self.startup_timeout)
        except BaseException:
            await handle.shutdown(now=True)
            raise
        finally:
            handle.kc.stop_channels()
        if handle.network is not None:
            lend_network(handle.km, handle.network)
        return handle.km

    async def launch(self, key: PoolKey, folder: Path | None) -> KernelHandle:
        """A connected, ready kernel for ``key`` in ``folder`` (its kernelspec made once)."""
        options = SessionOptions.from_mapping(
            {**key.options(), "startup_timeout": self.startup_timeout}
        )
        spec = None
        if options.backend != "remote":
            if key not in self._specs:  # made once: probing an interpreter takes a subprocess
                self._specs[key] = await kernel_spec(options)
            spec = self._specs[key]
        return await launch_kernel(options, folder, spec=spec)


async def warm_up(handle: KernelHandle, timeout: float) -> None:
    """Run one silent no-op, so the session's first cell does not pay IPython's lazy set-up.

    ``silent`` leaves no trace: no history, no execution count, no outputs.
    Only for Python kernels, whose no-op we know.
    """
    if handle.kernel_info.get("language_info", {}).get("name") != "python":
        return
    await handle.run_silent("pass", time.monotonic() + timeout)
