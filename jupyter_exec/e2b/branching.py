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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.boundary.paths import Folder
from jupyter_exec.e2b.copying import copy_tree
from jupyter_exec.e2b.snapshots import SavedSnapshot, SnapshotStore, owner_of
from jupyter_exec.exceptions import CheckpointError, SessionNotFound
from jupyter_exec.manager import AsyncSessionManager

if TYPE_CHECKING:
    from jupyter_exec.e2b.sandboxes import Context, Sandbox
    from jupyter_exec.session.session import AsyncSession

__all__ = ["Branching", "Seed"]

log = logging.getLogger("jupyter_exec.e2b")

_OWN = re.compile(r"\.sbx-[0-9a-f]{16}.*_(state|checkpoints)")
"""jupyter-exec's own folders in a sandbox's work dir (its kernels' state and checkpoints):
not the sandbox's files, never copied."""


Seed = tuple[Path, str | None]
"""Where a new sandbox starts from: a snapshot's folder, and its checkpoint's name (or None)."""


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
        seed: Seed | None = None,
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

    async def _capture(self, sandbox: Sandbox, folder: Path, memory: bool) -> str | None:
        """Copy ``sandbox``'s files (and, with ``memory``, its default context's namespace)
        into the new ``folder``; returns the checkpoint's name (None without memory)."""
        if memory:
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
        """``count`` new sandboxes from ``sandbox``'s files and default context's state,
        captured once; each a sandbox or why it could not start."""
        store = self.store()
        folder = store.folder(store.new_id())
        try:
            checkpoint = await self._capture(sandbox, folder, memory=True)
            seed = (folder, checkpoint)
            made = await asyncio.gather(
                *(
                    self.create(template=sandbox.template, metadata=dict(sandbox.metadata),
                                envs=dict(sandbox.envs), seed=seed, **fields)
                    for _ in range(count)
                ),
                return_exceptions=True,
            )  # fmt: skip
        finally:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(shutil.rmtree, folder, True)
        log.info("sandbox %s forked %d times", sandbox.id, count)
        return list(made)
