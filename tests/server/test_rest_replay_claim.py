"""A REST replay owns its output too: two requests to replay one notebook never share a folder.

The server records a replay of ``x.ipynb`` to ``x.replayed.ipynb`` and runs it in
``x.replayed_work/`` beside it, so two requests for the same notebook name the same output.
The second is refused (409, ``SessionConflict``, naming the server's pid) while the first
runs, and the first completes in its folder. A replay whose record would be a live REST
session's notebook is refused the same way.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from jupyter_exec.boundary.claims import is_claim_name
from tests.replay_claim_helpers import WAIT, held_notebook, valid


async def _until_started(started: Path, first: asyncio.Task[Any]) -> None:
    deadline = time.monotonic() + WAIT
    while not started.exists():
        assert not first.done(), first.result()  # it ended before its first cell ran
        assert time.monotonic() < deadline, "the first replay's first cell never ran"
        await asyncio.sleep(0.02)


async def test_a_second_rest_replay_of_a_notebook_is_refused_while_the_first_runs(
    api: Any, root: Path, tmp_path: Path
) -> None:
    held = held_notebook(root / "project", tmp_path / "control")
    body = {"notebook": "project/held.ipynb", "timeout": 300}
    first = asyncio.ensure_future(api("POST", "replay", body=body, request_timeout=300))
    try:
        await _until_started(held.started, first)
        run = held.kernel_folder()
        assert run == root / "project" / "held.replayed_work"

        status, error = await api("POST", "replay", body=body, request_timeout=60)

        assert status == 409, error
        assert error["error"] == "SessionConflict"
        assert f"a replay of held.ipynb (pid {os.getpid()}," in error["message"]
        assert held.kernel_folder() == run
        assert (run / "data.csv").is_file()
    finally:
        held.release()
    status, report = await first
    assert status == 200, report
    assert report["reproduced"] is True, report
    assert (run / "made_by_cell.txt").read_text() == "x"
    valid(root / "project" / "held.replayed.ipynb")
    assert not any(is_claim_name(p.name) for p in (root / "project").rglob("*"))


async def test_a_rest_replay_onto_a_live_sessions_notebook_is_refused(
    api: Any, root: Path, tmp_path: Path
) -> None:
    held = held_notebook(root / "project", tmp_path / "control")
    held.release()
    status, model = await api(
        "POST", "sessions", body={"name": "held.replayed", "work_dir": "project"}
    )
    assert status == 201, model
    try:
        sid = model["id"]
        assert (await api("POST", "sessions", sid, "execute", body={"code": "y = 2"}))[0] == 200
        assert model["notebook"]["path"] == "project/held.replayed.ipynb"

        status, error = await api("POST", "replay", body={"notebook": "project/held.ipynb"})

        assert status == 409, error
        assert "live session 'held.replayed'" in error["message"]
        recorded = valid(root / "project" / "held.replayed.ipynb")
        assert [c.source for c in recorded.cells] == ["y = 2"]
        assert not (root / "project" / "held.replayed_work").exists()
    finally:
        await api("DELETE", "sessions", model["id"])
