"""Sandboxes that outlive the E2B server: their entries, and access tokens no file holds.

After the server is stopped and started again on the same root dir, a client's
``Sandbox.connect(sandbox_id)`` (or the ``Sandbox`` object it kept) reaches the
same sandbox: its files are in its work dir, and its default context's state
comes back on first use, rebuilt from the context's notebook
(:meth:`~jupyter_exec.AsyncSession.resume`). What the server keeps for that is
one signed entry per sandbox (:class:`~jupyter_exec.manager.saved.SignedStore`)
in ``<root>/.jupyter_exec/e2b-sandboxes/``, beside the sandboxes' work dirs and
never inside one::

    id, template, metadata, started, end      as the API describes the sandbox
    notebook                                   its default context's notebook (a stem)
    salt                                       random; NOT the token
    on_timeout, pause_memory, auto_resume      its lifecycle, as it was created with
    paused                                     paused (it stays so, and resumes as before)

An entry from before the lifecycle was kept (without the last four) comes back as a
sandbox that is killed on its timeout and is not paused, as that server would have it.

**The access token is never stored.** It is derived: HMAC-SHA256 of the
sandbox's id and salt under a key derived from the host's key
(:mod:`jupyter_exec.boundary.trust`), so the same token opens the sandbox
after the restart, as E2B's SDK expects of a sandbox it connects to again, and
a kernel that reads the registry learns no token. Nor are the sandbox's
``envVars`` kept (they are often secrets): a sandbox comes back without them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import re
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jupyter_exec.boundary import trust
from jupyter_exec.boundary.naming import validate_name
from jupyter_exec.exceptions import JupyterExecError
from jupyter_exec.manager.saved import BadEntry, SignedStore, same_fields

__all__ = ["SandboxRegistry", "SavedSandbox", "is_sandbox_id"]

KIND = "e2b-sandboxes"
_ID = re.compile(r"sbx-[0-9a-f]{16}")
_TOKEN_CONTEXT = b"jupyter-exec e2b sandbox access token v1\0"
MAX_METADATA = 64


def is_sandbox_id(text: str) -> bool:
    return bool(_ID.fullmatch(text))


@dataclass(frozen=True)
class SavedSandbox:
    """A sandbox as the restarted server brings it back."""

    id: str
    template: str
    metadata: dict[str, str]
    started: float
    end: float | None
    notebook: str
    salt: str
    on_timeout: str = "kill"
    pause_memory: bool = True
    auto_resume: bool | None = None
    paused: bool = False


_FIELDS = {"id", "template", "metadata", "started", "end", "notebook", "salt"}
_LIFECYCLE = {"on_timeout", "pause_memory", "auto_resume", "paused"}


class SandboxRegistry:
    """The sandboxes of one server root; tokens derived, never kept (see the module)."""

    def __init__(self, root: Path) -> None:
        self.store = SignedStore(root, KIND, is_sandbox_id)
        self._key: bytes | None = None

    def new_salt(self) -> str:
        return secrets.token_hex(16)

    def token(self, sandbox_id: str, salt: str) -> str:
        """The sandbox's access token: the same for the same id and salt on this host."""
        if self._key is None:
            self._key = hmac.new(trust.load_key(), _TOKEN_CONTEXT, hashlib.sha256).digest()
        mac = hmac.new(self._key, f"{sandbox_id}\0{salt}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac[:24]).decode()

    def save(self, saved: SavedSandbox) -> None:
        self.store.save(saved.id, asdict(saved))

    def remove(self, sandbox_id: str) -> None:
        self.store.remove(sandbox_id)

    def load(self) -> list[SavedSandbox]:
        return self.store.load(_checked)


def _checked(key: str, entry: dict[str, Any]) -> SavedSandbox:
    """An entry as this server writes one, or :class:`BadEntry`."""
    if set(entry) == _FIELDS:  # written before the lifecycle was kept
        entry = {**entry, "on_timeout": "kill", "pause_memory": True, "auto_resume": None,
                 "paused": False}  # fmt: skip
    same_fields(entry, _FIELDS | _LIFECYCLE)
    if entry["on_timeout"] not in ("kill", "pause"):
        raise BadEntry("bad on_timeout")
    if not isinstance(entry["pause_memory"], bool) or not isinstance(entry["paused"], bool):
        raise BadEntry("bad lifecycle")
    if entry["auto_resume"] is not None and not isinstance(entry["auto_resume"], bool):
        raise BadEntry("bad auto_resume")
    if entry["id"] != key:
        raise BadEntry("its id is not its file's name")
    template, metadata, notebook, salt = (
        entry["template"],
        entry["metadata"],
        entry["notebook"],
        entry["salt"],
    )
    if not isinstance(template, str) or len(template) > 200:
        raise BadEntry("bad template")
    if (
        not isinstance(metadata, dict)
        or len(metadata) > MAX_METADATA
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise BadEntry("bad metadata")
    try:
        validate_name(notebook)  # a stem in the sandbox's own folder: never a path
    except JupyterExecError as exc:
        raise BadEntry(f"bad notebook: {exc}") from None
    if not isinstance(salt, str) or not re.fullmatch(r"[0-9a-f]{32}", salt):
        raise BadEntry("bad salt")
    started, end = entry["started"], entry["end"]
    for stamp in (started, end):
        if stamp is None and stamp is end:
            continue
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)):
            raise BadEntry("bad time")
        if not math.isfinite(stamp) or stamp < 0:
            raise BadEntry("bad time")
    return SavedSandbox(
        id=key,
        template=template,
        metadata=dict(metadata),
        started=float(started),
        end=None if end is None else float(end),
        notebook=notebook,
        salt=salt,
        on_timeout=entry["on_timeout"],
        pause_memory=entry["pause_memory"],
        auto_resume=entry["auto_resume"],
        paused=entry["paused"],
    )
