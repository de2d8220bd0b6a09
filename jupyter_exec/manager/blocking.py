"""SessionManager: the blocking face of AsyncSessionManager.

The manager and all its sessions live on the private event loop thread that
every blocking :class:`~jupyter_exec.Session` uses, so its background work
(pool refills, culling) goes on while the caller's thread does something else,
and sessions it hands out are ordinary ``Session`` objects. Executions on
different sessions from different threads run concurrently.
"""

from __future__ import annotations

import builtins
import contextlib
import signal
import threading
import warnings
from types import FrameType
from typing import Any

from jupyter_exec.engine.loop_thread import run_blocking
from jupyter_exec.manager.aio import AsyncSessionManager, SessionInfo
from jupyter_exec.models import Execution
from jupyter_exec.session.session import AsyncSession
from jupyter_exec.sync import Session, _ClosedAtExit

__all__ = ["SessionManager"]

_open_managers: _ClosedAtExit[SessionManager] = _ClosedAtExit(lambda manager: manager.shutdown())


def _wrap(session: AsyncSession) -> Session:
    """A blocking ``Session`` over an already started ``AsyncSession``."""
    return Session.from_async(session)


class SessionManager(contextlib.AbstractContextManager["SessionManager"]):
    """Many named :class:`~jupyter_exec.Session` objects with warm pools, limits and culling.

    Takes the traits of :class:`AsyncSessionManager` as keyword arguments
    (``root_dir``, ``pool_size``, ``max_sessions``, ``cull_idle_timeout``...)::

        with SessionManager(root_dir="runs", pool_size=2) as manager:
            a = manager.session("a")          # from the warm pool: no kernel start
            a.execute("x = 1")
            manager.execute("b", "print(2)")  # creates "b" on first use

    ``handle_sigterm`` (default: ``None``, automatic) installs a SIGTERM
    handler that shuts everything down and then lets the signal terminate the
    process, when called in the main thread and no SIGTERM handler is set yet;
    ``False`` never installs one.
    """

    def __init__(self, *, handle_sigterm: bool | None = None, **traits: Any) -> None:
        self._async = AsyncSessionManager(**traits)
        self._wrappers: dict[str, Session] = {}
        self._previous_sigterm: Any = None
        run_blocking(self._async.start())
        _open_managers.add(self)
        if handle_sigterm is not False:
            self._install_sigterm(explicit=handle_sigterm is True)

    @property
    def async_manager(self) -> AsyncSessionManager:
        """The underlying :class:`AsyncSessionManager` (its coroutines run on the session loop)."""
        return self._async

    @property
    def root(self) -> Any:
        return self._async.root

    def session(self, name: str, **options: Any) -> Session:
        """The session called ``name``, created with ``options`` if there is none."""
        session = run_blocking(self._async.session(name, **options))
        wrapper = self._wrappers.get(name)
        if wrapper is None or wrapper.async_session is not session:
            wrapper = self._wrappers[name] = _wrap(session)
        return wrapper

    def get(self, name: str) -> Session:
        """The open session called ``name``; ``SessionNotFound`` if none."""
        session = self._async.get(name)
        wrapper = self._wrappers.get(name)
        if wrapper is None or wrapper.async_session is not session:
            wrapper = self._wrappers[name] = _wrap(session)
        return wrapper

    def list(self) -> builtins.list[SessionInfo]:
        return self._async.list()

    def __contains__(self, name: object) -> bool:
        return name in self._async

    def __len__(self) -> int:
        return len(self._async)

    def execute(self, name: str, code: str, timeout: float | None = None) -> Execution:
        """Run ``code`` in session ``name`` (created with the defaults if there is none)."""
        session = self.session(name)
        return session.execute(code, timeout=timeout)

    def close_session(self, name: str, *, now: bool = False) -> None:
        """Close session ``name``: its kernel stops (``now``: killed); work dir and notebook
        stay."""
        self._wrappers.pop(name, None)
        run_blocking(self._async.close_session(name, now=now))

    def close(self, name: str | None = None) -> None:
        """Close the manager: every session and every pooled kernel. Idempotent.

        One session is closed with :meth:`close_session`; ``close(name)``, the spelling of 0.2,
        still closes that session for now and warns.
        """
        if name is not None:
            warnings.warn(
                "SessionManager.close(name) is deprecated and will close the manager in a later "
                "release: use close_session(name)",
                DeprecationWarning,
                stacklevel=2,
            )
            self.close_session(name)
            return
        self.shutdown()

    def cull_idle(self) -> builtins.list[str]:
        """Close sessions idle past ``cull_idle_timeout`` now; returns their names."""
        return run_blocking(self._async.cull_idle())

    def wait_for_pools(self, timeout: float = 120.0) -> None:
        """Block until every warm pool is full."""
        run_blocking(self._async.wait_for_pools(timeout))

    def shutdown(self) -> None:
        """Close every session and stop every pooled kernel. Idempotent (same as ``close()``)."""
        self._wrappers.clear()
        run_blocking(self._async.shutdown())
        _open_managers.discard(self)
        self._restore_sigterm()

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"<SessionManager {len(self)} session(s) in {self._async.root}>"

    # -- SIGTERM -----------------------------------------------------------------------------

    def _install_sigterm(self, *, explicit: bool) -> None:
        if threading.current_thread() is not threading.main_thread():
            if explicit:
                raise RuntimeError("handle_sigterm=True needs the main thread")
            return
        current = signal.getsignal(signal.SIGTERM)
        if current not in (signal.SIG_DFL, None) and not explicit:
            return  # the host application handles SIGTERM: leave it alone
        self._previous_sigterm = current
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _restore_sigterm(self) -> None:
        previous, self._previous_sigterm = self._previous_sigterm, None
        if (
            previous is not None
            and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == self._on_sigterm
        ):
            signal.signal(signal.SIGTERM, previous)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous_sigterm
        try:
            self.shutdown()
        finally:
            # Then let SIGTERM do what it did before we were here.
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)
