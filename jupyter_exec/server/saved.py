"""The extension's durable list of sessions, so they come back after the server restarts.

A Jupyter server is stopped and started again (a deploy, a process manager,
a reboot); its kernels die with it, but each session's notebook stays on disk,
and :meth:`~jupyter_exec.AsyncSession.resume` rebuilds a kernel's state from
it. What the restarted server needs besides is which sessions it had: one
signed entry per session in ``<root>/.jupyter_exec/sessions/<id>.json``
(written, signed and read by :class:`~jupyter_exec.manager.saved.SignedStore`).

**What is kept.** Only what names the session and how its kernel is started
(:class:`SavedSession`): id, name, backend, kernelspec name, work dir and
notebook as API paths under the root, created time, timeout and undo steps.
Never an environment, a token, a network policy (its secrets) or a
kernel's id: a session with a network policy comes back with none, so a
Docker kernel has no network until it is given one again (fail closed).

**Who can write it.** A Docker kernel writes what is mounted into it, its
work dir, and the root itself may be one; so the folder being hidden (the
server refuses hidden work dirs) is not enough: every entry is signed with a
key derived from the host's key, over the root's path and the entry. Entries
are checked on load, signature first, then every field (the work dir through
:meth:`~jupyter_exec.server.paths.ServerRoot.resolve`, the one path resolver:
inside the root, no link, nothing hidden), and a bad one is skipped with a
log line, never an error for the server.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from jupyter_exec.boundary.naming import validate_name
from jupyter_exec.exceptions import JupyterExecError
from jupyter_exec.manager.saved import BadEntry, SignedStore, registry_folder, same_fields
from jupyter_exec.options import MAX_UNDO_STEPS
from jupyter_exec.server.paths import ServerRoot

__all__ = ["FOLDER", "SavedSession", "SessionRegistry"]

KIND = "sessions"
FOLDER = registry_folder(KIND)
"""Where the registry lives, relative to the server root."""
_ID = re.compile(r"[0-9a-f]{32}")


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


_FIELDS = set(SavedSession.__dataclass_fields__)


class SessionRegistry:
    """The saved sessions of one server root; see the module docstring."""

    def __init__(self, root: ServerRoot, backends: dict[str, str]) -> None:
        self.root = root
        self.backends = dict(backends)
        self.store = SignedStore(root.root, KIND, lambda key: bool(_ID.fullmatch(key)))

    def save(self, saved: SavedSession) -> None:
        """Keep ``saved`` (a failure to write is logged: the session works, but not after)."""
        self.store.save(saved.id, asdict(saved))

    def remove(self, session_id: str) -> None:
        """Forget a closed or deleted session (it does not come back)."""
        self.store.remove(session_id)

    def load(self) -> list[SavedSession]:
        """Every valid entry; each bad one skipped with a log line saying why."""
        return self.store.load(self._checked)

    def _checked(self, key: str, entry: dict[str, Any]) -> SavedSession:
        """Every field as this server would have written it, or :class:`BadEntry`."""
        same_fields(entry, _FIELDS)
        ident, name, backend = entry["id"], entry["name"], entry["backend"]
        if ident != key:
            raise BadEntry("its id is not its file's name")
        validate_name(name)
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
