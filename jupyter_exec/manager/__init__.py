"""Session managers: many named sessions, warm kernel pools, zygote pools, limits and culling.

* :mod:`~jupyter_exec.manager.pool` - warm kernel pools and how a pooled kernel gets its work dir;
* :mod:`~jupyter_exec.manager.zygote` / :mod:`~jupyter_exec.manager.zygote_pool` - kernels
  forked ahead of time from a template that imported the heavy libraries;
* :mod:`~jupyter_exec.manager.aio` - :class:`AsyncSessionManager`, the engine;
* :mod:`~jupyter_exec.manager.blocking` - :class:`SessionManager`, its blocking face.
"""

from typing import TYPE_CHECKING

from jupyter_exec._lazy import lazy_names

if TYPE_CHECKING:
    from jupyter_exec.manager.aio import AsyncSessionManager, SessionInfo
    from jupyter_exec.manager.blocking import SessionManager
    from jupyter_exec.manager.pool import KernelPool, PoolKey
    from jupyter_exec.manager.zygote import Preload
    from jupyter_exec.manager.zygote_pool import ZygotePool

__all__ = [
    "AsyncSessionManager",
    "KernelPool",
    "PoolKey",
    "Preload",
    "SessionInfo",
    "SessionManager",
    "ZygotePool",
]

if not TYPE_CHECKING:  # each loaded on first use: a submodule's import does not load them all
    __getattr__, __dir__ = lazy_names(
        __name__,
        {
            "AsyncSessionManager": "jupyter_exec.manager.aio",
            "KernelPool": "jupyter_exec.manager.pool",
            "PoolKey": "jupyter_exec.manager.pool",
            "Preload": "jupyter_exec.manager.zygote",
            "SessionInfo": "jupyter_exec.manager.aio",
            "SessionManager": "jupyter_exec.manager.blocking",
            "ZygotePool": "jupyter_exec.manager.zygote_pool",
        },
    )
