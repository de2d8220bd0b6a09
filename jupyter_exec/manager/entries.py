"""What the manager knows about each session: when it was used, whether it is busy."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_exec.boundary.naming import files_folder, notebook_name
from jupyter_exec.session.readthrough import ReadThrough
from jupyter_exec.session.session import AsyncSession

__all__ = ["Entry", "SessionInfo", "incarnation"]


@dataclass(frozen=True)
class SessionInfo:
    """One managed session, as :meth:`AsyncSessionManager.list` reports it."""

    name: str
    backend: str
    kernel_id: str | None
    work_dir: Path
    notebook_path: Path | None
    created: datetime
    idle_seconds: float
    busy: bool
    from_pool: bool
    alive: bool
    """Whether the kernel process runs (a cheap local check: no round trip)."""
    sleeping: bool = False
    """Asleep (``sleep_after``, ``session.sleep()``): no kernel until its next call."""

    @property
    def state(self) -> str:
        """``"sleeping"``, ``"busy"`` or ``"idle"``: what a listing shows."""
        return "sleeping" if self.sleeping else ("busy" if self.busy else "idle")


@dataclass
class Entry:
    """A managed session and its bookkeeping.

    Activity is *observed* rather than reported, so sessions used directly
    (``session.execute``) are seen as well as those used through the manager:
    a held execution lock means busy; a changed cell count means used.
    """

    session: AsyncSession
    backend: str
    from_pool: bool
    created: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    last_used: float = field(default_factory=time.monotonic)
    cannot_sleep: bool = False
    """Its sleep was refused once (not Python, remote...): the culler does not ask again."""

    closed = ReadThrough[bool]("session.closed")
    busy = ReadThrough[bool](
        "session.busy", "An execution is running or queued (the session's lock is held)."
    )

    def observe(self, now: float) -> None:
        """Move ``last_used`` forward if the session ran anything since last looked at."""
        if self.busy:
            self.last_used = now
        self.last_used = max(self.last_used, self.session.last_activity)

    def info(self, name: str, now: float) -> SessionInfo:
        self.observe(now)
        busy = self.busy
        return SessionInfo(
            name=name,
            backend=self.backend,
            kernel_id=self.session.kernel_id,
            work_dir=self.session.work_dir,
            notebook_path=self.session.notebook_path,
            created=self.created,
            idle_seconds=0.0 if busy else now - self.last_used,
            busy=busy,
            from_pool=self.from_pool,
            alive=self.session.is_alive,
            sleeping=self.session.sleeping,
        )


def incarnation(target: Path, name: str, opts: dict[str, Any]) -> str:
    """The session (notebook) name for ``name``: ``name``, or ``name-2``... if that is taken.

    A name used again after its session closed keeps its work dir (and files),
    but must not overwrite the earlier notebook or its saved outputs.
    """
    if opts.get("notebook") is False or opts.get("overwrite") or not target.exists():
        return name
    candidate, n = name, 1
    while (target / notebook_name(candidate)).exists() or (
        target / files_folder(candidate)
    ).exists():
        n += 1
        candidate = f"{name}-{n}"
    return candidate
