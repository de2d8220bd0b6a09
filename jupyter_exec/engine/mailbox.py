"""One kernel's shell replies, each handed to whoever asked for it.

Every request the host sends a kernel on its shell channel (a cell, a silent state
commit, the writer's flush, the idle session's signing, the environment report, a
file listing) gets its reply on that one socket, in the order the kernel handled
them. Two waiters reading the socket each for their own reply used to drop the
other's: the loser waited out its whole deadline (120 s for a test's silent call
meeting the idle signer). Here whoever reads keeps a reply another waiter asked
for and wakes it; a reply nobody waits for any more (its asker gave up) is dropped.
Only one waiter reads at a time; the others wait for their reply or their turn,
never for the clock. Uncontended (the usual case) this costs a dict entry.
"""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import Awaitable, Callable
from typing import Any

from jupyter_exec.engine.receiver import Receiver

__all__ = ["Mailbox"]

Quiet = Callable[[], Awaitable[bool]]
"""Called when the socket has been quiet for a poll: True gives up (the kernel is dead,
the session is closing); it may also raise, which ends the wait with that error."""


class Mailbox:
    """The shell replies of one kernel, routed by the request they answer."""

    def __init__(self, shell: Receiver, poll: float) -> None:
        self._shell = shell
        self._poll = poll
        self._asked: dict[str, dict[str, Any] | None] = {}
        self._reading = False
        self._turn = asyncio.Event()

    async def reply(
        self, msg_id: str, deadline: float, quiet: Quiet | None = None
    ) -> dict[str, Any] | None:
        """The whole reply message to ``msg_id``; None when none came by ``deadline`` or
        ``quiet`` gave up."""
        self._asked.setdefault(msg_id, None)
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                found = self._asked.get(msg_id)
                if found is not None:
                    return found
                if self._reading:  # another waiter reads: it hands ours over, or its turn
                    turn = self._turn
                    try:
                        await asyncio.wait_for(turn.wait(), min(self._poll, remaining))
                    except asyncio.TimeoutError:
                        if quiet is not None and await quiet():
                            return None
                    continue
                msg = await self._read(min(self._poll, remaining))
                if msg is None:
                    if quiet is not None and await quiet():
                        return None
                    continue
                parent = msg["parent_header"].get("msg_id")
                if parent == msg_id:
                    return msg
                if parent in self._asked:
                    self._asked[parent] = msg
            return self._asked.get(msg_id)
        finally:
            self._asked.pop(msg_id, None)

    async def _read(self, timeout: float) -> dict[str, Any] | None:
        """The next message on the socket (None: quiet for ``timeout``); then the next
        waiter's turn, woken at once."""
        self._reading = True
        try:
            return await self._shell.get(timeout)
        except queue.Empty:
            return None
        finally:
            self._reading = False
            if len(self._asked) > 1:  # someone else waits for a reply or its turn: wake them
                woken, self._turn = self._turn, asyncio.Event()
                woken.set()
