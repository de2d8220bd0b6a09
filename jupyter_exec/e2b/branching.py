"""Snapshots and forks of E2B sandboxes: a mixin of ``Sandboxes`` (e2b/sandboxes.py).

::

    create_snapshot(memory)   the sandbox's lock ─► its default context's namespace saved
                              (a durable checkpoint: what pickles) ─► the work dir copied
                              (e2b/copying.py) and the checkpoint moved beside it, in the
                              server's data dir ─► a signed entry owned by the API key
                              (e2b/snapshots.py); the sandbox runs on
    create(<snapshot id>)     a new sandbox: the snapshot's files copied into its work dir,
                              its default kernel started, the checkpoint loaded (checked
                              against the host's MAC by the kernel's loader) ─► running
    fork(count)               one capture as above (not listed, not kept) ─► ``count``
                              sandboxes made from it at once, each with its own id, token,
                              work dir and kernel; each succeeds or fails on its own

A sandbox's default Python context is what carries memory. A context the client made (any
language) is not carried: a memory snapshot or a fork of a sandbox with one refuses, saying
which (:class:`~jupyter_exec.CheckpointError`, 409), and a filesystem-only snapshot
(``memory: false``) takes the files alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.boundary.folders import trust_of
from jupyter_exec.boundary.naming import notebook_name
from jupyter_exec.boundary.paths import Folder
from jupyter_exec.e2b.copying import copy_tree
from jupyter_exec.e2b.snapshots import SavedSnapshot, SnapshotStore, owner_of
from jupyter_exec.exceptions import CheckpointError, SessionNotFound, WorkDirShared
from jupyter_exec.manager import AsyncSessionManager
from jupyter_exec.network.shared import shared
from jupyter_exec.state.api import refuse_other_languages
from jupyter_exec.state.branching import running_kernel
from jupyter_exec.state.forking import request_fork
from jupyter_exec.state.kernel_calls import ask

if TYPE_CHECKING:
    from jupyter_exec.e2b.sandboxes import Context, Sandbox
    from jupyter_exec.session.session import AsyncSession

__all__ = ["Branching", "LiveSeed", "Seed"]

log = logging.getLogger("jupyter_exec.e2b")

_OWN = re.compile(r"\.sbx-[0-9a-f]{16}.*_(state|checkpoints)")
"""jupyter-exec's own folders in a sandbox's work dir (its kernels' state and checkpoints):
not the sandbox's files, never copied."""


Seed = tuple[Path, str | None]
"""Where a new sandbox starts from: a snapshot's folder, and its checkpoint's name (or None)."""


@dataclass(frozen=True)
class LiveSeed:
    """A local sandbox's fork: its files copied, its default kernel forked (copy-on-write)."""

    sandbox: Sandbox
    session: AsyncSession


class Branching:
    """Snapshots and forks; see the module docstring."""

    manager: AsyncSessionManager
    snapshots: SnapshotStore | None = None
    api_key: str | None = None
    """The server's API key: its snapshots are owned by it (:func:`owner_of`)."""
    _snapshot_locks: dict[str, asyncio.Lock]

    # Provided by Sandboxes.
    async def context_session(
        self, sandbox: Sandbox, context_id: object, language: object = None
    ) -> tuple[Context, AsyncSession]:
        raise NotImplementedError

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
        raise NotImplementedError

    @property
    def owner(self) -> str:
        """The owner fingerprint of the server's API key (derived from the host's key)."""
        return owner_of(self.api_key)

    def store(self) -> SnapshotStore:
        if self.snapshots is None:
            self.snapshots = SnapshotStore(self.manager.root)
        return self.snapshots

    def snapshot_lock(self, snapshot_id: str) -> asyncio.Lock:
        """One lock per snapshot: a sandbox starting from it and its deletion take turns."""
        return self._snapshot_locks.setdefault(snapshot_id, asyncio.Lock())

    # -- taking -----------------------------------------------------------------------------

    def _refuse_other_contexts(self, sandbox: Sandbox) -> None:
        """CheckpointError naming the contexts other than the default Python one that run:
        their memory cannot be carried."""
        made = [c for c in sandbox.contexts.values() if not c.id.startswith("default")]
        others = [c for c in sandbox.contexts.values() if c.id.startswith("default-")]
        live = [c for c in (*made, *others) if c.session_name in self.manager]
        if live:
            listed = ", ".join(f"{c.id} ({c.language})" for c in live)
            raise CheckpointError(
                f"the memory of this sandbox's other contexts cannot be carried: {listed}; "
                "only the default Python context's namespace is (take a filesystem-only "
                "snapshot, mode='filesystem', to keep the files alone)"
            )

    async def _capture(self, sandbox: Sandbox, folder: Path, memory: bool) -> str | None:
        """Copy ``sandbox``'s files (and, with ``memory``, its default context's namespace)
        into the new ``folder``; returns the checkpoint's name (None without memory)."""
        if memory:
            self._refuse_other_contexts(sandbox)
        _, session = await self.context_session(sandbox, None)  # resumed and started
        checkpoint = None
        async with sandbox.lock:
            if memory:
                checkpoint = await session.checkpoint(f"e2b-{folder.name}")
                if checkpoint.path is None:
                    raise CheckpointError("the sandbox's state could not be written to disk")
            try:
                path = checkpoint.path if checkpoint is not None else None
                await asyncio.to_thread(self._copy_out, sandbox, folder, path)
            finally:
                if checkpoint is not None and checkpoint.path is not None:
                    await asyncio.to_thread(shutil.rmtree, checkpoint.path, True)
        return checkpoint.name if checkpoint is not None else None

    def _copy_out(self, sandbox: Sandbox, folder: Path, checkpoint: Path | None) -> None:
        self.store().data.mkdir(parents=True, exist_ok=True, mode=0o700)
        folder.mkdir(mode=0o700)
        held = sandbox.paths.held()
        copy_tree(held.fd, folder / "files", skip=lambda name: bool(_OWN.fullmatch(name)))
        if checkpoint is not None:
            (folder / "memory").mkdir(mode=0o700)
            relative = checkpoint.relative_to(sandbox.paths.root).as_posix()
            with sandbox.paths.open(relative) as source:
                copy_tree(source.fd, folder / "memory" / checkpoint.name)

    async def take_snapshot(
        self, sandbox: Sandbox, *, memory: bool, name: str | None
    ) -> SavedSnapshot:
        """A snapshot of ``sandbox``, kept and owned by this server's API key."""
        store = self.store()
        snapshot_id = store.new_id()
        folder = store.folder(snapshot_id)
        try:
            checkpoint = await self._capture(sandbox, folder, memory)
            snapshot = SavedSnapshot(
                id=snapshot_id, owner=self.owner, sandbox=sandbox.id, memory=memory,
                names=[name] if name else [], created=time.time(), checkpoint=checkpoint,
                trust=trust_of(self._backend()),
            )  # fmt: skip
            store.save(snapshot)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, folder, True)
            raise
        log.info("sandbox %s: snapshot %s taken (memory: %s)", sandbox.id, snapshot_id, memory)
        return snapshot

    async def delete_snapshot(self, wanted: str) -> None:
        """Delete this key's snapshot ``wanted``; SessionNotFound if it has none so named."""
        store = self.store()
        snapshot = store.get(wanted, self.owner)
        async with self.snapshot_lock(snapshot.id):  # after a sandbox starting from it
            await asyncio.to_thread(store.remove, snapshot)
        log.info("snapshot %s deleted", snapshot.id)

    # -- starting from one ------------------------------------------------------------------

    async def from_snapshot(self, wanted: str, **fields: Any) -> Sandbox:
        """A new sandbox from this key's snapshot ``wanted`` (SessionNotFound if none)."""
        store = self.store()
        snapshot = store.get(wanted, self.owner)
        if snapshot.trust == "kernel" and trust_of(self._backend()) == "host":
            raise WorkDirShared(
                f"snapshot {wanted!r} was taken of a Docker or remote sandbox: what its kernel "
                "wrote never becomes a local sandbox's files (start it on a server with "
                "--backend docker)"
            )
        async with self.snapshot_lock(snapshot.id):
            if store.find(snapshot.id, self.owner) is None:  # deleted while we waited
                raise SessionNotFound(f"snapshot {wanted!r} was not found")
            seed = (store.folder(snapshot.id), snapshot.checkpoint)
            return await self.create(template=snapshot.id, seed=seed, **fields)

    def seed_files(self, sandbox: Sandbox, seed: Seed) -> None:
        """Before its first kernel: the snapshot's files become the new sandbox's work dir."""
        folder, _ = seed
        with Folder.open(folder.parent, f"{folder.name}/files") as files:
            copy_tree(files.fd, sandbox.paths.root, mode=0o755)

    async def seed_memory(self, session: AsyncSession, seed: Seed) -> None:
        """The snapshot's namespace loaded into the new sandbox's default kernel."""
        folder, checkpoint = seed
        if checkpoint is not None:
            await session.restore(folder / "memory" / checkpoint)

    # -- forking ----------------------------------------------------------------------------

    async def fork(
        self, sandbox: Sandbox, count: int, **fields: Any
    ) -> list[Sandbox | BaseException]:
        """``count`` new sandboxes from ``sandbox``'s files and default context's state; each
        a sandbox or why it could not start. A local sandbox's kernel is forked (copy-on-write:
        :func:`~jupyter_exec.state.forking.fork_kernel`, the ``count`` children started at
        once); a Docker one's state is captured
        once and loaded into each fork's own container."""
        if self._backend() == "local":
            return await self._fork_live(sandbox, count, **fields)
        store = self.store()
        folder = store.folder(store.new_id())
        try:
            checkpoint = await self._capture(sandbox, folder, memory=True)
            made = await self._create_forks(sandbox, count, (folder, checkpoint), fields)
        finally:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(shutil.rmtree, folder, True)
        log.info("sandbox %s forked %d times", sandbox.id, count)
        return made

    async def _fork_live(
        self, sandbox: Sandbox, count: int, **fields: Any
    ) -> list[Sandbox | BaseException]:
        self._refuse_other_contexts(sandbox)
        _, session = await self.context_session(sandbox, None)  # resumed and started
        await session.wake()
        refuse_other_languages(session, "fork()")
        seed = LiveSeed(sandbox, session)
        async with sandbox.lock:
            # At once: each fork holds the parent's kernel only for its fork request
            # (start_fork); copying the files and starting the child overlap the others'.
            made = await self._create_forks(sandbox, count, seed, fields)
        log.info("sandbox %s forked %d times (copy-on-write)", sandbox.id, count)
        return made

    async def _create_forks(
        self, sandbox: Sandbox, count: int, seed: Any, fields: dict[str, Any]
    ) -> list[Sandbox | BaseException]:
        """``count`` sandboxes like ``sandbox`` from ``seed`` (a live parent or a captured
        state), made side by side; each one's failure in its own place."""
        made = await asyncio.gather(
            *(
                self.create(template=sandbox.template, metadata=dict(sandbox.metadata),
                            envs=dict(sandbox.envs), seed=seed, **fields)
                for _ in range(count)
            ),
            return_exceptions=True,
        )  # fmt: skip
        return list(made)

    def _backend(self) -> str:
        raise NotImplementedError

    async def start_fork(self, child: Sandbox, seed: LiveSeed) -> None:
        """Before the new sandbox's first use: the parent's files copied into its work dir,
        and its default context a fork of the parent's kernel, moved to that work dir."""
        parent = seed.session
        held = seed.sandbox.paths.held()
        root = child.paths.root
        skip = lambda name: bool(_OWN.fullmatch(name))  # noqa: E731
        await asyncio.to_thread(copy_tree, held.fd, root, skip, 0o755)

        async def start() -> AsyncSession:
            async with parent.kernel_slot.locked():  # the fork request alone
                kernel = await running_kernel(parent, "fork")
                forked = await request_fork(kernel, cwd=root)
            handle = await forked.adopt()
            handle.stream_guard = kernel.stream_guard
            handle.network = shared(kernel.network)
            options = parent.options.replace(
                name=child.id, notebook=None, work_dir=root, kernel_manager=None,
                owns_kernel=False,
            )  # fmt: skip
            path = root / notebook_name(child.id) if parent.notebook_path is not None else None
            if path is None:
                options = options.replace(notebook=False)
            session = type(parent)(options=options)
            session.adopt_kernel(handle, root, path)
            try:
                await ask(handle, _moved(parent.work_dir, root), "'1'", MOVE_TIMEOUT)
            except BaseException:
                await session.close()
                raise
            return session

        await self.manager.add(child.id, start, backend="local")


MOVE_TIMEOUT = 30.0


def _moved(old: Path, new: Path) -> str:
    """Code for a forked kernel: work in ``new`` (its sandbox's work dir), not its parent's
    ``old``, also on ``sys.path``; no name left behind."""
    return (
        f"__import__('os').chdir({str(new)!r}); "
        f"__import__('sys').path[:] = [{str(new)!r} if p == {str(old)!r} else p "
        f"for p in __import__('sys').path]"
    )
