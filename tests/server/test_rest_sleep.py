"""REST sessions sleep and wake: the kernel given back to the server, the state back on use.

A real jupyter_server with the extension (pytest-jupyter's in-process server; a real
``jupyter server`` process for the restart), real kernels. See jupyter_exec/server/sleeping.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import read_valid_notebook
from tests.server.restart_helpers import call, kernels, new_session, run, stop
from tests.server.server_helpers import JupyterProcess, run_as_person

Api = Callable[..., Awaitable[tuple[int, Any]]]

pytestmark = pytest.mark.timeout(300)

# The first cell counts its runs in a file: a wake that loads the state does not run it again.
FIRST = (
    "import pathlib\npathlib.Path('runs.txt').open('a').write('1')\nx = 41\nbig = bytes(2_000_000)"
)


async def _kernel_ids(jp_fetch: Any) -> list[str]:
    return [k["id"] for k in json.loads((await jp_fetch("api", "kernels")).body)]


async def _execute(api: Api, session_id: str, code: str) -> dict[str, Any]:
    status, out = await api("POST", "sessions", session_id, "execute", body={"code": code})
    assert status == 200, out
    assert isinstance(out, dict)
    return out


async def test_a_slept_session_gives_its_kernel_back_and_wakes_with_its_state(
    api: Api, jp_fetch: Any, root: Path
) -> None:
    status, model = await api("POST", "sessions", body={"name": "nap", "work_dir": "naps"})
    assert status == 201, model
    assert (await _execute(api, model["id"], FIRST))["status"] == "ok"
    assert (await _execute(api, model["id"], "import threading\nlock = threading.Lock()"))[
        "status"
    ] == "ok"
    kernel = model["kernel"]["id"]
    assert kernel in await _kernel_ids(jp_fetch)

    status, asleep = await api("POST", "sessions", model["id"], "sleep")
    assert status == 200, asleep
    assert (asleep["id"], asleep["status"], asleep["sleeping"]) == (model["id"], "sleeping", True)
    assert asleep["kernel"]["id"] is None
    assert "lock" in asleep["unsaved"]  # what will not come back is said to the caller
    assert await _kernel_ids(jp_fetch) == []  # the server's kernel is gone: no memory held
    jupyter_sessions = json.loads((await jp_fetch("api", "sessions")).body)
    assert model["notebook"]["path"] not in [s["path"] for s in jupyter_sessions]
    listed = {s["id"]: s for s in (await api("GET", "sessions"))[1]}
    assert listed[model["id"]]["status"] == "sleeping"
    again = await api("POST", "sessions", model["id"], "sleep")
    assert again == (200, asleep)  # asleep already: the same answer, no kernel started
    assert await _kernel_ids(jp_fetch) == []

    out = await _execute(api, model["id"], "print(x + 1, len(big))")
    assert (out["status"], out["stdout"]) == ("ok", "42 2000000\n")
    assert (root / "naps" / "runs.txt").read_text() == "1"  # loaded, not run again
    status, awake = await api("GET", "sessions", model["id"])
    assert status == 200
    assert awake["status"] in ("idle", "busy")
    assert awake["kernel"]["alive"] is True
    assert awake["kernel"]["id"] in await _kernel_ids(jp_fetch)
    notebook = read_valid_notebook(root / "naps" / "nap.ipynb")
    sources = [c.source for c in notebook.cells if c.cell_type == "code"]
    assert sources[0] == FIRST
    assert sources[-1] == "print(x + 1, len(big))"  # one record, extended
    (resumed,) = notebook.metadata["jupyter_exec"]["resumed"]
    assert resumed["state_cells"] == 2  # the wake loaded the signed state of both cells
    assert (await api("DELETE", "sessions", model["id"]))[0] == 204


async def test_a_session_on_a_persons_kernel_does_not_sleep(
    api: Api, jp_fetch: Any, jp_serverapp: Any
) -> None:
    body = {"path": "mine.ipynb", "type": "notebook", "name": "mine.ipynb", "kernel": {}}
    response = await jp_fetch("api", "sessions", method="POST", body=json.dumps(body))
    persons = json.loads(response.body)["kernel"]["id"]
    assert (await run_as_person(jp_serverapp, persons, "mine = 1"))["status"] == "ok"  # in use
    status, model = await api("POST", "sessions", body={"name": "helper", "kernel_id": persons})
    assert status == 201, model
    assert (await _execute(api, model["id"], "y = 1"))["status"] == "ok"

    status, error = await api("POST", "sessions", model["id"], "sleep")

    assert (status, error["error"]) == (409, "CheckpointError")
    assert "a person's" in error["message"]
    assert persons in await _kernel_ids(jp_fetch)  # the person's kernel runs on
    assert (await _execute(api, model["id"], "y + 1"))["text"] == "2"
    assert (await api("DELETE", "sessions", model["id"]))[0] == 204


async def test_sleeping_an_unknown_session_is_404(api: Api) -> None:
    status, error = await api("POST", "sessions", "0" * 32, "sleep")
    assert (status, error["error"]) == (404, "SessionNotFound")


async def test_a_sleeping_session_deleted_is_gone_and_starts_no_kernel(
    api: Api, jp_fetch: Any
) -> None:
    status, model = await api("POST", "sessions", body={"name": "gone"})
    assert status == 201, model
    assert (await api("POST", "sessions", model["id"], "sleep"))[0] == 200

    assert (await api("DELETE", "sessions", model["id"]))[0] == 204

    assert await _kernel_ids(jp_fetch) == []
    status, error = await api("POST", "sessions", model["id"], "execute", body={"code": "1"})
    assert (status, error["error"]) == (404, "SessionNotFound")
    assert model["id"] not in [s["id"] for s in (await api("GET", "sessions"))[1]]


@pytest.mark.parametrize(
    "jp_server_config",
    [{"AsyncSessionManager": {"sleep_after": 0.5, "cull_interval": 0.1}}],
    indirect=True,
    ids=["sleep-after-0.5s"],
)
async def test_an_idle_session_is_put_to_sleep_by_the_culler_and_wakes_on_use(
    api: Api, jp_fetch: Any
) -> None:
    status, model = await api("POST", "sessions", body={"name": "idle"})
    assert status == 201, model
    assert (await _execute(api, model["id"], "z = 7"))["status"] == "ok"
    deadline = time.monotonic() + 60
    while (await api("GET", "sessions", model["id"]))[1]["status"] != "sleeping":
        assert time.monotonic() < deadline, "the idle session never fell asleep"
        await asyncio.sleep(0.1)
    assert await _kernel_ids(jp_fetch) == []

    out = await _execute(api, model["id"], "z * 6")

    assert (out["status"], out["text"]) == ("ok", "42")
    assert (await api("DELETE", "sessions", model["id"]))[0] == 204


def test_a_sleeping_session_survives_a_server_sigkill(tmp_path: Path) -> None:
    with JupyterProcess(tmp_path) as server:
        model = new_session(server, name="night", work_dir="work")
        assert run(server, model["id"], "x = 41")["status"] == "ok"
        status, asleep = call(server, "POST", f"sessions/{model['id']}/sleep")
        assert (status, asleep["status"]) == (200, "sleeping"), asleep
        assert kernels(server) == []
        stop(server, "SIGKILL")

    with JupyterProcess(tmp_path) as server:
        status, listing = call(server, "GET", "sessions")
        assert status == 200
        (back,) = listing
        assert (back["id"], back["status"]) == (model["id"], "dormant")
        out = run(server, model["id"], "print(x + 1)")
        assert (out["status"], out["stdout"]) == ("ok", "42\n")
        stop(server, "SIGTERM")
