"""A session's live fields in the listing: its kernel's status, last activity, running cell.

Computed for each listing from the session and the server's kernel manager, never stored:
the JupyterLab sessions panel polls the listing, so each answer is as fresh as the kernel.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jupyter_exec.server.entry import ServerSession

__all__ = ["live_fields"]


def live_fields(entry: ServerSession, kernel_manager: Any) -> dict[str, Any]:
    """``status`` (idle, busy, restarting, dead), ``last_activity``, ``running`` of ``entry``.

    The running cell is whatever the kernel runs now, the agent's or a person's (seen on
    the kernel's IOPub by :class:`~jupyter_exec.server.activity.KernelActivity`).
    """
    session = entry.session
    kernel = (
        kernel_manager.get_kernel(entry.kernel_id) if entry.kernel_id in kernel_manager else None
    )
    state = getattr(kernel, "execution_state", None)
    if session.sleeping:  # no kernel until its next call (sleep_after, session.sleep())
        status = "sleeping"
    elif kernel is None or session.closed or state == "dead":
        status = "dead"
    elif state in ("restarting", "autorestarting"):
        status = "restarting"
    else:
        status = "busy" if session.busy else "idle"
    ago = max(time.monotonic() - session.last_activity, 0.0)
    running = session.activity.running
    return {
        "status": status,
        "last_activity": (datetime.now(timezone.utc) - timedelta(seconds=ago)).isoformat(),
        "running": None if running is None else {"code": running[0], "started": running[1]},
    }
