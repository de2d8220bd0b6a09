"""The MCP server's named sessions: which are open, where, and how a new one starts.

Kept apart from the tools (:mod:`jupyter_exec.mcp.tools`) and the transports
(:mod:`jupyter_exec.mcp.server`) because it is the one part of the server that
holds state: which sessions are open, in which environment, and the warm pool
or zygote that starts their kernels ahead of time. The tools only name a
session; this module decides whether that means a new kernel, an open one or
an error, and all of it is delegated to an
:class:`~jupyter_exec.manager.AsyncSessionManager`, so limits, idle culling
and shutdown behave as for every other front end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_exec.boundary.naming import validate_name
from jupyter_exec.engine.environments import DockerEnv, Environment
from jupyter_exec.engine.session import AsyncSession
from jupyter_exec.exceptions import (
    InvalidArgument,
    JupyterExecError,
    SessionLimitError,
    SessionNotFound,
)
from jupyter_exec.manager import AsyncSessionManager, SessionInfo

__all__ = ["SessionRegistry"]

log = logging.getLogger("jupyter_exec.mcp")


class SessionRegistry:
    """The server's named sessions, held by an :class:`AsyncSessionManager` over ``root``.

    Each session is created on first use in ``<root>/<name>`` with the
    server's environment (or Docker, when asked for and allowed). The manager
    brings the limits (``max_sessions``), idle culling (``cull_idle_timeout``)
    and a warm pool of ``pool_size`` kernels of the server's environment, so
    a new session's first call need not wait for a kernel to start.
    """

    def __init__(
        self,
        root: Path,
        environment: Environment,
        *,
        timeout: float | None = 600.0,
        max_sessions: int = 16,
        pool_size: int = 0,
        cull_idle_timeout: float = 0.0,
        session_options: Mapping[str, Any] | None = None,
        zygote: dict[str, Any] | None = None,
    ) -> None:
        self.root = root.absolute()
        self.environment = environment
        self.timeout = timeout
        self.pool_size = pool_size
        self.zygote = dict(zygote or {})
        """``AsyncSessionManager`` zygote traits (``zygote_size``, ``zygote_preload``): the
        environment's sessions are then forked from a zygote (local environments only)."""
        if self.zygote.get("zygote_size", 0) > 0 and environment.backend != "local":
            raise InvalidArgument(
                "a zygote pool forks local kernels only (forks of a Docker kernel would share "
                "its container); use --pool-size for Docker sessions"
            )
        self.manager = AsyncSessionManager(
            root_dir=str(self.root),
            max_sessions=max_sessions,
            cull_idle_timeout=cull_idle_timeout,
            session_defaults={"timeout": timeout, **(session_options or {})},
            pools=[],  # the environment's pool is added once its options are known: start()
            handle_sigterm=False,  # the server's transport owns the process's signals
        )
        self._options: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self._pool_task: asyncio.Task[None] | None = None

    @property
    def max_sessions(self) -> int:
        return self.manager.max_sessions

    async def start(self) -> None:
        """Start the manager; fill the pool in the background (a venv may be made first).

        Idempotent, and called on first use too, so a registry works without it.
        """
        await self.manager.start()
        wanted = self.pool_size > 0 or self.zygote.get("zygote_size", 0) > 0
        if wanted and self._pool_task is None:
            self._pool_task = asyncio.create_task(self._fill_pool(), name="jupyter-exec mcp pool")

    async def _fill_pool(self) -> None:
        try:
            options = await self._options_for(self.environment)
            if self.zygote.get("zygote_size", 0) > 0:  # first: it serves the environment's key
                await self.manager.add_zygote(
                    self.zygote["zygote_size"],
                    self.zygote.get("zygote_preload"),
                    self.zygote.get("zygote_setup"),
                    **options,
                )
            if self.pool_size > 0:
                await self.manager.add_pool(self.pool_size, **options)
        except Exception:  # sessions still start, only without a warm kernel
            log.exception("the warm pool could not be set up")

    async def _options_for(self, environment: Environment) -> dict[str, Any]:
        """The environment's session options, prepared once (a venv may take a while).

        Shared by concurrent callers and the pool; shielded, so a caller that
        gives up does not cancel the preparation for the others.
        """
        key = repr(environment)
        task = self._options.get(key)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.ensure_future(environment.async_session_options())
            self._options[key] = task
        return await asyncio.shield(task)

    def _environment_for(self, backend: str | None) -> Environment:
        if backend in (None, "", "default") or backend == self.environment.backend:
            return self.environment
        if backend == "docker":
            return DockerEnv()
        if backend == "local":
            raise JupyterExecError(
                "this server runs code in Docker only; local sessions are not allowed"
            )
        raise ValueError(f"unknown backend {backend!r}: use 'local' or 'docker'")

    async def get(
        self, name: str, *, backend: str | None = None, language: str | None = None
    ) -> AsyncSession:
        """The session called ``name``, started now if it does not exist yet.

        ``language`` (``r``, ``javascript``...) makes a new session run that language's
        kernel; an existing session of another language is refused."""
        validate_name(name)
        await self.start()
        if name not in self.manager:
            environment = self._environment_for(backend)
            options = await self._options_for(environment)
            if language not in (None, "python"):  # its own kernel, not the environment's Python
                options = {k: v for k, v in options.items() if k != "python"}
                options["language"] = language
            try:
                await self.manager.session(name, **options)
            except SessionLimitError as exc:
                open_now = ", ".join(sorted(self._names())) or "none"
                raise SessionLimitError(
                    f"cannot start session {name!r}: this server allows {self.max_sessions} "
                    f"open session(s) at once (--max-sessions) and that many are open "
                    f"({open_now}); close one with close_session, or use an open one"
                ) from exc
        info = self._info(name) if backend not in (None, "", "default") else None
        if info is not None and backend != info.backend:
            raise JupyterExecError(
                f"session {name!r} already runs on {info.backend}; close it first "
                f"or use another name for a {backend} session"
            )
        live = self.manager.get(name)
        runs = live.language or "python"
        if language is not None and runs != language:
            raise JupyterExecError(
                f"session {name!r} runs {runs}; use another session name for {language} code"
            )
        return live

    def _info(self, name: str) -> SessionInfo | None:
        return next((i for i in self.manager.list() if i.name == name), None)

    def existing(self, name: str) -> AsyncSession:
        """The session called ``name``; :class:`SessionNotFound` if there is none."""
        if name in self.manager:
            return self.manager.get(name)
        known = ", ".join(sorted(self._names())) or "none yet"
        raise SessionNotFound(f"no session named {name!r} (open sessions: {known})")

    def _names(self) -> list[str]:
        return [i.name for i in self.manager.list()]

    def describe(self) -> list[dict[str, Any]]:
        """The open sessions (looking does not count as use for idle culling)."""
        return [
            {
                "name": info.name,
                "backend": info.backend,
                "alive": info.alive,
                "work_dir": str(info.work_dir),
                "notebook": str(info.notebook_path),
                "from_pool": info.from_pool,
                "idle_seconds": info.idle_seconds,
                "network": self._network(info),
            }
            for info in sorted(self.manager.list(), key=lambda i: i.name)
        ]

    def _network(self, info: SessionInfo) -> str | None:
        """The session's network policy, as a model should read it (None: none).

        The server's: only its own environment carries one (and every session runs in it).
        """
        environment = self.environment
        policy = environment.policy if isinstance(environment, DockerEnv) else None
        return policy.describe() if policy is not None and info.backend == "docker" else None

    def pools(self) -> list[tuple[str, int, int]]:
        """Each warm pool: its label, kernels ready, and its size."""
        return [(p.key.label, p.ready, p.size) for p in self.manager.kernel_pools]

    async def close(self, name: str) -> None:
        self.existing(name)
        await self.manager.close_session(name)

    async def close_all(self) -> None:
        """Close every session and stop the pool's kernels."""
        if self._pool_task is not None:
            self._pool_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pool_task
        for task in self._options.values():
            task.cancel()
        await self.manager.shutdown()
