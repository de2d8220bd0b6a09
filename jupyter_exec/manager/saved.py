"""Signed, durable entries under a server's root: what lets its sessions outlive the server.

Every front end that serves sessions (the REST extension, the MCP server, the
E2B server) keeps one small JSON file per open session, so after a restart on
the same root it knows which sessions it had and can bring each back from its
notebook (:meth:`~jupyter_exec.AsyncSession.resume`). This module is the part
they share: where the files are, how they are written and how they are trusted::

    <root>/.jupyter_exec/<kind>/<key>.json    {"v": 1, "entry": {...}, "mac": "<hex>"}

* **Written whole**: a temp file, fsync, rename, fsync of the folder, all by
  descriptor through :class:`~jupyter_exec.boundary.paths.Folder` (no link is
  followed, the folder made 0700, the files 0600).
* **Signed**: HMAC-SHA256 with a key derived (per ``kind``) from the host's key
  (:mod:`jupyter_exec.boundary.trust`, which lives outside every work dir and
  never reaches a kernel), over the root's path, the key and the entry. A
  kernel that can write the folder (a Docker kernel whose work dir is the
  root) can neither forge nor edit an entry, nor bring one from another root
  or another front end.
* **Read strictly**: a file over :data:`MAX_ENTRY_BYTES`, not a regular file,
  not JSON of this shape, with another key than its file name, or with a bad
  signature is skipped with a log line; so is whatever the caller's ``check``
  refuses. Loading never raises.

Only what is safe to keep goes in an entry (the callers decide, and say so):
never a token, an environment, a network policy's secrets.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from jupyter_exec.boundary import trust
from jupyter_exec.boundary.paths import Folder
from jupyter_exec.exceptions import JupyterExecError, StorageError

__all__ = ["MAX_ENTRY_BYTES", "BadEntry", "SignedStore", "registry_folder", "same_fields"]

log = logging.getLogger("jupyter_exec")

VERSION = 1
MAX_ENTRY_BYTES = 16 << 10
"""An entry is a few hundred bytes; anything larger is not one of ours."""
MAX_ENTRIES = 10_000
"""Files read at most on start, so a flood of them cannot stall it."""
_CONTEXT = b"jupyter-exec session registry v1\0"

T = TypeVar("T")


def registry_folder(kind: str) -> str:
    """Where the entries of ``kind`` live, relative to the root."""
    return f".jupyter_exec/{kind}"


class BadEntry(ValueError):
    """An entry on disk that this server did not write as it is: skipped and logged."""


class SignedStore:
    """The signed entries of one ``kind`` under ``root``, each named by its key.

    ``valid_key`` says which keys may name a file (a session id, a session
    name): a file named otherwise is skipped, and a key that fails it is
    never written.
    """

    def __init__(self, root: Path, kind: str, valid_key: Callable[[str], bool]) -> None:
        self.root = Path(os.path.abspath(root))  # as the server names it; never resolved
        self.kind = kind
        self.folder = registry_folder(kind)
        self.valid_key = valid_key
        self._key: bytes | None = None

    def _subkey(self) -> bytes:
        """A key for this kind of entry only, derived from the host key (never stored)."""
        if self._key is None:
            context = _CONTEXT + self.kind.encode() + b"\0"
            self._key = hmac.new(trust.load_key(), context, hashlib.sha256).digest()
        return self._key

    def _mac(self, key: str, entry: dict[str, Any]) -> str:
        body = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        signed = b"\0".join([str(self.root).encode(), key.encode(), body.encode()])
        return hmac.new(self._subkey(), signed, hashlib.sha256).hexdigest()

    def _open(self, create: bool) -> Folder:
        return Folder.open(self.root, self.folder, create=create, mode=0o700)

    def save(self, key: str, entry: dict[str, Any]) -> bool:
        """Write (or replace) the entry ``key``, whole or not at all; a failure is logged."""
        if not self.valid_key(key):
            raise ValueError(f"not a key of this store: {key!r}")
        try:
            data = {"v": VERSION, "entry": entry, "mac": self._mac(key, entry)}
            with self._open(create=True) as folder:
                folder.write_atomic(
                    f"{key}.json", [json.dumps(data, indent=1).encode()], mode=0o600, fsync=True
                )
                os.fsync(folder.fd)  # the rename too
        except (JupyterExecError, OSError) as exc:
            log.warning("jupyter-exec: %s %s will not come back after a restart: %s",
                        self.kind, key, exc)  # fmt: skip
            return False
        return True

    def remove(self, key: str) -> None:
        """Forget the entry ``key`` (a closed or deleted session does not come back)."""
        if not self.valid_key(key):
            return
        try:
            with self._open(create=False) as folder:
                folder.unlink(f"{key}.json")
                os.fsync(folder.fd)
        except (JupyterExecError, OSError) as exc:
            if getattr(exc, "errno", None) != errno.ENOENT:
                log.warning("jupyter-exec: could not forget %s %s: %s", self.kind, key, exc)

    def load(self, check: Callable[[str, dict[str, Any]], T]) -> list[T]:
        """Every entry whose signature holds and that ``check(key, entry)`` accepts.

        ``check`` raises :class:`BadEntry` (or our own error type) for one it refuses.
        """
        try:
            folder = self._open(create=False)
        except (JupyterExecError, OSError) as exc:
            if getattr(exc, "errno", None) != errno.ENOENT:
                log.warning(
                    "jupyter-exec: the session registry %s is refused: %s", self.folder, exc
                )
            return []
        found: list[T] = []
        with folder:
            for name in sorted(os.listdir(folder.fd))[:MAX_ENTRIES]:
                if name.startswith("."):
                    continue  # the temp file of a write cut short
                try:
                    key, entry = self._read(folder, name)
                    found.append(check(key, entry))
                except (BadEntry, JupyterExecError) as exc:
                    log.warning(
                        "jupyter-exec: skipping session registry entry %s/%r: %s",
                        self.folder,
                        name,
                        exc,
                    )
        return found

    def _read(self, folder: Folder, name: str) -> tuple[str, dict[str, Any]]:
        key = name.removesuffix(".json")
        if key == name or not self.valid_key(key):
            raise BadEntry("not an entry's file name")
        try:
            data = json.loads(folder.read_bytes(name, limit=MAX_ENTRY_BYTES))
        except (StorageError, OSError, ValueError) as exc:
            raise BadEntry(f"unreadable ({exc})") from None
        if not isinstance(data, dict) or set(data) != {"v", "entry", "mac"}:
            raise BadEntry("not a registry entry")
        entry, signature = data["entry"], data["mac"]
        if data["v"] != VERSION or not isinstance(entry, dict) or not isinstance(signature, str):
            raise BadEntry("not a registry entry of this version")
        try:
            expected = self._mac(key, entry)
        except (TypeError, ValueError) as exc:
            raise BadEntry(f"cannot be checked ({exc})") from None
        if not hmac.compare_digest(expected, signature):
            raise BadEntry("its signature does not match (written or edited by someone else)")
        return key, entry


def same_fields(entry: dict[str, Any], fields: set[str]) -> None:
    """:class:`BadEntry` unless ``entry`` has exactly ``fields``."""
    if set(entry) != fields:
        raise BadEntry(f"fields {sorted(set(entry) ^ fields)} differ from an entry's")
