"""Pending network approvals: a Docker kernel's request to a host its policy leaves to a person.

A session created over REST with ``"network": {..., "ask": true}`` gets a policy whose
``ask`` is :meth:`Approvals.asker`: when the kernel tries a host no rule decides, the
session's proxy awaits it, and the request waits here as a :class:`PendingApproval` that
``GET /api/exec/approvals`` lists and ``POST /api/exec/approvals/{id}`` answers::

    kernel ─► proxy: CONNECT web.test:443 (no rule decides)
                 └─► ask(request) ─► PendingApproval ◄── GET  /api/exec/approvals
                                         │           ◄── POST /api/exec/approvals/{id}
                 ◄── True / False ◄──────┘               {"allow": true}
                     (or False after ``timeout`` seconds: denied)

The proxy remembers the answer for that host *and port* for the rest of the
session, so a person is asked once per host and port (a yes for ``host:443`` does not
open ``host:22``). An approval nobody answers in time is denied; the
kernel's request then fails with the policy's denial message. Closing a session
denies what it still waits for.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from jupyter_exec.network import NetworkRequest
from jupyter_exec.server.errors import ApprovalNotFound

__all__ = ["ApprovalNotFound", "Approvals", "PendingApproval"]


@dataclass
class PendingApproval:
    """One connection waiting for a person's answer."""

    id: str
    session: str
    """The REST id of the session whose kernel asked."""
    host: str
    port: int
    cell: int | None
    """The 0-based index of the cell that was running (None: between cells)."""
    since: datetime
    expires: datetime
    answer: asyncio.Future[bool] = field(repr=False)

    def model(self) -> dict[str, Any]:
        """The JSON of the ``Approval`` schema."""
        return {
            "id": self.id,
            "session": self.session,
            "host": self.host,
            "port": self.port,
            "cell": self.cell,
            "since": self.since.isoformat(),
            "expires": self.expires.isoformat(),
        }


class Approvals:
    """Every pending approval of the server's sessions, oldest first.

    ``timeout`` is how many seconds a request waits for an answer before it is
    denied (``JupyterExecApp.approval_timeout``).
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._pending: dict[str, PendingApproval] = {}

    def asker(self, session_id: str) -> Callable[[NetworkRequest], Awaitable[bool]]:
        """The ``ask`` callback of session ``session_id``'s policy."""

        async def ask(request: NetworkRequest) -> bool:
            return await self.wait(session_id, request)

        return ask

    async def wait(self, session_id: str, request: NetworkRequest) -> bool:
        """Hold ``request`` as pending until it is answered, or deny it after the timeout."""
        now = datetime.now(timezone.utc)
        pending = PendingApproval(
            id=uuid.uuid4().hex,
            session=session_id,
            host=request.host,
            port=request.port,
            cell=request.cell,
            since=now,
            expires=now + timedelta(seconds=self.timeout),
            answer=asyncio.get_running_loop().create_future(),
        )
        self._pending[pending.id] = pending
        try:
            return await asyncio.wait_for(asyncio.shield(pending.answer), self.timeout)
        except asyncio.TimeoutError:
            return False
        finally:
            self._pending.pop(pending.id, None)

    def list(self, session_id: str | None = None) -> list[PendingApproval]:
        """The pending approvals, of one session or of all."""
        return [p for p in self._pending.values() if session_id in (None, p.session)]

    def answer(self, approval_id: str, allow: bool) -> PendingApproval:
        """Allow or deny a pending approval; :class:`ApprovalNotFound` if there is none."""
        pending = self._pending.pop(approval_id, None)
        if pending is None or pending.answer.done():
            raise ApprovalNotFound(
                f"no pending approval with id {approval_id!r} (answered already, timed out "
                "after JupyterExecApp.approval_timeout, or its session closed); list them with "
                "GET /api/exec/approvals"
            )
        pending.answer.set_result(allow)
        return pending

    def deny_all(self, session_id: str) -> None:
        """Deny whatever ``session_id`` still waits for (its session is closing)."""
        for pending in self.list(session_id):
            self._pending.pop(pending.id, None)
            if not pending.answer.done():
                pending.answer.set_result(False)
