"""Sandboxes and their code contexts, as sessions of the one engine (AsyncSessionManager).

::

    Sandbox "sbx-1a2b..."            work dir <root>/sbx-1a2b...  (E2B's /home/user)
      context "default" (python)  ─► manager session "sbx-1a2b..."      (pools apply)
      context "c-9f3e..."          ─► manager session "sbx-1a2b....c-9f3e..." in the same
                                      work dir (or a folder of it: the context's cwd)

Each sandbox holds a secret access token (returned once, by the create call)
that every request for it must carry; the ``debug_sandbox_id`` sandbox the
SDK's debug mode talks to exists only when the server runs in debug mode, and
is made on first use. A sandbox ends when killed or when its timeout passes
(:meth:`Sandboxes.reap`); its kernels stop, its work dir and notebooks stay.

A sandbox outlives the server (:mod:`jupyter_exec.e2b.saved`): started again on
the same root, the server knows its sandboxes (their tokens derived again, never
stored), and a sandbox's default context resumes its notebook on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import math
import os
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_exec.e2b.branching import Branching, LiveSeed, Seed
from jupyter_exec.e2b.languages import (
    DEFAULT_LISTED,
    PYTHON,
    Language,
    check_installed,
    installed,
    language_named,
    refuse_language,
)
from jupyter_exec.e2b.lasting import Lasting
from jupyter_exec.e2b.paths import HOME, SandboxPaths
from jupyter_exec.e2b.processes import Container, Processes, kernel_container
from jupyter_exec.e2b.saved import SandboxRegistry
from jupyter_exec.exceptions import (
    CheckpointError,
    InvalidArgument,
    SessionConflict,
    SessionNotFound,
)
from jupyter_exec.manager import AsyncSessionManager
from jupyter_exec.session.session import AsyncSession

__all__ = ["DEBUG_SANDBOX_ID", "Context", "Sandbox", "Sandboxes", "sandbox_options"]

log = logging.getLogger("jupyter_exec.e2b")

DEBUG_SANDBOX_ID = "debug_sandbox_id"
"""The id the SDK's debug mode uses for every sandbox (no API call, no token)."""

DEFAULT_CONTEXT = "default"
"""The default Python context's id; another language's default context is ``default-<name>``."""
ENVD_VERSION = "0.6.4"
"""The envd version we answer as: the features we serve (metadata-free uploads, stdin...)."""


KERNEL_FILES = ("kernel_startup.py", "kernel_formats.py", "kernel_images.py")
"""The in-kernel files that give a sandbox's kernels E2B's ``chart`` and ``data`` formats and
its way of showing PIL images (the first one loads the others)."""
CONTAINER_FILES = "/opt/jupyter-exec-e2b"
"""Where a Docker sandbox's container sees them (mounted read-only)."""


SERVER_SECRETS = ("E2B_API_KEY", "E2B_ACCESS_TOKEN")
"""The server's own credentials: never in a sandbox's environment (its code could use them to
reach other sandboxes through the API)."""


def host_env() -> dict[str, str]:
    """This process's environment for a local sandbox's kernels and commands, less our secrets."""
    return {k: v for k, v in os.environ.items() if k not in SERVER_SECRETS}


def sandbox_options(options: dict[str, Any]) -> dict[str, Any]:
    """The session options of a sandbox's kernels: E2B's own kernel, as far as it is ours to give.

    The kernels load :data:`KERNEL_FILES` at start (``PYTHONSTARTUP``, which
    IPython runs in every kernel, pooled or not), so the formats are there
    before the first cell and no cell is spent (or counted) on them; a Docker
    kernel gets the files mounted read-only, and its work dir at
    ``/home/user`` - where E2B's is, so paths and ``!pwd`` read the same. A
    remote kernel's machine does not have the files, and runs without.
    """
    here = Path(__file__).parent
    backend = str(options.get("backend") or "local")
    options = dict(options)
    if backend == "local":
        env = dict(options.get("env") or host_env())
        options["env"] = {**env, "PYTHONSTARTUP": str(here / KERNEL_FILES[0])}
    elif backend == "docker":
        docker = dict(options.get("docker") or {})
        docker.setdefault("work_mount", HOME)
        mounts = [f"{here / name}:{CONTAINER_FILES}/{name}:ro" for name in KERNEL_FILES]
        docker["volumes"] = [*(docker.get("volumes") or ()), *mounts]
        startup = f"{CONTAINER_FILES}/{KERNEL_FILES[0]}"
        docker["env"] = {**dict(docker.get("env") or {}), "PYTHONSTARTUP": startup}
        options["docker"] = docker
    return options


def _client_seconds(seconds: float, most: float) -> float:
    """A client's sandbox timeout, checked again where it is used: finite, 0 to ``most``."""
    if not (math.isfinite(seconds) and 0 <= seconds <= most):
        raise InvalidArgument(f"a sandbox's timeout is 0 to {most:g} seconds, not {seconds!r}")
    return float(seconds)


@dataclass
class Context:
    """One code context: a kernel of its own, a language and a cwd (as the client said it)."""

    id: str
    session_name: str
    cwd: str
    language: str = "python"

    def describe(self) -> dict[str, str]:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}


@dataclass
class Sandbox:
    """One sandbox: a work dir, contexts, a token, the create call's metadata and env."""

    id: str
    token: str | None
    paths: SandboxPaths
    template: str = "code-interpreter-v1"
    metadata: dict[str, str] = field(default_factory=dict)
    envs: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    end: float | None = None
    contexts: dict[str, Context] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    processes: Processes = field(init=False)
    salt: str | None = None
    """What its token is derived from (:mod:`jupyter_exec.e2b.saved`); None: not kept."""
    paused: bool = False
    """Paused (``pause``): its kernels asleep or closed, until ``connect`` or its next use."""
    on_timeout: str = "kill"
    """What its timeout does (``lifecycle.on_timeout``): ``kill``, or ``pause`` (its state
    saved, as :meth:`Sandboxes.pause` does, with :attr:`pause_memory`)."""
    pause_memory: bool = True
    auto_resume: bool | None = None
    """Whether its next use resumes it once paused (None: not said, which here resumes);
    False: only ``connect`` does."""

    def allows(self, token: str | None) -> bool:
        """Whether ``token`` opens this sandbox (constant time; a token-less sandbox: any)."""
        if self.token is None:
            return True
        return token is not None and hmac.compare_digest(token.encode(), self.token.encode())

    def running(self) -> bool:
        """Neither paused nor past its end (which the next reap acts on)."""
        return not self.paused and (self.end is None or self.end > time.time())

    def describe(self) -> dict[str, Any]:
        """The sandbox as the E2B API lists it."""
        end = self.end if self.end is not None else self.started + 365 * 86400
        return {
            "templateID": self.template,
            "sandboxID": self.id,
            "clientID": "jupyter-exec",
            "alias": self.template,
            "startedAt": _iso(self.started),
            "endAt": _iso(end),
            "cpuCount": os.cpu_count() or 1,
            "memoryMB": 0,
            "diskSizeMB": 0,
            "state": "paused" if self.paused else "running",
            "envdVersion": ENVD_VERSION,
            "metadata": dict(self.metadata),
            "lifecycle": {
                "onTimeout": self.on_timeout,
                "autoResume": self.auto_resume is not False and self.on_timeout == "pause",
            },
        }


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat().replace("+00:00", "Z")


class Sandboxes(Lasting, Branching):
    """Every sandbox of one server, over one :class:`AsyncSessionManager`.

    What makes them outlive the server is the :class:`~jupyter_exec.e2b.lasting.Lasting` mixin.
    """

    def __init__(
        self,
        manager: AsyncSessionManager,
        *,
        debug: bool = False,
        session_options: dict[str, Any] | None = None,
        default_timeout: float = 300.0,
        max_timeout: float = 86_400.0,
        api_key: str | None = None,
    ) -> None:
        self.manager = manager
        self.api_key = api_key
        self.debug = debug
        self.session_options = dict(session_options or {})
        self.default_timeout = default_timeout
        self.max_timeout = max_timeout
        """The longest life a client may give a sandbox (the API refuses more)."""
        self._sandboxes: dict[str, Sandbox] = {}
        self.saved: SandboxRegistry | None = None
        self._notebooks: dict[str, str] = {}
        self._stopping = False
        self._snapshot_locks: dict[str, asyncio.Lock] = {}

    # -- sandboxes --------------------------------------------------------------------------

    def _new(self, sandbox_id: str, token: str | None, **fields: Any) -> Sandbox:
        paths = SandboxPaths(self.manager.root / sandbox_id)  # made by its first kernel or file
        sandbox = Sandbox(sandbox_id, token, paths, **fields)
        backend = str(self.session_options.get("backend") or "local")
        env = {**host_env(), **sandbox.envs} if backend == "local" else dict(sandbox.envs)
        if backend == "local":
            # Its shells' home is its folder (E2B's /home/user): a login shell reads none of
            # the host user's profile, which may hang it (pyenv's rehash lock) or be left
            # half-run, locked, by a command killed as it starts.
            env["HOME"] = sandbox.envs.get("HOME", str(paths.root))
        policy = self.session_options.get("network")  # its secrets: redacted from commands too
        sandbox.processes = Processes(
            paths.root, env, backend=backend, container=lambda: self._container(sandbox),
            secrets=policy.secret_values() if policy is not None else (),
        )  # fmt: skip
        self._sandboxes[sandbox_id] = sandbox
        return sandbox

    async def create(
        self,
        *,
        template: str | None = None,
        metadata: dict[str, str] | None = None,
        envs: dict[str, str] | None = None,
        timeout: float | None = None,
        lifecycle: tuple[str, bool, bool | None] = ("kill", True, None),
        seed: Seed | LiveSeed | None = None,
    ) -> Sandbox:
        """A new sandbox with its token, its default Python kernel started.

        ``timeout``: its life in seconds, a client's (checked by the API: finite, at most
        :attr:`max_timeout`); None takes the server's default, whose 0 means no end.
        ``lifecycle``: what its timeout does (``kill`` or ``pause``), whether that pause
        keeps memory, and ``auto_resume``. ``seed``: a snapshot's files and state to start
        from (``jupyter_exec.e2b.branching``).
        """
        sandbox_id = f"sbx-{secrets.token_hex(8)}"
        token, salt = self._token(sandbox_id)
        if timeout is None:
            seconds = self.default_timeout
            end = time.time() + seconds if 0 < seconds < math.inf else None
        else:
            end = time.time() + _client_seconds(timeout, self.max_timeout)
        sandbox = self._new(
            sandbox_id,
            token,
            template=template or "code-interpreter-v1",
            metadata={str(k): str(v) for k, v in (metadata or {}).items()},
            envs={str(k): str(v) for k, v in (envs or {}).items()},
            end=end,
            salt=salt,
            on_timeout=lifecycle[0],
            pause_memory=lifecycle[1],
            auto_resume=lifecycle[2],
        )
        try:
            if isinstance(seed, LiveSeed):
                await self.start_fork(sandbox, seed)
            elif seed is not None:
                await asyncio.to_thread(self.seed_files, sandbox, seed)
            _, session = await self.context_session(sandbox, None)
            if seed is not None and not isinstance(seed, LiveSeed):
                await self.seed_memory(session, seed)
        except BaseException:
            await self.kill(sandbox_id)
            raise
        self._remember(sandbox)
        log.info("sandbox %s created in %s", sandbox_id, sandbox.paths.root)
        return sandbox

    async def _container(self, sandbox: Sandbox) -> Container:
        """A Docker sandbox's container: its default context's kernel's (started, or woken,
        if need be)."""
        _, session = await self.context_session(sandbox, None)
        await session.wake()
        return await asyncio.to_thread(kernel_container, session)

    def get(self, sandbox_id: str) -> Sandbox:
        """The live sandbox ``sandbox_id`` (the debug one is made on first use in debug mode)."""
        sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None and self.debug and sandbox_id == DEBUG_SANDBOX_ID:
            sandbox = self._new(DEBUG_SANDBOX_ID, None)
        if sandbox is None:
            raise SessionNotFound(f"sandbox {sandbox_id!r} was not found")
        return sandbox

    def find(self, sandbox_id: str) -> Sandbox | None:
        return self._sandboxes.get(sandbox_id)

    def every(self) -> list[Sandbox]:
        return list(self._sandboxes.values())

    def set_timeout(self, sandbox: Sandbox, seconds: float) -> None:
        """A client's new timeout: the sandbox ends ``seconds`` from now (0: at the next reap)."""
        sandbox.end = time.time() + _client_seconds(seconds, self.max_timeout)
        self._remember(sandbox)

    async def kill(self, sandbox_id: str) -> None:
        """Stop the sandbox's kernels; its files and notebooks stay in its work dir."""
        sandbox = self._sandboxes.pop(sandbox_id, None)
        self._notebooks.pop(sandbox_id, None)
        if sandbox is None:
            raise SessionNotFound(f"sandbox {sandbox_id!r} was not found")
        names = [c.session_name for c in sandbox.contexts.values()]
        # its kernels killed, not asked to shut down: nothing more is asked of them (1 s less)
        await asyncio.gather(sandbox.processes.kill_all(),
                             *(self._close(n, now=True) for n in names))  # fmt: skip
        sandbox.paths.close()
        if self.dormant is not None:  # one from before a restart, killed before its first use
            self.dormant.discard(sandbox_id)
        if self.saved is not None and not self._stopping:  # the server stopping: it comes back
            self.saved.remove(sandbox_id)
        log.info("sandbox %s killed", sandbox_id)

    async def pause(self, sandbox: Sandbox, *, memory: bool = True) -> None:
        """Pause ``sandbox``: its commands killed, and its contexts' kernels put to sleep (their
        state saved, their processes and a Docker sandbox's container stopped) or, without
        ``memory``, closed (its files alone are kept). It lives on until killed; ``connect``
        or its next use resumes it, each kernel woken by its next call.

        :class:`~jupyter_exec.SessionConflict` when paused already; with ``memory``, a
        context whose memory cannot be saved (a kernel of another language than Python)
        raises :class:`~jupyter_exec.CheckpointError` naming it: it keeps running, the
        others are asleep and the sandbox is not paused (``memory=False`` pauses it).
        """
        async with sandbox.lock:
            if sandbox.paused:
                raise SessionConflict(f"sandbox {sandbox.id!r} is paused already")
            names = [c.session_name for c in sandbox.contexts.values()]
            open_ = [(n, self.manager.get(n)) for n in names if n in self.manager]
            await sandbox.processes.kill_all()
            refused: list[str] = []
            for name, session in open_:
                if not memory:
                    await self._close(name)
                    continue
                try:
                    await session.sleep()
                except CheckpointError as exc:
                    refused.append(str(exc))
            if refused:
                raise CheckpointError(
                    "the sandbox was not paused: " + "; ".join(refused) + " (its files are "
                    "kept either way: pause without memory to stop every kernel)"
                )
            sandbox.paused, sandbox.end = True, None  # a paused sandbox lasts until killed
            self._remember(sandbox)  # paused after a restart too
        log.info("sandbox %s paused (memory: %s)", sandbox.id, memory)

    def resume(self, sandbox: Sandbox, seconds: float | None) -> None:
        """A paused sandbox running again for ``seconds`` (None: the server's default); its
        kernels wake on their next call. Nothing for one not paused."""
        if not sandbox.paused:
            return
        sandbox.paused = False
        if seconds is None:
            default = self.default_timeout
            sandbox.end = time.time() + default if 0 < default < math.inf else None
            self._remember(sandbox)
        else:
            self.set_timeout(sandbox, seconds)  # (remembered there)
        log.info("sandbox %s resumed", sandbox.id)

    async def _close(self, name: str, *, now: bool = False) -> None:
        with contextlib.suppress(SessionNotFound):
            await self.manager.close_session(name, now=now)

    async def reap(self) -> list[str]:
        """End the sandboxes whose timeout has passed: killed, or paused where their
        lifecycle says so (``on_timeout: pause``); returns their ids."""
        now = time.time()
        expired = [s for s in self.every() if s.end is not None and s.end <= now]
        for sandbox in expired:
            if sandbox.on_timeout == "pause" and not sandbox.paused:
                await self._pause_at_timeout(sandbox)
                continue
            with contextlib.suppress(SessionNotFound):
                await self.kill(sandbox.id)
        return [s.id for s in expired]

    async def _pause_at_timeout(self, sandbox: Sandbox) -> None:
        """Pause a sandbox whose timeout passed; one whose memory cannot be saved (a kernel
        of another language) keeps its files alone, as a pause without memory does."""
        try:
            await self.pause(sandbox, memory=sandbox.pause_memory)
        except CheckpointError as exc:
            log.warning("sandbox %s: paused with its files alone at its timeout: %s",
                        sandbox.id, exc)  # fmt: skip
            await self.pause(sandbox, memory=False)
        except SessionConflict:
            pass  # paused meanwhile

    async def close_all(self) -> None:
        """Stop every sandbox's kernels as the server stops (their entries stay)."""
        self._stopping = True
        for sandbox_id in list(self._sandboxes):
            with contextlib.suppress(SessionNotFound):
                await self.kill(sandbox_id)

    # -- contexts ---------------------------------------------------------------------------

    def _options(self, sandbox: Sandbox) -> dict[str, Any]:
        options = dict(self.session_options)
        if sandbox.envs:
            base = host_env() if options.get("backend", "local") == "local" else {}
            options["env"] = {**base, **dict(options.get("env") or {}), **sandbox.envs}
        return options

    def default_context(self, sandbox: Sandbox, language: Language = PYTHON) -> Context:
        """``language``'s default context (listed from the start; its kernel starts on use)."""
        context_id = DEFAULT_CONTEXT if language is PYTHON else f"{DEFAULT_CONTEXT}-{language.name}"
        context = sandbox.contexts.get(context_id)
        if context is None:
            name = sandbox.id if language is PYTHON else f"{sandbox.id}.{context_id}"
            context = Context(context_id, name, sandbox.paths.home, language.name)
            sandbox.contexts[context_id] = context
        return context

    def _backend(self) -> str:
        return str(self.session_options.get("backend") or "local")

    def _serves(self, language: Language) -> bool:
        """Whether this server's sandboxes run ``language`` (its kernel is installed, or in
        the Docker image the sandboxes use)."""
        try:
            self._refuse(language.name)
        except InvalidArgument:
            return False
        return installed(language, self._backend())

    def _refuse(self, language: object) -> Language:
        image = (self.session_options.get("docker") or {}).get("image")
        return refuse_language(language, self._backend(), str(image) if image else None)

    async def context_session(
        self, sandbox: Sandbox, context_id: object, language: object = None
    ) -> tuple[Context, AsyncSession]:
        """A context and its kernel: ``context_id``'s, else ``language``'s default (started)."""
        if context_id is not None and not isinstance(context_id, str):
            raise InvalidArgument("'context_id' must be a string: the id create_code_context gave")
        if sandbox.paused and sandbox.auto_resume is False:
            raise SessionConflict(
                f"sandbox {sandbox.id!r} is paused and does not resume on use (its lifecycle's "
                "auto_resume is false): connect to it first"
            )
        self.resume(sandbox, None)  # a paused sandbox used: resumed (E2B's auto_resume)
        if context_id is None or context_id == DEFAULT_CONTEXT:
            found = self._refuse(language if context_id is None else None)
            context = self.default_context(sandbox, found)
            async with sandbox.lock:
                if found is PYTHON:
                    await self._resumed(sandbox, context)
                    options = self._options(sandbox)
                    session = await self.manager.session(context.session_name, **options)
                elif context.session_name in self.manager:
                    session = self.manager.get(context.session_name)
                else:
                    check_installed(found, self._backend())
                    session = await self._start(sandbox, context, found, None)
            return context, await self._live_or_closed(sandbox, context, session)
        made = sandbox.contexts.get(context_id)
        if made is None:
            raise SessionNotFound(f"context {context_id!r} was not found in this sandbox")
        if made.id.startswith(f"{DEFAULT_CONTEXT}-") and made.session_name not in self.manager:
            return await self.context_session(sandbox, None, made.language)  # listed, not started
        return made, self.manager.get(made.session_name)

    async def _live_or_closed(
        self, sandbox: Sandbox, context: Context, session: AsyncSession
    ) -> AsyncSession:
        """``session``, unless its sandbox was killed while it started or woke: then it is
        closed too (the kill had listed the contexts before it existed) and the caller is
        told the sandbox is gone."""
        if self._sandboxes.get(sandbox.id) is sandbox:
            return session
        await self._close(context.session_name, now=True)
        raise SessionNotFound(f"sandbox {sandbox.id!r} was killed")

    async def _start(
        self, sandbox: Sandbox, context: Context, language: Language, cwd: str | None
    ) -> AsyncSession:
        """Start ``context``'s kernel of ``language`` in the work dir (or its folder ``cwd``)."""
        folder, _ = sandbox.paths.folder(cwd, create=True)  # a planted link: refused here
        options = self._options(sandbox)
        if language is not PYTHON:
            options["kernel_name"] = language.kernel_name
            base = host_env() if self._backend() == "local" else {}  # never the host's to Docker
            options["env"] = {**dict(options.get("env") or base), **language.kernel_env}

        async def start() -> AsyncSession:
            sandbox.paths.folder(cwd)  # again, just before: the kernel pins it once more
            session = AsyncSession(work_dir=folder, name=context.session_name, **options)
            await session.start()
            setup = language.startup_code(sandbox.envs)
            if setup is not None:
                await session.execute(setup, timeout=60)
            return session

        return await self.manager.add(context.session_name, start, backend=self._backend())

    async def create_context(
        self, sandbox: Sandbox, *, language: object = None, cwd: object = None
    ) -> Context:
        """A new context: its own kernel of ``language``, in the work dir (or ``cwd`` in it)."""
        found = self._refuse(language)
        if cwd is not None and not isinstance(cwd, str):
            raise InvalidArgument("'cwd' must be a string: a folder of the sandbox")
        check_installed(found, self._backend())
        _, shown = sandbox.paths.folder(cwd, create=True)  # a planted link: refused here
        context_id = f"c-{secrets.token_hex(6)}"
        context = Context(context_id, f"{sandbox.id}.{context_id}", shown, found.name)
        await self._start(sandbox, context, found, cwd)
        sandbox.contexts[context_id] = context
        return context

    def list_contexts(self, sandbox: Sandbox) -> list[Context]:
        """The default contexts first (Python's, and JavaScript's where its kernel is installed,
        as E2B lists them), then the ones the client made, oldest first."""
        for name in DEFAULT_LISTED:
            language = language_named(name)
            if language is PYTHON or self._serves(language):
                self.default_context(sandbox, language)
        defaults = sorted(
            (c for c in sandbox.contexts.values() if c.id.startswith(DEFAULT_CONTEXT)),
            key=lambda c: c.id != DEFAULT_CONTEXT,  # Python's first
        )
        made = [c for c in sandbox.contexts.values() if not c.id.startswith(DEFAULT_CONTEXT)]
        return [*defaults, *made]

    async def restart_context(self, sandbox: Sandbox, context_id: str) -> None:
        _, session = await self.context_session(sandbox, context_id)
        await session.restart()

    async def remove_context(self, sandbox: Sandbox, context_id: str) -> None:
        context = sandbox.contexts.get(context_id)
        if context is None:
            raise SessionNotFound(f"context {context_id!r} was not found in this sandbox")
        del sandbox.contexts[context_id]
        await self._close(context.session_name)
