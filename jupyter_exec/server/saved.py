"""The extension's durable list of sessions, so they come back after the server restarts.

A Jupyter server is stopped and started again (a deploy, a process manager,
a reboot); its kernels die with it, but each session's notebook stays on disk,
and :meth:`~jupyter_exec.AsyncSession.resume` rebuilds a kernel's state from
it. What the restarted server needs besides is which sessions it had: this
registry, one small JSON file per session::

    <root>/.jupyter_exec/sessions/<id>.json   {"entry": {...}, "mac": "<hex>"}

**What is kept.** Only what names the session and how its kernel is started
(:class:`SavedSession`): id, name, backend, kernelspec name, work dir and
notebook as API paths under the root, created time, timeout and undo steps.
Never an environment, a token, a network policy (its secrets) or a
kernel's id: a session with a network policy comes back with none, so a
Docker kernel has no network until it is given one again (fail closed).

**Who can write it.** A Docker kernel writes what is mounted into it, its
work dir, and the root itself may be one; so the folder being hidden (the
server refuses hidden work dirs) is not enough. Every entry is signed with a
key derived from the host's key (:mod:`jupyter_exec.boundary.trust`, kept
outside every work dir), over the root's path and the entry, so a kernel can
neither forge nor edit one, nor copy one from another server root. Entries
are checked on load, signature first, then every field (the work dir
through :meth:`~jupyter_exec.server.paths.ServerRoot.resolve`, the one
path resolver: inside the root, no link, nothing hidden), and a bad one is
skipped with a log line, never an error for the server.

Files are written whole (temp file, fsync, rename) through
:class:`~jupyter_exec.boundary.paths.Folder`, which never follows a link.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import math
import os
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from jupyter_exec.boundary import trust
from jupyter_exec.boundary.naming import validate_name
from jupyter_exec.boundary.paths import Folder
from jupyter_exec.exceptions import JupyterExecError, StorageError
from jupyter_exec.options import MAX_UNDO_STEPS
from jupyter_exec.server.paths import ServerRoot

__all__ = ["FOLDER", "SavedSession", "SessionRegistry"]

log = logging.getLogger("jupyter_exec.server")

FOLDER = ".jupyter_exec/sessions"
"""Where the registry lives, relative to the server root."""
VERSION = 1
MAX_ENTRY_BYTES = 16 << 10
"""An entry is a few hundred bytes; anything larger is not one of ours."""
MAX_ENTRIES = 10_000
"""Entries read at most on start, so a flood of files cannot stall it."""
_ID = re.compile(r"[0-9a-f]{32}")
_CONTEXT = b"jupyter-exec session registry v1\0"
_FIELDS = {
    "id",
    "name",
    "backend",
    "kernel_name",
    "work_dir",
    "notebook",
    "created",
    "timeout",
    "undo_steps",
}


class BadEntry(ValueError):
    """An entry on disk that is not one this server wrote: skipped, logged (never raised on)."""


@dataclass(frozen=True)
class SavedSession:
    """What a restarted server knows of a session until its first use brings it back."""

    id: str
    name: str
    backend: str
    kernel_name: str
    work_dir: str
    """API path (relative to the server root)."""
    notebook: str
    """API path of ``<work_dir>/<name>.ipynb``."""
    created: str
    timeout: float | None
    undo_steps: int


class SessionRegistry:
    """The signed session entries of one server root; see the module docstring."""

    def __init__(self, root: ServerRoot, backends: dict[str, str]) -> None:
        self.root = root
        self.backends = dict(backends)
        self._key: bytes | None = None

    # -- the signature -------------------------------------------------------------------

    def _subkey(self) -> bytes:
        """A key for this registry only, derived from the host key (never stored)."""
        if self._key is None:
            self._key = hmac.new(trust.load_key(), _CONTEXT, hashlib.sha256).digest()
        return self._key

    def _mac(self, entry: dict[str, Any]) -> str:
        body = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        signed = _CONTEXT + str(self.root.root).encode() + b"\0" + body.encode()
        return hmac.new(self._subkey(), signed, hashlib.sha256).hexdigest()

    # -- writing ---------------------------------------------------------------------------

    def _folder(self, create: bool) -> Folder:
        return Folder.open(self.root.root, FOLDER, create=create, mode=0o700)

    def save(self, saved: SavedSession) -> None:
        """Write (or replace) ``saved``'s entry, whole or not at all; a failure is logged."""
        entry = asdict(saved)
        try:
            data = json.dumps({"v": VERSION, "entry": entry, "mac": self._mac(entry)}, indent=1)
            with self._folder(create=True) as folder:
                folder.write_atomic(f"{saved.id}.json", [data.encode()], mode=0o600, fsync=True)
                os.fsync(folder.fd)  # the rename too
        except (JupyterExecError, OSError) as exc:
            log.warning("jupyter-exec: session %s will not come back after a restart: %s",
                        saved.id, exc)  # fmt: skip

    def remove(self, session_id: str) -> None:
        """Forget a closed or deleted session (it does not come back)."""
        if not _ID.fullmatch(session_id):
            return
        try:
            with self._folder(create=False) as folder:
                with contextlib.suppress(FileNotFoundError):
                    folder.unlink(f"{session_id}.json")
                os.fsync(folder.fd)
        except FileNotFoundError:
            return
        except (JupyterExecError, OSError) as exc:
            log.warning("jupyter-exec: could not forget session %s: %s", session_id, exc)

    # -- reading ---------------------------------------------------------------------------

    def load(self) -> list[SavedSession]:
        """Every valid entry; each bad one skipped with a log line saying why."""
        try:
            folder = self._folder(create=False)
        except FileNotFoundError:
            return []
        except (JupyterExecError, OSError) as exc:
            log.warning("jupyter-exec: the session registry %s is refused: %s", FOLDER, exc)
            return []
        found: list[SavedSession] = []
        with folder:
            names = sorted(os.listdir(folder.fd))
            for name in names[:MAX_ENTRIES]:
                if name.startswith("."):
                    continue  # a temp file of a write cut short
                try:
                    found.append(self._read(folder, name))
                except BadEntry as exc:
                    log.warning("jupyter-exec: skipping session registry entry %r: %s", name, exc)
        return found

    def _read(self, folder: Folder, name: str) -> SavedSession:
        stem = name.removesuffix(".json")
        if stem == name or not _ID.fullmatch(stem):
            raise BadEntry("not an entry's file name")
        try:
            raw = folder.read_bytes(name, limit=MAX_ENTRY_BYTES)
            data = json.loads(raw)
        except (StorageError, OSError, ValueError) as exc:
            raise BadEntry(f"unreadable ({exc})") from None
        if not isinstance(data, dict) or set(data) != {"v", "entry", "mac"}:
            raise BadEntry("not a registry entry")
        entry, signature = data["entry"], data["mac"]
        if data["v"] != VERSION or not isinstance(entry, dict) or not isinstance(signature, str):
            raise BadEntry("not a registry entry of this version")
        try:
            expected = self._mac(entry)
        except (JupyterExecError, TypeError, ValueError) as exc:
            raise BadEntry(f"cannot be checked ({exc})") from None
        if not hmac.compare_digest(expected, signature):
            raise BadEntry("its signature does not match (written or edited by someone else)")
        saved = self._checked(entry)
        if saved.id != stem:
            raise BadEntry("its id is not its file's name")
        return saved

    def _checked(self, entry: dict[str, Any]) -> SavedSession:
        """Every field as this server would have written it, or :class:`BadEntry`."""
        if set(entry) != _FIELDS:
            raise BadEntry(f"fields {sorted(set(entry) ^ _FIELDS)} differ from an entry's")
        ident, name, backend = entry["id"], entry["name"], entry["backend"]
        if not isinstance(ident, str) or not _ID.fullmatch(ident):
            raise BadEntry("bad id")
        try:
            validate_name(name)
        except JupyterExecError as exc:
            raise BadEntry(str(exc)) from None
        if backend not in self.backends:
            raise BadEntry(f"unknown backend {backend!r}")
        kernel_name = entry["kernel_name"]
        if not isinstance(kernel_name, str) or not kernel_name or len(kernel_name) > 255:
            raise BadEntry("bad kernel_name")
        work_dir, notebook = entry["work_dir"], entry["notebook"]
        if not isinstance(work_dir, str) or not isinstance(notebook, str):
            raise BadEntry("bad paths")
        try:
            folder = self.root.resolve(work_dir)  # inside the root, no link, nothing hidden
        except JupyterExecError as exc:
            raise BadEntry(f"work_dir refused: {exc}") from None
        if notebook != self.root.api_path(folder / f"{name}.ipynb"):
            raise BadEntry("the notebook is not <work_dir>/<name>.ipynb")
        created = entry["created"]
        try:
            datetime.fromisoformat(created)
        except (TypeError, ValueError):
            raise BadEntry("bad created time") from None
        timeout = entry["timeout"]
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise BadEntry("bad timeout")
        steps = entry["undo_steps"]
        if (
            isinstance(steps, bool)
            or not isinstance(steps, int)
            or not 0 <= steps <= MAX_UNDO_STEPS
        ):
            raise BadEntry("bad undo_steps")
        return SavedSession(
            id=ident,
            name=name,
            backend=backend,
            kernel_name=kernel_name,
            work_dir=work_dir,
            notebook=notebook,
            created=created,
            timeout=None if timeout is None else float(timeout),
            undo_steps=steps,
        )

    def notebook_path(self, saved: SavedSession) -> Path:
        """The notebook of ``saved``, checked again now (a link planted since is refused)."""
        return self.root.resolve(saved.work_dir) / f"{saved.name}.ipynb"
