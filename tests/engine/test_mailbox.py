"""Shell replies go to whoever asked for them: two requests in flight on one kernel (a
cell's state commit and the idle session's signing, a test's silent call) both get their
reply, neither waits out its deadline for one the other read and dropped."""

from __future__ import annotations

import asyncio
import queue
import time
from pathlib import Path
from typing import Any

from jupyter_exec import AsyncSession
from jupyter_exec.engine.mailbox import Mailbox
from jupyter_exec.engine.receiver import Receiver


class Socket:
    """A shell socket fed by the test (a fake is enough: this is message routing)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.reads = 0

    async def get(self, timeout: float) -> dict[str, Any]:
        self.reads += 1
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise queue.Empty from None

    def answer(self, msg_id: str) -> None:
        self.queue.put_nowait({"parent_header": {"msg_id": msg_id}, "content": {"to": msg_id}})


def mailbox(socket: Socket, poll: float = 30.0) -> Mailbox:
    receiver: Receiver = socket  # type: ignore[assignment]
    return Mailbox(receiver, poll)


async def test_a_reply_read_by_another_waiter_reaches_its_asker_at_once() -> None:
    socket = Socket()
    box = mailbox(socket)  # a poll longer than the test: no waiter may wait for the clock
    deadline = time.monotonic() + 60
    first = asyncio.create_task(box.reply("a", deadline))
    second = asyncio.create_task(box.reply("b", deadline))
    await asyncio.sleep(0)
    socket.answer("b")  # the second's reply comes first, read by whoever reads
    socket.answer("a")
    got = await asyncio.wait_for(asyncio.gather(first, second), 10)  # not the 30 s poll
    assert [m["content"]["to"] for m in got] == ["a", "b"]


async def test_replies_nobody_waits_for_are_dropped_and_a_deadline_holds() -> None:
    socket = Socket()
    box = mailbox(socket, poll=0.05)
    socket.answer("abandoned")
    assert await box.reply("late", time.monotonic() + 0.3) is None
    assert socket.queue.empty()  # the stale reply was read and not kept
    socket.answer("late")  # its asker gave up: nobody keeps it either
    socket.answer("now")
    found = await box.reply("now", time.monotonic() + 5)
    assert found is not None
    assert found["content"]["to"] == "now"
    assert not box._asked  # nothing kept for anyone


async def test_quiet_gives_up_for_every_waiter() -> None:
    socket = Socket()
    box = mailbox(socket, poll=0.05)
    calls = 0

    async def dead() -> bool:
        nonlocal calls
        calls += 1
        return True

    deadline = time.monotonic() + 60
    got = await asyncio.wait_for(
        asyncio.gather(box.reply("a", deadline, dead), box.reply("b", deadline, dead)), 10
    )
    assert got == [None, None]
    assert calls >= 2


async def test_concurrent_silent_requests_on_a_real_kernel_each_get_their_reply(
    tmp_path: Path,
) -> None:
    async with AsyncSession(work_dir=tmp_path, notebook=False, save_state=False) as session:
        kernel = session._kernel
        assert kernel is not None
        deadline = time.monotonic() + 60
        replies = await asyncio.gather(
            *(kernel.run_silent("", deadline, expressions={"r": f"{n} * 2"}) for n in range(8))
        )
        assert [r["user_expressions"]["r"]["data"]["text/plain"] for r in replies if r] == [
            str(n * 2) for n in range(8)
        ]  # every one answered: none read and dropped by another
