"""Sleep for the extension's sessions: an idle session gives its kernel back and returns on use.

A REST session's kernel is the Jupyter server's (JupyterLab lists it, ``/api/kernels``
serves it), so its sleep is not the engine's :meth:`~jupyter_exec.AsyncSession.sleep`,
which stops a kernel the session started itself. It is the path a server restart
takes, taken on purpose, for one session::

    POST .../sleep, or the     ─► the session closed as a stopping server closes it: the
    culler (sleep_after)          last cell's state flushed and signed, its kernel and its
                                  Jupyter session gone, its saved entry kept
                               ─► listed with ``status: sleeping`` (no kernel, RSS 0)
    its next use (execute,     ─► brought back as a session from before a restart is
    fork, undo...)                (:meth:`~jupyter_exec.AsyncSession.resume`: a new server
                                  kernel, the signed state loaded, later cells run again),
                                  under the same id, with its network policy
    a server restart meanwhile ─► ``dormant`` like every session of the last run: the same
                                  wake, without the policy (its secrets never reach disk)

Refused with :class:`~jupyter_exec.CheckpointError` (409) where the state could not come
back: a session on a person's kernel (attached with ``kernel_id``: not the session's to
stop), a kernel of another language than Python, ``save_state`` off. The names the saved
state does not hold (an open file, a lambda...) are the reply's ``unsaved``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jupyter_exec.boundary.folders import FolderClaim, trust_of
from jupyter_exec.boundary.folders import claim as claim_folder
from jupyter_exec.exceptions import CheckpointError, JupyterExecError
from jupyter_exec.session.sleep import state_refusal, unsaved_names
from jupyter_exec.state.generations import signed_on_disk

if TYPE_CHECKING:
    from jupyter_exec.manager import AsyncSessionManager
    from jupyter_exec.manager.dormant import DormantSessions
    from jupyter_exec.network import NetworkPolicy
    from jupyter_exec.server.entry import ServerSession
    from jupyter_exec.server.saved import SavedSession

__all__ = ["Asleep", "Sleeping"]

log = logging.getLogger("jupyter_exec.server")


@dataclass(frozen=True)
class Asleep:
    """What this run keeps of a session it put to sleep (in memory only)."""

    policy: NetworkPolicy | None
    """Its network policy, for its wake (a policy holds secrets: never written)."""
    unsaved: dict[str, str]
    """The names its saved state does not hold, each with why."""
    folder: FolderClaim
    """Its work dir, still held: asleep, it is still the folder's one owner, so no session of
    the other trust (a Docker kernel beside a local one) works there meanwhile."""


class Sleeping:
    """Putting sessions to sleep.

    A mixin of :class:`~jupyter_exec.server.sessions.ServerSessions`.
    """

    manager: AsyncSessionManager
    dormant: DormantSessions[SavedSession]
    _asleep: dict[str, Asleep]
    _falling_asleep: dict[str, asyncio.Future[dict[str, str]]]
    _keep_saved: set[str]
    _dormant_cells: dict[str, int]

    if TYPE_CHECKING:  # provided by ServerSessions and Creation (declared only)

        def get(self, session_id: str) -> ServerSession: ...

        def _saved_of(self, entry: ServerSession) -> SavedSession: ...

    def is_asleep(self, session_id: str) -> bool:
        """Whether ``session_id`` was put to sleep by this run and has not woken."""
        return session_id in self._asleep and session_id in self.dormant

    async def sleep(self, session_id: str) -> dict[str, str]:
        """Put the session to sleep (see the module docstring); the names not saved.

        Asleep already: the same names again. Concurrent calls share one sleep. A session
        that cannot sleep raises :class:`~jupyter_exec.CheckpointError` and keeps running.
        """
        if self.is_asleep(session_id):
            return dict(self._asleep[session_id].unsaved)
        pending = self._falling_asleep.get(session_id)
        if pending is None:
            entry = self.get(session_id)
            _refuse(entry)
            pending = asyncio.ensure_future(self._put_to_sleep(entry))
            self._falling_asleep[session_id] = pending
            pending.add_done_callback(lambda _: self._falling_asleep.pop(session_id, None))
        return dict(await asyncio.shield(pending))

    async def woken(self, session_id: str) -> None:
        """Wait for a sleep under way, so a call that comes during it wakes the session
        afterwards instead of finding it gone."""
        pending = self._falling_asleep.get(session_id)
        if pending is not None:
            # a failed sleep: the session is awake, or closed, as its caller was told
            with contextlib.suppress(JupyterExecError):
                await asyncio.shield(pending)

    async def _put_to_sleep(self, entry: ServerSession) -> dict[str, str]:
        saved = self._saved_of(entry)
        # Held before the session's own claim goes with its close (claims of one trust
        # overlap): no moment in which the folder has no owner.
        who = f"session {entry.name!r} ({entry.backend}, asleep)"
        held = claim_folder(entry.work_dir, trust_of(entry.backend), who)
        # Listed as sleeping from the start: the listing never loses it while it closes
        # (every route on it waits for this sleep first: ``woken``).
        self._asleep[entry.id] = Asleep(entry.policy, {}, held)
        self.dormant.add(entry.id, saved)
        self._keep_saved.add(entry.id)
        try:  # the close flushes and signs the last cell's state, and gives the kernel back
            await self.manager.close_session(entry.id)
        except BaseException:
            self.forget_sleep(entry.id)
            self.dormant.discard(entry.id)
            raise
        finally:
            self._keep_saved.discard(entry.id)
        unsaved = _unsaved(entry)
        self._asleep[entry.id] = Asleep(entry.policy, unsaved, held)
        self._dormant_cells.pop(entry.id, None)  # counted again for the listing
        log.info("jupyter-exec session %s: asleep (kernel %s stopped)", entry.id, entry.kernel_id)
        return unsaved

    def policy_for_wake(self, session_id: str) -> NetworkPolicy | None:
        """The network policy a session put to sleep by this run comes back with."""
        asleep = self._asleep.get(session_id)
        return None if asleep is None else asleep.policy

    def forget_sleep(self, session_id: str) -> None:
        """The session woke (its own claim holds the folder now) or was deleted: nothing of
        its sleep is kept, its hold on the folder neither."""
        asleep = self._asleep.pop(session_id, None)
        if asleep is not None:
            asleep.folder.release()

    def sleeping_fields(self, session_id: str) -> dict[str, Any]:
        """The listing's fields of a session put to sleep by this run (none otherwise)."""
        asleep = self._asleep.get(session_id)
        if asleep is None:
            return {}
        return {"status": "sleeping", "sleeping": True, "unsaved": dict(asleep.unsaved)}


def _refuse(entry: ServerSession) -> None:
    """Raise :class:`~jupyter_exec.CheckpointError` saying why ``entry`` cannot sleep."""
    kernel = entry.session.kernel_slot.kernel
    if entry.borrowed is not None:
        why: str | None = (
            "its kernel is a person's (the session was attached to it with kernel_id): "
            "not the session's to stop"
        )
    elif kernel is None:
        why = "it has no kernel"
    else:
        why = state_refusal(entry.session, kernel)
    if why is not None:
        raise CheckpointError(f"session {entry.id!r} cannot sleep: {why}")


def _unsaved(entry: ServerSession) -> dict[str, str]:
    """The names the session's newest signed generation left out, each with why."""
    signed = signed_on_disk(entry.work_dir, entry.session.name)
    return (unsaved_names(entry.work_dir, signed[-1], 0, entry.id) or {}) if signed else {}
