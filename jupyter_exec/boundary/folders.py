"""Which folders live sessions hold, and the one rule between them: no folder crosses a trust line.

A session's work dir is where its kernel reads and writes. A local kernel is
the host (code run there runs as the user); a Docker or remote kernel is the
untrusted side. If the two shared a folder, the untrusted kernel could plant
``ipykernel_launcher.py`` or ``pandas.py`` where the local kernel imports from,
rewrite the local notebook a replay or a resume then runs on the host, or read
its state. So, process-wide::

    claim(folder, trust)      before a session's kernel starts
       └─ refused (WorkDirShared, naming both folders and both sessions) when a
          live claim of the *other* trust is the same folder, lies inside it or
          contains it
    release()                 when the session closes (or its start fails)

Folders are compared by what they are, not how they are named: the device
and inode of the folder and of every real parent (each ``..`` asked of the
operating system), so a link, a bind mount or a second spelling of a path
changes nothing, and no path is resolved here.

Claims of one trust level may overlap: local sessions are the user's own code
(they always could share a folder), and Docker or remote sessions sharing one
(an E2B sandbox's contexts, an agent's kernels of other languages) are one
untrusted party as far as the host is concerned. Only live claims count here;
a folder an untrusted kernel used and left is remembered for this process, and
the front ends that hand folders out by name refuse it to a local session
(:func:`refuse_if_lent`). The REST server never reuses its per-session folders.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from jupyter_exec.exceptions import WorkDirError, WorkDirShared

__all__ = ["FolderClaim", "Trust", "claim", "claimed", "refuse_if_lent", "trust_of"]

Trust = Literal["host", "kernel"]
"""``host``: a local kernel, the user's own process. ``kernel``: a Docker or remote
kernel, whose code the host never trusts."""

_MAX_DEPTH = 4096
"""More parents than any real folder has: a loop of ``..`` (a broken file system) ends."""


def trust_of(backend: str) -> Trust:
    """The trust level of a kernel on ``backend``: only ``local`` runs on the host."""
    return "host" if backend == "local" else "kernel"


def _identity(path: Path) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


def _chain(path: Path) -> tuple[tuple[int, int], ...]:
    """(device, inode) of ``path`` and of each real parent up to ``/``, nearest first."""
    chain = [_identity(path)]
    current = path
    for _ in range(_MAX_DEPTH):
        current = current / ".."
        ident = _identity(current)
        if ident == chain[-1]:
            break
        chain.append(ident)
    return tuple(chain)


@dataclass(eq=False)
class FolderClaim:
    """A live session's hold on its folder; :meth:`release` gives it back (idempotent)."""

    path: Path
    trust: Trust
    session: str
    """Who holds it, as the error shows: ``session 'x' (docker)``."""
    chain: tuple[tuple[int, int], ...] = field(repr=False)
    released: bool = False

    def release(self) -> None:
        with _LOCK:
            self.released = True
            if self in _CLAIMS:
                _CLAIMS.remove(self)

    def _relation(self, other: FolderClaim) -> str | None:
        """How this folder stands to ``other``'s: ``is``, ``lies inside``, ``contains``."""
        if self.chain[0] == other.chain[0]:
            return "is"
        if other.chain[0] in self.chain:
            return "lies inside"
        if self.chain[0] in other.chain:
            return "contains"
        return None


_LOCK = threading.Lock()
_CLAIMS: list[FolderClaim] = []
_LENT: dict[tuple[int, int], str] = {}
"""Every folder an untrusted session held in this process, and who: for front ends that hand
a folder out again by name (:func:`refuse_if_lent`)."""


def _who(trust: Trust) -> str:
    return "a local (host)" if trust == "host" else "a Docker or remote (untrusted)"


def claim(folder: str | os.PathLike[str], trust: Trust, session: str) -> FolderClaim:
    """Hold ``folder`` (an existing directory) for a session of ``trust``.

    ``session`` describes the holder for the error (its name and backend).
    Raises :class:`~jupyter_exec.exceptions.WorkDirShared` when a live claim of
    the other trust level is this folder, lies inside it or contains it.
    """
    path = Path(folder).absolute()
    try:
        chain = _chain(path)
    except OSError as exc:
        raise WorkDirError(f"the work dir {path} cannot be used: {exc.strerror}") from exc
    new = FolderClaim(path=path, trust=trust, session=session, chain=chain)
    with _LOCK:
        for held in _CLAIMS:
            if held.trust == trust:
                continue
            relation = new._relation(held)
            if relation is not None:
                raise WorkDirShared(
                    f"{session} cannot work in {path}: that folder {relation} {held.path}, "
                    f"the work dir of {held.session}, and {_who(trust)} kernel may never "
                    f"share a folder with {_who(held.trust)} one (it could plant code the "
                    "other runs, or rewrite its notebook); give each session its own folder"
                )
        _CLAIMS.append(new)
        if trust == "kernel":
            _LENT.setdefault(chain[0], f"{session} in {path}")
    return new


def refuse_if_lent(folder: str | os.PathLike[str], session: str) -> None:
    """Refuse ``folder`` for a local session when a Docker or remote session held it, or a
    folder around it, earlier in this process (closed since: what its kernel left there
    stays). For front ends that hand out folders by name (``<root>/<name>``): the session
    manager, so the MCP server too, and the REST extension's named work dirs.

    Only what this process saw: a folder lent before a restart is not known here.
    """
    path = Path(folder).absolute()
    try:
        chain = _chain(path)
    except OSError:
        return  # not there yet: nothing was left in it
    with _LOCK:
        for ident in chain:
            if ident in _LENT:
                raise WorkDirShared(
                    f"{session} cannot work in {path}: {_LENT[ident]} held it (or a folder "
                    "around it) before, and what that kernel left there must never run on "
                    "the host; give the local session a folder of its own"
                )


def claimed() -> list[FolderClaim]:
    """The live claims, oldest first (a copy: for diagnostics and tests)."""
    with _LOCK:
        return list(_CLAIMS)
