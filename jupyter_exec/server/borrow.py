"""A session on a kernel the server already runs: a person hands their kernel to an agent.

``POST /api/exec/sessions`` with ``"kernel_id"`` attaches the new session to that
kernel (say, the one behind a notebook open in JupyterLab) instead of starting one.
The agent then sees what the person defined, and the person what the agent does::

    kernel_id ─► check(): a kernel of this server (404), not also given a backend,
                 kernelspec, network policy or undo (400: the kernel decides those, and
                 undo would move the agent off it), not serving another session (409)
              ─► the session records its own notebook (the agent's cells only: a
                 person's cells run in their notebook are numbered in the run order,
                 never recorded as the agent's), bound to the same kernel
    DELETE / culled ─► the agent's notebook is unbound (unbind), the kernel keeps running

One session per kernel: two agents recording one kernel would each see the other's
cells as a person's, and each would believe it alone decides when the kernel is idle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jupyter_core.utils import ensure_async

from jupyter_exec.exceptions import SessionConflict, SessionNotFound
from jupyter_exec.server.bodies import InvalidRequest
from jupyter_exec.session.session import Backend

if TYPE_CHECKING:
    from jupyter_exec.server.sessions import ServerSessions

__all__ = ["Borrowed", "KernelNotFound", "check", "unbind"]

log = logging.getLogger("jupyter_exec.server")


class KernelNotFound(SessionNotFound):
    """No kernel with that id runs on this server (a 404, like an unknown session)."""


@dataclass(frozen=True)
class Borrowed:
    """What a running kernel decides for the session attached to it."""

    backend: Backend
    kernel_name: str


def check(
    sessions: ServerSessions,
    kernel_id: str,
    backend: str | None,
    kernel_name: str | None,
    undo_steps: int,
    network: Any,
) -> Borrowed:
    """Whether a session may attach to the server's kernel ``kernel_id``; what it runs.

    Synchronous, so that nothing can claim the kernel between this check and the
    caller's reservation of it.
    """
    given = [
        f"'{field}'"
        for field, value in (("backend", backend), ("kernel_name", kernel_name))
        if value is not None
    ]
    if given:
        raise InvalidRequest(
            f"'kernel_id' attaches to a running kernel, which decides its backend and "
            f"kernelspec: leave out {' and '.join(given)}"
        )
    if network is not None:
        raise InvalidRequest(
            "'network' applies to a kernel the session starts; a running kernel keeps the "
            "network it has: leave out 'network' or 'kernel_id'"
        )
    if undo_steps:
        raise InvalidRequest(
            "'undo_steps' is not available with 'kernel_id': an undo would move the session "
            "off the running kernel onto a snapshot; leave out 'undo_steps'"
        )
    mkm = sessions.serverapp.kernel_manager
    if kernel_id not in mkm:
        raise KernelNotFound(
            f"no kernel with id {kernel_id!r} runs on this server (see GET /api/kernels)"
        )
    for entry in sessions.list():
        if kernel_id in (entry.kernel_id, *entry.held):
            raise SessionConflict(
                f"kernel {kernel_id!r} already serves jupyter-exec session {entry.id!r} "
                f"({entry.name!r}); use that session, or delete it first"
            )
    if kernel_id in sessions._borrowing:
        raise SessionConflict(
            f"kernel {kernel_id!r} is being attached to another session; use that one"
        )
    name = str(getattr(mkm.get_kernel(kernel_id), "kernel_name", "") or "")
    backend_of: Backend = (
        "docker" if name and name == sessions.kernel_names.get("docker") else "local"
    )
    return Borrowed(backend_of, name or sessions.kernel_names[backend_of])


async def unbind(session_manager: Any, jupyter_session_id: str) -> None:
    """Take the agent's notebook out of ``/api/sessions`` and leave its kernel running.

    jupyter_server's ``delete_session`` always shuts the kernel down, and it has
    no other call that removes a session, so its row is deleted as that call does,
    without the shutdown.
    """
    try:
        await ensure_async(session_manager.get_session(session_id=jupyter_session_id))
        session_manager.cursor.execute(
            "DELETE FROM session WHERE session_id=?", (jupyter_session_id,)
        )
    except Exception:  # removed meanwhile, or a session manager of another shape
        log.warning(
            "could not unbind Jupyter session %s; the kernel keeps running",
            jupyter_session_id,
            exc_info=True,
        )
