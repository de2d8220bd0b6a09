"""The MCP server's named sessions: which are open, where, and how a new one starts.

Kept apart from the tools (:mod:`jupyter_exec.mcp.tools`) and the transports
(:mod:`jupyter_exec.mcp.server`) because it is the one part of the server that
holds state: which sessions are open, in which environment, and the warm pool
or zygote that starts their kernels ahead of time. The tools only name a
session; this module decides whether that means a new kernel, an open one or
an error, and all of it is delegated to an
:class:`~jupyter_exec.manager.AsyncSessionManager`, so limits, idle culling
and shutdown behave as for every other front end.

Sessions outlive the server: each open one has a signed entry under
``<root>/.jupyter_exec/mcp-sessions/`` (:mod:`jupyter_exec.manager.saved`:
its name, work dir, notebook, backend and created time; no option, token or
policy), removed when it is closed or culled, kept when the server stops.
A server started again on the same root answers for those names: the first
tool call naming one brings it back (a new kernel of the server's
environment, its state rebuilt from its notebook by
:meth:`~jupyter_exec.AsyncSession.resume`), and ``list_sessions`` shows the
others as ``dormant`` (:class:`~jupyter_exec.manager.dormant.DormantSessions`, shared
with the REST and E2B servers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_exec.boundary.naming import validate_name
from jupyter_exec.engine.environments import DockerEnv, Environment
from jupyter_exec.engine.languages import is_default_language
from jupyter_exec.exceptions import (
    InvalidArgument,
    JupyterExecError,
    SessionLimitError,
    SessionNotFound,
)
from jupyter_exec.manager import AsyncSessionManager, SessionInfo
from jupyter_exec.manager.dormant import DormantSessions, resume_into
from jupyter_exec.manager.saved import BadEntry, SignedStore, same_fields
from jupyter_exec.session.session import AsyncSession

__all__ = ["SessionRegistry"]

log = logging.getLogger("jupyter_exec.mcp")

KIND = "mcp-sessions"
"""The registry's folder under the root: ``.jupyter_exec/mcp-sessions``."""


def _is_name(text: str) -> bool:
    try:
        validate_name(text)
    except JupyterExecError:
        return False
    return True


@dataclass(frozen=True)
class Saved:
    """A session from before the server restarted: what brings it back on first use."""

    name: str
    work_dir: str
    """Its folder under the root (one name: ``<root>/<work_dir>``)."""
    notebook: str
    """Its notebook's stem in the work dir (``<name>``, ``<name>-2``, a fork's name)."""
    backend: str
    created: str

    @classmethod
    def checked(cls, key: str, entry: dict[str, Any]) -> Saved:
        """An entry as this server writes one, or :class:`BadEntry`."""
        same_fields(entry, {"name", "work_dir", "notebook", "backend", "created"})
        if entry["name"] != key:
            raise BadEntry("its name is not its file's name")
        for field in ("work_dir", "notebook"):  # plain names: never a path, never hidden
            if not isinstance(entry[field], str) or not _is_name(entry[field]):
                raise BadEntry(f"bad {field}")
        if entry["backend"] not in ("local", "docker"):
            raise BadEntry(f"unknown backend {entry['backend']!r}")
        try:
            datetime.fromisoformat(entry["created"])
        except (TypeError, ValueError):
            raise BadEntry("bad created time") from None
        return cls(**entry)


class SessionRegistry:
    """The server's named sessions, held by an :class:`AsyncSessionManager` over ``root``.

    Each session is created on first use in ``<root>/<name>`` with the
    server's environment (or Docker, when asked for and allowed). The manager
    brings the limits (``max_sessions``), idle culling (``cull_idle_timeout``), idle
    sleep (``sleep_after``: a sleeping session's next call wakes it)
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
        sleep_after: float = 0.0,
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
            sleep_after=sleep_after,
            session_defaults={"timeout": timeout, **(session_options or {})},
            pools=[],  # the environment's pool is added once its options are known: start()
            handle_sigterm=False,  # the server's transport owns the process's signals
        )
        self._options: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self._pool_task: asyncio.Task[None] | None = None
        self._stop_hooks: list[tuple[Callable[[], Awaitable[None]], Callable[[], Collection[str]]]]
        self._stop_hooks = []
        self.saved = SignedStore(self.root, KIND, _is_name)
        self.manager.on_forget = self.saved.remove  # closed or culled: not back after a restart
        self.dormant: DormantSessions[Saved] = DormantSessions(
            {s.name: s for s in self.saved.load(Saved.checked)},
            wake=self._resume,
            forget=self.saved.remove,
            live=self.manager.__contains__,
        )

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
        await self.wake(name)
        if name not in self.manager:
            environment = self._environment_for(backend)
            options = await self._options_for(environment)
            if not is_default_language(language):  # its own kernel, not the environment's Python
                options = {k: v for k, v in options.items() if k != "python"}
                options["language"] = language
            try:
                made = await self.manager.session(name, **options)
            except SessionLimitError as exc:
                raise self._full(name, exc) from exc
            self.remember(made, environment.backend)
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

    def _full(self, name: str, exc: SessionLimitError) -> SessionLimitError:
        open_now = ", ".join(sorted(self._names())) or "none"
        return SessionLimitError(
            f"cannot start session {name!r}: this server allows {self.max_sessions} "
            f"open session(s) at once (--max-sessions) and that many are open "
            f"({open_now}); close one with close_session, or use an open one"
        )

    # -- across restarts -------------------------------------------------------------------

    def remember(self, session: AsyncSession, backend: str) -> None:
        """Keep an open session's entry, so it comes back after a restart.

        Only one whose work dir is a folder of the root (every session the server
        makes, and their forks): anything else has no place to come back to.
        """
        work_dir, notebook = session.work_dir, session.notebook_path
        name = next((i.name for i in self.manager.list() if self._is(i, session)), None)
        if name is None or notebook is None or work_dir.parent != self.root:
            return
        if notebook.parent != work_dir or not (_is_name(work_dir.name) and _is_name(notebook.stem)):
            return
        entry = {
            "name": name,
            "work_dir": work_dir.name,
            "notebook": notebook.stem,
            "backend": backend,
            "created": datetime.now(timezone.utc).isoformat(),
        }
        self.saved.save(name, entry)
        self.dormant.discard(name)

    def _is(self, info: SessionInfo, session: AsyncSession) -> bool:
        return info.notebook_path == session.notebook_path and info.work_dir == session.work_dir

    async def wake(self, name: str) -> None:
        """Bring back session ``name`` from before the restart, if it is one; else nothing.

        Concurrent first uses share one resume; a failed one leaves it dormant and
        says why (its notebook gone, the server now Docker-only, the limit reached).
        """
        if name in self.dormant:
            await self.start()
            await self.dormant.wake(name)

    async def _resume(self, saved: Saved) -> None:
        environment = self._environment_for(saved.backend)  # what the server allows now
        options = await self._options_for(environment)
        notebook = self.root / saved.work_dir / f"{saved.notebook}.ipynb"
        try:
            await resume_into(
                self.manager, saved.name, notebook, options, backend=environment.backend
            )
        except SessionLimitError as exc:
            raise self._full(saved.name, exc) from exc

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
                "state": info.state,  # idle, busy, or sleeping: woken by its next call
            }
            for info in sorted(self.manager.list(), key=lambda i: i.name)
        ] + [
            {
                "name": saved.name,
                "backend": saved.backend,
                "alive": False,
                "dormant": True,  # from before the server restarted: back on first use
                "work_dir": str(self.root / saved.work_dir),
                "notebook": str(self.root / saved.work_dir / f"{saved.notebook}.ipynb"),
                "from_pool": False,
                "idle_seconds": None,
                "network": None,
                "state": "dormant",
            }
            for saved in sorted(self.dormant.list(), key=lambda s: s.name)
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
        if await self.dormant.drop(name):  # closed before any use: no kernel
            return
        self.existing(name)
        await self.manager.close_session(name)  # its entry goes too (manager.on_forget)

    async def interrupt_running(self, name: str) -> bool:
        """Interrupt the cell session ``name`` runs; False when it runs none (or is not open)."""
        info = self._info(name)
        if info is None or not info.busy:
            return False
        await self.manager.get(name).interrupt()
        return True

    def on_stop(
        self, hook: Callable[[], Awaitable[None]], holds: Callable[[], Collection[str]]
    ) -> None:
        """Run ``hook`` first when the server stops, before any session closes.

        ``holds()`` names the sessions whose running cell the hook itself ends (an MCP
        task's: no caller waits on it, so no cancellation reaches it); :meth:`busy` leaves
        them out, so a stop does not wait out its grace for them.
        """
        self._stop_hooks.append((hook, holds))

    def busy(self) -> bool:
        """Whether any session is running a cell (a stop lets it end its own way first)."""
        held = {name for _, holds in self._stop_hooks for name in holds()}
        return any(info.busy and info.name not in held for info in self.manager.list())

    async def close_all(self) -> None:
        """Close every session and stop the pool's kernels (the stop hooks first)."""
        for hook, _ in self._stop_hooks:
            try:
                await hook()
            except Exception:  # the sessions close all the same
                log.exception("a stop hook of the MCP server failed")
        if self._pool_task is not None:
            self._pool_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pool_task
        for task in self._options.values():
            task.cancel()
        await self.manager.shutdown()
