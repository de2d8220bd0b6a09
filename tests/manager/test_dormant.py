"""The dormant-session service the REST, MCP and E2B servers share (no kernel: the wake is
a function of the test's, which the restart tests of each front end replace with a real one)."""

from __future__ import annotations

import asyncio

import pytest

from jupyter_exec.exceptions import SessionLimitError
from jupyter_exec.manager.dormant import DormantSessions


class Front:
    """A front end's side: what is open, what was forgotten, and a wake the test holds."""

    def __init__(self) -> None:
        self.open: set[str] = set()
        self.forgotten: list[str] = []
        self.woken: list[str] = []
        self.gate = asyncio.Event()
        self.fail: Exception | None = None

    async def wake(self, entry: str) -> None:
        self.woken.append(entry)
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.open.add(entry)

    def service(self, *keys: str) -> DormantSessions[str]:
        return DormantSessions(
            {k: k for k in keys},
            wake=self.wake,
            forget=self.forgotten.append,
            live=self.open.__contains__,
        )


async def test_concurrent_first_uses_share_one_wake() -> None:
    front = Front()
    dormant = front.service("a", "b")
    assert dormant.list() == ["a", "b"]
    callers = [asyncio.ensure_future(dormant.wake("a")) for _ in range(3)]
    await asyncio.sleep(0)
    assert dormant.waking("a")
    front.gate.set()
    assert await asyncio.gather(*callers) == [True, True, True]
    assert front.woken == ["a"]  # one resume for three callers
    assert dormant.list() == ["b"]
    assert "a" not in dormant
    assert await dormant.wake("a") is False  # awake now: nothing to do
    assert await dormant.wake("never-saved") is False
    assert front.woken == ["a"]


async def test_a_failed_wake_leaves_it_dormant_and_says_why() -> None:
    front = Front()
    front.fail = SessionLimitError("full")
    front.gate.set()
    dormant = front.service("a")
    with pytest.raises(SessionLimitError, match="full"):
        await dormant.wake("a")
    assert dormant.get("a") == "a"
    assert not dormant.waking("a")
    front.fail = None
    assert await dormant.wake("a") is True
    assert front.woken == ["a", "a"]


async def test_drop_forgets_without_a_kernel_and_waits_for_one_being_woken() -> None:
    front = Front()
    dormant = front.service("a", "b")
    assert await dormant.drop("a") is True
    assert front.forgotten == ["a"]
    assert front.woken == []
    assert await dormant.drop("a") is False  # gone already

    waking = asyncio.ensure_future(dormant.wake("b"))
    await asyncio.sleep(0)
    dropping = asyncio.ensure_future(dormant.drop("b"))
    await asyncio.sleep(0)
    assert not dropping.done()  # waits for the wake: the caller then closes what came back
    front.gate.set()
    assert await dropping is False
    assert await waking is True
    assert front.forgotten == ["a"]
    assert "b" in front.open


async def test_a_session_open_under_the_key_hides_the_saved_one() -> None:
    front = Front()
    dormant = front.service("a")
    front.open.add("a")  # a new session took the name before any use of the saved one
    assert "a" not in dormant
    assert dormant.list() == []
    assert dormant.get("a") is None
    assert await dormant.wake("a") is False
    assert front.woken == []
    dormant.discard("a")
    front.open.clear()
    assert dormant.list() == []
