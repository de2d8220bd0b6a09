"""The session's declared hooks and its kernel's one owner, against a scripted kernel.

A hook sees each cell at the points engine/hooks.py draws, in that order; it may add to the
request and wrap the output callback; what it returns is what the caller gets; a lost kernel
and close reach it with what the session knows of the kernel.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from fake_kernel import Hang, scripted, started, stream

from jupyter_exec import Execution
from jupyter_exec.engine.core import KernelSlot
from jupyter_exec.engine.hooks import CellCall, CellHooks, KernelChange, KernelEvent
from jupyter_exec.engine.runner import CellRun

pytestmark = pytest.mark.timeout(60)


class Seen(CellHooks):
    """Notes every call; adds an expression, counts outputs, says more on the Execution."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.outputs = 0
        self.events: list[Any] = []

    async def before_cell(self, cell: CellCall) -> None:
        self.calls.append(f"before {cell.code}")
        cell.expressions["ours"] = "1"
        inner = cell.on_output

        async def counted(event: dict[str, Any]) -> None:
            self.outputs += 1
            if inner is not None:
                await inner(event)  # type: ignore[misc]

        cell.on_output = counted

    async def after_reply(self, cell: CellCall, run: CellRun) -> None:
        self.calls.append(f"reply {run.status}")

    async def after_record(self, cell: CellCall, execution: Execution | None) -> Execution | None:
        self.calls.append(f"record {execution is not None}")
        if execution is None:
            return None
        return dataclasses.replace(execution, code=execution.code + "  # seen")

    async def kernel_lost(self, event: KernelEvent) -> bool:
        self.events.append(("lost", event.dead))
        return False

    async def before_restart(self, event: KernelEvent) -> None:
        self.events.append(("restart", event.why))

    async def kernel_replaced(self, change: KernelChange) -> None:
        self.events.append(("replaced", change.reason, change.old is change.new))

    async def before_close(self, event: KernelEvent) -> None:
        self.events.append(("closing", event.dead))

    async def after_close(self, shuts_down_kernel: bool) -> None:
        self.events.append(("closed",))


async def test_a_hook_sees_each_cell_in_order_and_shapes_what_the_caller_gets(
    work_dir: Path,
) -> None:
    km = scripted({"go": [stream("a\n"), stream("b\n", "stderr")]})
    s = await started(km, work_dir)
    seen = Seen()
    s.hooks.add(seen)
    got: list[Any] = []
    r = await s.execute("go", on_output=got.append)
    await s.close()
    assert seen.calls == ["before go", "reply ok", "record True"]
    assert r.code == "go  # seen"
    assert r.stdout == "a\n"
    assert seen.outputs == len(got) >= 2  # the wrapped callback still reached the caller's
    assert seen.events == [("closing", False), ("closed",)]


async def test_a_cell_that_ends_without_a_record_still_reaches_after_record(
    work_dir: Path,
) -> None:
    km = scripted({"wait": [Hang()]})
    s = await started(km, work_dir)
    seen = Seen()
    s.hooks.add(seen)
    task = asyncio.create_task(s.execute("wait"))
    while not km.executed:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await s.close()
    assert seen.calls == ["before wait", "record False"]


async def test_a_lost_kernel_is_offered_to_the_hooks_then_restarted(work_dir: Path) -> None:
    km = scripted({"crash": [Hang(interruptible=False)]})
    s = await started(km, work_dir)
    seen = Seen()
    s.hooks.add(seen)
    generation = s.kernel_slot.generation
    task = asyncio.create_task(s.execute("crash"))
    while not km.executed:
        await asyncio.sleep(0.01)
    km.alive = False
    r = await task
    assert r.status == "died"
    assert km.restarts == 1
    assert seen.events[0] == ("lost", True)
    assert seen.events[1][0] == "restart"
    assert seen.events[2] == ("replaced", "lost", True)  # the same handle, restarted
    assert s.kernel_slot.generation > generation
    assert not s.kernel_slot.known_dead(s.kernel_slot.kernel)
    await s.close()


async def test_a_hook_that_raises_does_not_keep_the_others_from_tidying_up(
    work_dir: Path,
) -> None:
    class Fails(CellHooks):
        async def after_record(
            self, cell: CellCall, execution: Execution | None
        ) -> Execution | None:
            raise RuntimeError("hook failed")

    km = scripted({"go": []})
    s = await started(km, work_dir)
    seen = Seen()
    s.hooks.add(Fails())
    s.hooks.add(seen)
    with pytest.raises(RuntimeError, match="hook failed"):
        await s.execute("go")
    await s.close()
    assert seen.calls == ["before go", "reply ok", "record False"]


async def test_the_slot_counts_replacements_not_placements() -> None:
    slot = KernelSlot()
    first, second = object(), object()
    assert slot.place(first) is None  # type: ignore[arg-type]
    assert slot.generation == 0
    assert slot.swap(second) is first  # type: ignore[arg-type]
    assert slot.generation == 1
    slot.restarting()
    assert slot.generation == 2
    assert not slot.is_locked()
    async with slot.locked():
        assert slot.is_locked()
    assert slot.known_dead(None)
