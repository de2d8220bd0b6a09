"""E2B snapshots on this server: a sandbox's files (and its kernel's namespace), kept to start
new sandboxes from, owned by the API key that took them.

What a snapshot holds, in the server's own data dir (never in a sandbox's work dir)::

    <root>/.jupyter_exec/e2b-snapshots/<id>.json        signed entry (SignedStore)
    <root>/.jupyter_exec/e2b-snapshot-data/<id>/files/  the sandbox's work dir, copied
                                                 /memory/<name>/  a durable checkpoint of its
                                                 default context (memory snapshots only)

* **Signed**: the entry is a :class:`~jupyter_exec.manager.saved.SignedStore` entry
  (HMAC under the host's key), so a snapshot written to disk by anyone else - a kernel
  whose work dir is the root, a person - is not one: it is never listed, and starting
  from it answers 404. The checkpoint in it carries the host's MAC too, checked again
  when a kernel loads it.
* **Owned**: the entry holds a fingerprint of the API key that took it (HMAC of the key
  under the host's key; never the key). Another key - the server restarted on the same
  root with another one - neither lists, starts from nor deletes it: it is not found.
  A sandbox's token opens no API route at all (:mod:`jupyter_exec.e2b.auth`).
* A memory snapshot's kernel state is the namespace a durable checkpoint saves
  (:meth:`~jupyter_exec.AsyncSession.checkpoint`: what pickles; open files, locks,
  threads do not); a filesystem-only snapshot (``memory: false``) holds the files alone.
"""

from __future__ import annotations

import math
import re
import secrets
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jupyter_exec.boundary import trust
from jupyter_exec.boundary.naming import validate_name
from jupyter_exec.exceptions import InvalidArgument, JupyterExecError, SessionNotFound
from jupyter_exec.manager.saved import BadEntry, SignedStore, registry_folder, same_fields

__all__ = ["SavedSnapshot", "SnapshotStore", "is_snapshot_id", "owner_of"]

KIND = "e2b-snapshots"
DATA = "e2b-snapshot-data"
_ID = re.compile(r"snap-[0-9a-f]{16}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_OWNER_PURPOSE = b"jupyter-exec e2b snapshot owner v1"
OPEN_OWNER = "no-key"
"""The owner of snapshots taken on a server that has no API key (loopback only)."""


def is_snapshot_id(text: str) -> bool:
    return bool(_ID.fullmatch(text))


def owner_of(api_key: str | None) -> str:
    """The owner fingerprint of ``api_key``: the same key on this host, the same owner."""
    if api_key is None:
        return OPEN_OWNER
    return trust.fingerprint(api_key.encode(), _OWNER_PURPOSE)


@dataclass(frozen=True)
class SavedSnapshot:
    """One snapshot as its entry says it."""

    id: str
    owner: str
    sandbox: str
    """The sandbox it was taken of."""
    memory: bool
    names: list[str] = field(default_factory=list)
    created: float = 0.0
    checkpoint: str | None = None
    """The checkpoint folder's name under ``memory/`` (None: a filesystem-only snapshot)."""
    trust: str = "host"
    """The trust of the sandbox it was taken of (:func:`~jupyter_exec.boundary.folders.
    trust_of`): what a Docker kernel wrote never becomes a local sandbox's files."""

    def describe(self) -> dict[str, Any]:
        """As the SDK reads it (``SnapshotInfo``)."""
        return {"snapshotID": self.id, "names": [f"{n}:default" for n in self.names]}

    def known_as(self, wanted: str) -> bool:
        """Whether ``wanted`` (an id or a name, either with or without ``:tag``) names it."""
        bare = wanted.split(":", 1)[0].rsplit("/", 1)[-1]
        return bare == self.id or bare in self.names


class SnapshotStore:
    """The snapshots of one server root (see the module)."""

    def __init__(self, root: Path) -> None:
        self.store = SignedStore(root, KIND, is_snapshot_id)
        self.data = root / registry_folder(DATA)

    def new_id(self) -> str:
        return f"snap-{secrets.token_hex(8)}"

    def folder(self, snapshot_id: str) -> Path:
        """Where snapshot ``snapshot_id``'s files and memory are (an id is checked first)."""
        if not is_snapshot_id(snapshot_id):
            raise SessionNotFound(f"snapshot {snapshot_id!r} was not found")
        return self.data / snapshot_id

    def save(self, snapshot: SavedSnapshot) -> None:
        self.store.save(snapshot.id, asdict(snapshot))

    def every(self, owner: str) -> list[SavedSnapshot]:
        """``owner``'s snapshots (signed, with their data), oldest first."""
        found = [s for s in self.store.load(_checked) if s.owner == owner]
        found = [s for s in found if (self.data / s.id).is_dir()]
        return sorted(found, key=lambda s: (s.created, s.id))

    def find(self, wanted: str, owner: str) -> SavedSnapshot | None:
        """``owner``'s snapshot named ``wanted`` (its id or a name), newest first; else None."""
        for snapshot in reversed(self.every(owner)):
            if snapshot.known_as(wanted):
                return snapshot
        return None

    def get(self, wanted: str, owner: str) -> SavedSnapshot:
        found = self.find(wanted, owner)
        if found is None:
            raise SessionNotFound(f"snapshot {wanted!r} was not found")
        return found

    def remove(self, snapshot: SavedSnapshot) -> None:
        """The entry first (the snapshot is gone from then on), then its data."""
        self.store.remove(snapshot.id)
        shutil.rmtree(self.folder(snapshot.id), ignore_errors=True)


def check_name(name: object) -> str | None:
    """A snapshot's name as a client gives it: a short word, or None."""
    if name is None or name == "":
        return None
    if not isinstance(name, str) or not _NAME.fullmatch(name) or is_snapshot_id(name):
        raise InvalidArgument(
            "a snapshot's 'name' is 1 to 100 letters, digits, '.', '_' or '-' (and not an id)"
        )
    return name


def _checked(key: str, entry: dict[str, Any]) -> SavedSnapshot:
    """An entry as this server writes one, or :class:`BadEntry`."""
    same_fields(
        entry, {"id", "owner", "sandbox", "memory", "names", "created", "checkpoint", "trust"}
    )
    if entry["trust"] not in ("host", "kernel"):
        raise BadEntry("bad trust")
    if entry["id"] != key:
        raise BadEntry("its id is not its file's name")
    owner, sandbox = entry["owner"], entry["sandbox"]
    memory, names = entry["memory"], entry["names"]
    if not isinstance(owner, str) or not re.fullmatch(r"[0-9a-f]{32}|no-key", owner):
        raise BadEntry("bad owner")
    if not isinstance(sandbox, str) or len(sandbox) > 100 or not isinstance(memory, bool):
        raise BadEntry("bad sandbox or memory")
    if not isinstance(names, list) or not all(
        isinstance(n, str) and _NAME.fullmatch(n) for n in names
    ):
        raise BadEntry("bad names")
    created, checkpoint = entry["created"], entry["checkpoint"]
    if (
        isinstance(created, bool)
        or not isinstance(created, (int, float))
        or not (math.isfinite(created) and created >= 0)
    ):
        raise BadEntry("bad time")
    if checkpoint is not None:
        try:
            validate_name(checkpoint)  # a folder name under memory/: never a path
        except JupyterExecError as exc:
            raise BadEntry(f"bad checkpoint: {exc}") from None
    if memory != (checkpoint is not None):
        raise BadEntry("a memory snapshot has a checkpoint, a filesystem one none")
    return SavedSnapshot(
        id=key, owner=owner, sandbox=sandbox, memory=memory, names=list(names),
        created=float(created), checkpoint=checkpoint, trust=entry["trust"],
    )  # fmt: skip
