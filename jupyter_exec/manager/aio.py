"""Many named sessions under one root dir: warm pools, limits, idle culling, clean shutdown.

::

    AsyncSessionManager(root_dir=..., pool_size=2, max_sessions=20, cull_idle_timeout=600)
      session("a") ─► exists? return it
                  ─► limits ─► its kernel options have a zygote pool (zygote_size)?
                        yes: a kernel forked from the zygote (ready, or forked now), as below
                  ─► pool of its kernel options has a warm kernel?
                        yes: rename <root>/.pool/<m>/<k> ─► <root>/a, attach (one round trip)
                        no:  start a kernel in <root>/a (and the pool refills meanwhile)
      culler (background): sleep sessions idle longer than sleep_after (their kernel
                           stopped, their state saved, woken by their next call);
                           close those idle longer than cull_idle_timeout
      shutdown / SIGTERM: close every session, stop every pooled kernel

Each session is an ordinary :class:`~jupyter_exec.AsyncSession` with its own
kernel, its work dir ``<root_dir>/<name>`` and its notebook there. Executions
on different sessions run concurrently; on one session they queue in order
(the session's FIFO lock). A name used again after its session was closed gets
the same work dir (files persist), a fresh kernel, and a new notebook
``<name>-2.ipynb`` so the old record is kept.

:class:`SessionManager` is the blocking face, on the same private loop thread
as :class:`~jupyter_exec.Session`. The server extension and the MCP server use
:class:`AsyncSessionManager` (configurable as ``c.AsyncSessionManager.*``).

This module is the manager's face (its traits, lifecycle and public methods);
the books of named sessions and the limits are in
:mod:`~jupyter_exec.manager.registry`, the choice of zygote, warm pool or cold
start in :mod:`~jupyter_exec.manager.create`, idle culling in
:mod:`~jupyter_exec.manager.culling`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import os
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, Float, Int, List, Unicode
from traitlets.config import LoggingConfigurable

from jupyter_exec.exceptions import InvalidArgument, SessionClosedError, SessionNotFound
from jupyter_exec.manager.create import create_entry
from jupyter_exec.manager.culling import cull_loop, idle_names, sleep_idle
from jupyter_exec.manager.entries import Entry, SessionInfo
from jupyter_exec.manager.pool import POOL_DIR, PoolKey
from jupyter_exec.manager.pools import AnyPool, Pools
from jupyter_exec.manager.registry import SessionRegistry
from jupyter_exec.manager.signals import LoopSigterm
from jupyter_exec.manager.zygote import DEFAULT_PRELOAD, Preload
from jupyter_exec.manager.zygote_pool import ZygotePool
from jupyter_exec.models import Execution
from jupyter_exec.options import SessionOptions
from jupyter_exec.session.session import AsyncSession, OutputCallback

__all__ = ["AsyncSessionManager", "SessionInfo"]

log = logging.getLogger("jupyter_exec.manager")


class _PathTrait(Unicode):  # type: ignore[type-arg]
    """A folder: a str or any ``os.PathLike`` (kept as a str, as traitlets config gives it)."""

    def validate(self, obj: Any, value: Any) -> Any:
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        return super().validate(obj, value)


def _pool_size(options: dict[str, Any], default: int) -> int:
    return int(options.get("size", default))


class AsyncSessionManager(LoggingConfigurable):
    """Many named :class:`~jupyter_exec.AsyncSession` objects, warm pools, limits and culling.

    Use ``async with AsyncSessionManager(root_dir=...) as m:`` or ``await
    m.start()`` / ``await m.close()``. Every option is a configurable trait.
    """

    root_dir = _PathTrait(
        "",
        help="Folder holding one work dir per session (<root_dir>/<name>). "
        "Empty: a new temporary folder, kept after shutdown.",
    ).tag(config=True)
    max_sessions = Int(0, help="Most sessions open at once (0: no limit).").tag(config=True)
    max_sessions_per_backend = Dict(
        value_trait=Int(),
        help='Most sessions open at once per backend, e.g. {"docker": 4} (missing: no limit).',
    ).tag(config=True)
    pool_size = Int(
        0,
        help="Ready kernels kept per pool (0: no pools). A pool's own 'size' overrides it.",
    ).tag(config=True)
    pools = List(
        Dict(),
        default_value=[{}],
        help="Kernel configurations to keep warm: session options (backend, kernel_name, "
        "python, docker, env, url, token), each optionally with its own 'size'. "
        "The default, [{}], is the default local kernel.",
    ).tag(config=True)
    zygote_size = Int(
        0,
        help="Kernels forked ahead of time from a zygote: a template kernel that imported "
        "zygote_preload once (0: no zygote). It serves the sessions of session_defaults' "
        "kernel (local kernels only), each starting with those modules already imported, "
        "in tens of milliseconds, sharing their memory with the zygote.",
    ).tag(config=True)
    zygote_preload = List(
        Unicode(),
        default_value=list(DEFAULT_PRELOAD),
        help="Modules the zygote imports (sys.modules only: no name is bound in a session).",
    ).tag(config=True)
    zygote_setup = Unicode(
        "",
        help="Python code the zygote runs after the imports, in the user namespace (e.g. "
        "'import pandas as pd'); recorded as the first cell of each session's notebook, so "
        "replay and resume run it too.",
    ).tag(config=True)
    pool_start_concurrency = Int(
        2, help="Pooled kernels started at the same time, across all pools."
    ).tag(config=True)
    cull_idle_timeout = Float(
        0.0, help="Close sessions idle for this many seconds (0: never)."
    ).tag(config=True)
    sleep_after = Float(
        0.0,
        help="Put sessions idle for this many seconds to sleep (0: never): the state saved, "
        "the kernel stopped, the session still listed (sleeping) and woken by its next call. "
        "Sessions that cannot sleep (not Python, remote, save_state off) stay awake.",
    ).tag(config=True)
    cull_interval = Float(30.0, help="Seconds between two looks for idle sessions.").tag(
        config=True
    )
    session_defaults = Dict(
        help="Default AsyncSession options for every session (timeout, backend, docker...)."
    ).tag(config=True)
    handle_sigterm = Bool(
        False,
        help="On SIGTERM, close every session, then let the signal take its course. "
        "Only when the event loop runs in the main thread; leave off inside host apps "
        "(Jupyter server) that handle signals themselves.",
    ).tag(config=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._registry = SessionRegistry()
        self._pools: Pools | None = None
        self._root: Path | None = None
        self._culler: asyncio.Task[None] | None = None
        self._state = "new"  # new -> running -> closing -> closed
        self._sigterm = LoopSigterm(self.shutdown)
        self.on_forget: Callable[[str], None] | None = None
        """Called with a session's name when it is closed for good (:meth:`close_session`,
        culled), not when the manager shuts down: a host that keeps sessions across its
        restarts (:mod:`jupyter_exec.manager.saved`) forgets that one."""

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        """The folder holding the sessions' work dirs."""
        if self._root is None:
            raise SessionClosedError("the session manager has not been started")
        return self._root

    async def start(self) -> AsyncSessionManager:
        """Create the root dir, fill the pools (in the background) and start culling."""
        if self._state in ("closing", "closed"):
            raise SessionClosedError("this session manager was shut down; create a new one")
        if self._state == "running":
            return self
        if self.root_dir:
            self._root = Path(self.root_dir).expanduser().absolute()
            self._root.mkdir(parents=True, exist_ok=True)
        else:
            self._root = Path(tempfile.mkdtemp(prefix="jupyter-exec-sessions-"))
            log.warning("jupyter-exec: sessions in %s (temporary, kept)", self._root)
        self._pools = Pools(
            self._root,
            self._root / POOL_DIR / f"{os.getpid()}-{uuid.uuid4().hex[:6]}",
            self.pool_start_concurrency,
            float(self.session_defaults.get("startup_timeout", 60)),
        )
        self._state = "running"
        try:
            if self.zygote_size > 0:
                preload = Preload(tuple(self.zygote_preload), self.zygote_setup)
                self._add_zygote({}, self.zygote_size, preload)
            for options in self.pools:
                size = _pool_size(options, self.pool_size)
                if size > 0:
                    self._add_pool({k: v for k, v in options.items() if k != "size"}, size)
        except BaseException:  # a bad pool configuration: nothing may be left running
            await self.shutdown()
            raise
        self._culler = asyncio.create_task(cull_loop(self), name="jupyter-exec culler")
        if self.handle_sigterm:
            self._sigterm.install()
        return self

    async def close(self, name: str | None = None) -> None:
        """Close the manager: every session and every pooled kernel. Idempotent.

        ``close()`` closes the object it is called on, as everywhere else in the package; one
        session is closed with :meth:`close_session`. ``close(name)``, the spelling of 0.2 for
        closing one session, still works for now and warns.
        """
        if name is not None:
            warnings.warn(
                "AsyncSessionManager.close(name) is deprecated and will close the manager in a "
                "later release: use close_session(name)",
                DeprecationWarning,
                stacklevel=2,
            )
            await self.close_session(name)
            return
        await self.shutdown()

    async def shutdown(self) -> None:
        """Close every session and stop every pooled kernel. Idempotent (same as ``close()``)."""
        if self._state in ("closing", "closed", "new"):
            self._state = "closed" if self._state == "new" else self._state
            return
        self._state = "closing"
        if self._culler is not None:
            self._culler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._culler
        pending = [future for _, future in self._registry.creating.values()]
        await asyncio.gather(*pending, return_exceptions=True)
        names = list(self._registry.sessions)
        pools = self._pools
        log.info("shutting down %d session(s) and %d pool(s)", len(names), len(pools or ()))
        await asyncio.gather(
            *(self._registry.close_entry(n, "manager shutdown") for n in names),
            *([pools.close()] if pools is not None else []),
        )
        await asyncio.gather(*self._registry.closing, return_exceptions=True)  # e.g. cut-off culls
        self._sigterm.remove()
        self._state = "closed"

    async def __aenter__(self) -> AsyncSessionManager:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def _check_running(self) -> None:
        if self._state != "running":
            raise SessionClosedError(
                "the session manager is not running (use `async with` or start())"
                if self._state == "new"
                else "the session manager was shut down"
            )

    # -- sessions ----------------------------------------------------------------------------

    async def session(self, name: str, **options: Any) -> AsyncSession:
        """The session called ``name``, started now (with ``options``) if there is none.

        ``options`` are :class:`~jupyter_exec.AsyncSession` options over
        ``session_defaults`` (except ``work_dir``: it is ``<root_dir>/<name>``).
        They only matter when the session is created. Raises
        :class:`~jupyter_exec.SessionLimitError` when a limit forbids a new one.
        """
        existing = await self._existing(name)
        if existing is not None:
            return existing
        for reserved in ("work_dir", "name"):
            if reserved in options:
                raise TypeError(f"{reserved}= is set by the manager (<root_dir>/<name>)")
        opts = {**self.session_defaults, **options}
        SessionOptions.from_mapping(opts)  # refuse bad options now, before any kernel starts
        backend = str(opts.get("backend") or "local")
        return await self._register(name, backend, lambda: self._create(name, opts, backend))

    async def add(
        self,
        name: str,
        create: Callable[[], Awaitable[AsyncSession]],
        *,
        backend: str = "local",
    ) -> AsyncSession:
        """Manage a session that ``create`` makes and starts: the caller's own kind of session.

        For hosts whose sessions the manager cannot make itself: the Jupyter
        server extension's sessions run on the server's kernels, in a work dir
        a client chose, with a notebook that merges with a person's edits.
        Limits (counted under ``backend``), listing, :meth:`close`, culling
        and shutdown apply as to any session; pools and ``session_defaults``
        do not (``create`` makes the kernel). ``create`` is only called once
        the limits allow one more session, so a refused session starts no
        kernel. Returns the existing session if ``name`` is already open.
        """
        existing = await self._existing(name)
        if existing is not None:
            return existing

        async def made() -> Entry:
            return Entry(await create(), backend, from_pool=False)

        return await self._register(name, backend, made)

    async def _existing(self, name: str) -> AsyncSession | None:
        """The open (or being created) session ``name``; ``None`` if a new one may be made."""
        self._check_running()
        return await self._registry.existing(name)

    async def _register(
        self, name: str, backend: str, make: Callable[[], Awaitable[Entry]]
    ) -> AsyncSession:
        """Check the limits, hold ``name`` while ``make`` runs, then keep its session."""
        self._registry.check_limits(backend, self.max_sessions, self.max_sessions_per_backend)
        return await self._registry.register(name, backend, make)

    def get(self, name: str) -> AsyncSession:
        """The open session called ``name``; :class:`~jupyter_exec.SessionNotFound` if none."""
        entry = self._registry.live_entry(name)
        if entry is None:
            raise SessionNotFound(f"no open session named {name!r}")
        entry.last_used = time.monotonic()
        return entry.session

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._registry.live_entry(name) is not None

    def __len__(self) -> int:
        return len(self.list())

    def list(self) -> builtins.list[SessionInfo]:
        """Every open session, oldest first."""
        now = time.monotonic()
        live = self._registry.live_entry
        entries = [(n, live(n)) for n in builtins.list(self._registry.sessions)]
        return [entry.info(name, now) for name, entry in entries if entry is not None]

    async def execute(
        self,
        name: str,
        code: str,
        timeout: float | None = None,
        on_output: OutputCallback | None = None,
    ) -> Execution:
        """Run ``code`` in session ``name`` (created with the defaults if there is none)."""
        session = await self.session(name)
        # No bookkeeping here: idle time is observed from the session's own last_activity.
        return await session.execute(code, timeout=timeout, on_output=on_output)

    async def close_session(self, name: str, *, now: bool = False) -> None:
        """Close session ``name`` (its kernel stops; work dir and notebook stay).

        ``now``: its kernel killed at once, not asked to shut down
        (:meth:`AsyncSession.close`)."""
        if self._registry.live_entry(name) is None:
            raise SessionNotFound(f"no open session named {name!r}")
        await self._registry.close_entry(name, "closed by request", now=now)
        self._forget(name)

    def _forget(self, name: str) -> None:
        if self.on_forget is not None:
            try:
                self.on_forget(name)
            except Exception:
                log.exception("forgetting session %s failed", name)

    async def _create(self, name: str, opts: dict[str, Any], backend: str) -> Entry:
        return await create_entry(self.root, self._pools, name, opts, backend)

    # -- pools -------------------------------------------------------------------------------

    def _key(self, options: dict[str, Any], what: str) -> PoolKey:
        merged = {**self.session_defaults, **options}
        SessionOptions.from_mapping(merged)  # a misspelt option is refused, not ignored
        key = PoolKey.of(merged)
        if key is None:
            raise InvalidArgument(
                f"a {what} cannot be made for a given kernel_manager or an unresolved environment"
            )
        return key

    def _add_pool(self, options: dict[str, Any], size: int) -> AnyPool:
        assert self._pools is not None
        return self._pools.add(self._key(options, "pool"), size)

    async def add_pool(self, size: int | None = None, **options: Any) -> AnyPool:
        """Keep ``size`` (default ``pool_size``) kernels warm for sessions with ``options``."""
        self._check_running()
        return self._add_pool(options, self.pool_size if size is None else size)

    def _add_zygote(self, options: dict[str, Any], size: int, preload: Preload) -> ZygotePool:
        assert self._pools is not None
        return self._pools.add_zygote(self._key(options, "zygote"), size, preload)

    async def add_zygote(
        self,
        size: int | None = None,
        preload: Sequence[str] | None = None,
        setup: str | None = None,
        **options: Any,
    ) -> ZygotePool:
        """Keep ``size`` (default ``zygote_size``) kernels forked from a zygote for sessions
        with ``options``; ``preload`` / ``setup`` default to the ``zygote_*`` traits."""
        self._check_running()
        chosen = Preload(
            tuple(self.zygote_preload if preload is None else preload),
            self.zygote_setup if setup is None else setup,
        )
        return self._add_zygote(options, self.zygote_size if size is None else size, chosen)

    @property
    def kernel_pools(self) -> builtins.list[AnyPool]:
        """Every pool (``pool.key.label``, ``.ready``, ``.size``), e.g. for a status page."""
        return self._pools.all() if self._pools is not None else []

    def pool(self, **options: Any) -> AnyPool | None:
        """The pool serving sessions with these options, if there is one."""
        if self._pools is None:
            return None
        return self._pools.get(PoolKey.of({**self.session_defaults, **options}))

    async def wait_for_pools(self, timeout: float = 120.0) -> None:
        """Wait until every pool is full (tests, benchmarks, a server warming up); a zygote
        pool whose preload failed raises :class:`~jupyter_exec.KernelStartError`."""
        if self._pools is not None:
            await self._pools.wait(timeout)

    # -- culling -----------------------------------------------------------------------------

    async def sleep_idle(self) -> builtins.list[str]:
        """Put the sessions idle for ``sleep_after`` seconds to sleep; returns their names."""
        if self.sleep_after <= 0 or self._state != "running":
            return []
        return await sleep_idle(self._registry, self.sleep_after)

    async def cull_idle(self) -> builtins.list[str]:
        """Close the sessions idle for ``cull_idle_timeout`` seconds; returns their names."""
        if self.cull_idle_timeout <= 0 or self._state != "running":
            return []
        idle = idle_names(self._registry, self.cull_idle_timeout)
        await asyncio.gather(*(self._registry.close_entry(n, "idle") for n in idle))
        for name in idle:
            self._forget(name)
        return idle
