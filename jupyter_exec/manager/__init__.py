"""Session managers: many named sessions, warm kernel pools, zygote pools, limits and culling.

* :mod:`~jupyter_exec.manager.pool` - warm kernel pools and how a pooled kernel gets its work dir;
* :mod:`~jupyter_exec.manager.zygote` / :mod:`~jupyter_exec.manager.zygote_pool` - kernels
  forked ahead of time from a template that imported the heavy libraries;
* :mod:`~jupyter_exec.manager.aio` - :class:`AsyncSessionManager`, the engine;
* :mod:`~jupyter_exec.manager.blocking` - :class:`SessionManager`, its blocking face.
"""

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
