"""The manager's idle sleep (``sleep_after``): an idle session sleeps instead of closing, is
listed as sleeping, and its next call through the manager wakes it with its state."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from jupyter_exec.manager import AsyncSessionManager
from tests.generation_helpers import kernel_pid, process_gone

DEADLINE = 60.0


async def _until(condition: object, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < end, f"never happened: {what}"
        await asyncio.sleep(0.05)


async def test_an_idle_session_sleeps_is_listed_sleeping_and_wakes_on_its_next_call(
    tmp_path: Path,
) -> None:
    async with AsyncSessionManager(
        root_dir=str(tmp_path), sleep_after=0.3, session_defaults={"timeout": DEADLINE}
    ) as manager:
        session = await manager.session("idle")
        await manager.execute("idle", "import threading\nx = 40\nlock = threading.Lock()")
        pid = kernel_pid(session)
        await _until(lambda: session.sleeping, "the idle session slept")
        assert process_gone(pid)
        [info] = manager.list()
        assert (info.name, info.sleeping, info.state, info.alive) == (
            "idle",
            True,
            "sleeping",
            False,
        )
        assert "idle" in manager  # still open: listed, not culled

        woken = await manager.execute("idle", "x + 2")
        assert woken.text == "42"
        assert woken.recovered is not None
        assert set(woken.recovered.lost) == {"lock"}
        assert manager.get("idle") is session
        [info] = manager.list()
        assert info.state in ("idle", "busy")
        assert not info.sleeping
