"""Session managers: many named sessions, warm kernel pools, limits and idle culling.

* :mod:`~jupyter_exec.manager.pool` - warm kernel pools and how a pooled kernel gets its work dir;
* :mod:`~jupyter_exec.manager.aio` - :class:`AsyncSessionManager`, the engine;
* :mod:`~jupyter_exec.manager.blocking` - :class:`SessionManager`, its blocking face.
"""

from jupyter_exec.manager.aio import AsyncSessionManager, SessionInfo
from jupyter_exec.manager.blocking import SessionManager
from jupyter_exec.manager.pool import KernelPool, PoolKey

__all__ = ["AsyncSessionManager", "KernelPool", "PoolKey", "SessionInfo", "SessionManager"]
