"""A session's network proxy as held by a kernel that does not own it.

A Docker session with a policy has one proxy, owned by whoever started it: the session's
first kernel (closed by that handle's ``shutdown``), a pooled kernel's lender, or the server
extension's session entry. Every kernel the engine later makes from the session's state (a
fork, the kernel an undo or a restore starts, the one a recovery after a death starts) runs
in the same container and goes out through that same proxy; given :func:`shared` of it as
its ``network``, its cells record their connections and redact the policy's secrets like the
first kernel's, and stopping it leaves the proxy running for its owner to close, once.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SharedProxy", "owner_of", "shared"]


class SharedProxy:
    """A non-owning view of a proxy: everything but :meth:`close` reaches the proxy itself."""

    def __init__(self, proxy: Any) -> None:
        object.__setattr__(self, "_proxy", owner_of(proxy))

    def __getattr__(self, name: str) -> Any:
        if name == "_proxy":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self._proxy, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._proxy, name, value)

    def __repr__(self) -> str:
        return f"SharedProxy({self._proxy!r})"

    async def close(self) -> None:
        """Not this kernel's to close: the proxy ends with its owner."""


def owner_of(proxy: Any) -> Any:
    """The proxy itself behind any number of shared views of it."""
    while isinstance(proxy, SharedProxy):
        proxy = object.__getattribute__(proxy, "_proxy")
    return proxy


def shared(proxy: Any) -> SharedProxy | None:
    """A non-owning view of ``proxy`` for another kernel of its session (``None``: none)."""
    return None if proxy is None else SharedProxy(proxy)
