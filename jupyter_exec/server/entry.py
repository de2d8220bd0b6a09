"""One session of the extension: an AsyncSession on a server kernel, and where the server knows it.

:class:`ServerAsyncSession` is the engine's session with what sharing a kernel with
JupyterLab asks for (activity seen from the kernel's own messages, a notebook that
merges with a person's edits, the server's cleanup on close); :class:`ServerSession`
is the registry's entry: the REST id, the server's kernel id and Jupyter session,
the fork family and the network policy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.network import NetworkPolicy
from jupyter_exec.server import live
from jupyter_exec.server.activity import KernelActivity
from jupyter_exec.server.recorder import MergingRecorder
from jupyter_exec.session.session import AsyncSession, Backend

if TYPE_CHECKING:
    from jupyter_exec.engine.kernel import KernelHandle
    from jupyter_exec.network.proxy import NetworkProxy

__all__ = ["ServerAsyncSession", "ServerSession"]

log = logging.getLogger("jupyter_exec.server")


class ServerAsyncSession(AsyncSession):
    """An AsyncSession on a server kernel, whose notebook merges with a person's edits.

    The server kernel is shared with whoever opens the notebook in JupyterLab,
    so :attr:`busy` and :attr:`last_activity` also count what others run on it
    (:class:`~jupyter_exec.server.activity.KernelActivity` watches the kernel's
    execute requests, whoever sends them; the server's own state and last
    activity count too): the manager's culler must not close a session a
    person is working in. ``on_close``
    runs after :meth:`close`, so however the session ends (a DELETE, the
    culler, shutdown), the server's side of it is cleaned up in one place.
    """

    recorder_class = MergingRecorder

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_kernel: Any = kwargs.get("kernel_manager")
        self.on_close: Callable[[], Awaitable[None]] | None = None
        self.on_sleep: Callable[[], Awaitable[dict[str, str]]] | None = None
        """How the extension puts this session to sleep (:mod:`jupyter_exec.server.sleeping`):
        its kernel is the server's, so the engine's own sleep would refuse it."""
        self.activity = KernelActivity(self.server_kernel)
        self.network_proxy: NetworkProxy | None = None
        """The proxy of a Docker kernel with a network policy (set before start)."""
        self.hooks.add(live.LiveCells(self))  # after the state's: it sees the final record

    async def sleep(self) -> dict[str, str]:
        """Asleep the extension's way (the session closed, its state signed, its kernel
        given back to the server; woken on its next use): what the culler's ``sleep_after``
        and ``POST .../sleep`` do. The names its saved state does not hold."""
        if self.on_sleep is None:
            return await super().sleep()
        return await self.on_sleep()

    async def start(self) -> ServerAsyncSession:
        await super().start()
        kernel = self.kernel_slot.kernel
        if self.network_proxy is not None and kernel is not None:
            # What records each cell's connections and redacts the policy's secrets.
            kernel.network = self.network_proxy
        if not self.activity.start():
            log.info("jupyter-exec: kernel messages cannot be watched; using the server's state")
        return self

    @property
    def handle(self) -> KernelHandle | None:
        """The kernel serving the session now (a fork's, an undo's, or the first one)."""
        return self.kernel_slot.kernel

    def rebind(self, server_kernel: Any) -> None:
        """The server's manager of the kernel now serving the session: watch that one."""
        self.activity.close()
        self.server_kernel = server_kernel
        self.activity = KernelActivity(server_kernel)
        live.watch_person_runs(self)  # the run order goes on across the swap
        self.activity.start()

    @property
    def recorder(self) -> MergingRecorder | None:
        recorder = self._recorder
        return recorder if isinstance(recorder, MergingRecorder) else None

    @property
    def busy(self) -> bool:
        """Ours or anyone's code is running (or queued) on the kernel."""
        return (
            super().busy
            or self.activity.busy
            or getattr(self.server_kernel, "execution_state", None) == "busy"
        )

    @property
    def last_activity(self) -> float:
        """When we or anyone else last used the kernel, as ``time.monotonic()``."""
        ours = max(super().last_activity, self.activity.last_activity or 0.0)
        stamp = getattr(self.server_kernel, "last_activity", None)
        if not isinstance(stamp, datetime):
            return ours
        if stamp.tzinfo is None:  # jupyter_server's are aware; be lenient with others
            stamp = stamp.replace(tzinfo=timezone.utc)
        ago = max((datetime.now(timezone.utc) - stamp).total_seconds(), 0.0)
        return max(ours, time.monotonic() - ago)

    async def close(self, *, now: bool = False) -> None:
        if self.closed:
            return
        self.activity.close()
        try:
            await super().close(now=now)
        finally:
            if self.on_close is not None:
                await self.on_close()


@dataclass
class ServerSession:
    """One session of the extension: the AsyncSession plus where the server knows it."""

    id: str
    session: ServerAsyncSession
    backend: Backend
    kernel_name: str
    kernel_id: str
    work_dir: Path
    created: str
    jupyter_session_id: str | None = None
    parent: str | None = None
    """The id of the session this one was forked from."""
    forks: list[str] = field(default_factory=list)
    """The ids of the sessions forked from this one."""
    held: list[str] = field(default_factory=list)
    """Kernels kept for the session besides its own: a Docker session's first kernel,
    whose container runs the kernel an undo or restore started."""
    policy: NetworkPolicy | None = None
    proxy: NetworkProxy | None = None
    borrowed: str | None = None
    """The id of the running kernel the session was attached to (a person's): never shut
    down by the session, which owns its kernel only while it is on another one."""

    def __post_init__(self) -> None:
        self.first_kernel_id = self.kernel_id

    @property
    def name(self) -> str:
        return self.session.name

    @property
    def notebook(self) -> Path:
        path = self.session.notebook_path
        assert path is not None  # the extension always records
        return path
