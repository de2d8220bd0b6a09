"""Fork, undo, checkpoints and restore over REST, on a real server with real local kernels.

A fork must be the server's kernel as much as its parent's is: listed in ``/api/kernels``,
its notebook bound to it in ``/api/sessions``, and a person connecting to it the way
JupyterLab does (the kernel's websocket) must find the fork's own state there.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import nbformat

Api = Any


async def _run(api: Api, sid: str, code: str) -> dict[str, Any]:
    status, out = await api("POST", "sessions", sid, "execute", body={"code": code})
    assert status == 200, out
    return dict(out)


async def _jupyter(jp_fetch: Any, *parts: str) -> Any:
    return json.loads((await jp_fetch("api", *parts)).body)


async def _ws_eval(jp_ws_fetch: Any, kernel_id: str, code: str) -> str:
    """``code``'s result on ``kernel_id``, asked through the server's kernel websocket."""
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        msg_id = uuid.uuid4().hex
        ws.write_message(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "msg_type": "execute_request",
                        "username": "person",
                        "session": uuid.uuid4().hex,
                        "version": "5.3",
                        "date": "",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "content": {"code": code, "silent": False, "store_history": False},
                    "channel": "shell",
                    "buffers": [],
                }
            )
        )
        while True:
            raw = await asyncio.wait_for(ws.read_message(), 60)
            assert raw is not None, "the kernel websocket closed"
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "execute_result":
                return str(msg["content"]["data"]["text/plain"])
            if msg["msg_type"] == "error":
                return f"{msg['content']['ename']}: {msg['content']['evalue']}"
    finally:
        ws.close()


async def test_forks_diverge_are_the_servers_kernels_and_link_their_parent(
    api: Api, jp_fetch: Any, jp_ws_fetch: Any, root: Path
) -> None:
    status, parent = await api("POST", "sessions", body={"name": "main"})
    assert status == 201, parent
    sid = parent["id"]
    await _run(api, sid, "rows = list(range(10))")

    response = await jp_fetch(
        "api", "exec", "sessions", sid, "fork", method="POST", body=json.dumps({"n": 2})
    )
    assert response.code == 201
    forks = json.loads(response.body)
    assert [f["name"] for f in forks] == ["main-fork-1", "main-fork-2"]
    assert response.headers["Location"].endswith(f"/api/exec/sessions/{forks[0]['id']}")
    assert forks[1]["id"] in response.headers["Link"]
    assert all(f["parent"] == sid for f in forks)
    assert (await api("GET", "sessions", sid))[1]["forks"] == [f["id"] for f in forks]

    # Each fork diverges; the parent goes on unchanged.
    for k, fork in enumerate(forks):
        await _run(api, fork["id"], f"rows = rows[:{k + 2}]")
    assert [(await _run(api, f["id"], "len(rows)"))["text"] for f in forks] == ["2", "3"]
    assert (await _run(api, sid, "len(rows)"))["text"] == "10"

    # The server's own kernels, each fork's notebook bound to its own, in the server's root.
    kernels = {k["id"] for k in await _jupyter(jp_fetch, "kernels")}
    bound = {s["path"]: s["kernel"]["id"] for s in await _jupyter(jp_fetch, "sessions")}
    ids = {parent["kernel"]["id"], *(f["kernel"]["id"] for f in forks)}
    assert len(ids) == 3
    assert ids <= kernels
    for fork in forks:
        assert bound[fork["notebook"]["path"]] == fork["kernel"]["id"]
        assert fork["notebook"]["path"] == f"jupyter-exec/main/{fork['name']}.ipynb"
        # A person opening the notebook (JupyterLab joins its kernel) finds the fork's state.
        assert await _ws_eval(jp_ws_fetch, fork["kernel"]["id"], "len(rows)") in ("2", "3")
    assert await _ws_eval(jp_ws_fetch, forks[0]["kernel"]["id"], "len(rows)") == "2"

    # The fork's notebook is valid and says where it branched.
    notebook = nbformat.read(root / forks[0]["notebook"]["path"], as_version=4)
    nbformat.validate(notebook)
    branched = notebook.metadata["jupyter_exec"]["fork"]
    assert branched["parent_session"] == "main"
    assert branched["cell_index"] == 1
    assert Path(branched["parent_notebook"]).resolve() == (root / parent["notebook"]["path"])
    assert [c.source for c in notebook.cells] == [
        "rows = list(range(10))",
        "rows = rows[:2]",
        "len(rows)",
    ]

    # Deleting a fork stops its kernel and unbinds its notebook; the parent is untouched.
    assert (await api("DELETE", "sessions", forks[0]["id"]))[0] == 204
    kernels = {k["id"] for k in await _jupyter(jp_fetch, "kernels")}
    assert forks[0]["kernel"]["id"] not in kernels
    assert (await api("GET", "sessions", sid))[1]["forks"] == [forks[1]["id"]]
    assert (await _run(api, forks[1]["id"], "len(rows)"))["text"] == "3"
    for session in (forks[1], parent):
        assert (await api("DELETE", "sessions", session["id"]))[0] == 204
    assert {k["id"] for k in await _jupyter(jp_fetch, "kernels")}.isdisjoint(ids)


async def test_a_busy_session_forks_after_its_cell_and_names_are_checked(
    api: Api, jp_serverapp: Any
) -> None:
    status, parent = await api("POST", "sessions", body={"name": "busy"})
    assert status == 201, parent
    sid = parent["id"]
    slow = asyncio.ensure_future(
        api(
            "POST",
            "sessions",
            sid,
            "execute",
            body={"code": "import time\ntime.sleep(1.5)\ndone = 'yes'"},
            request_timeout=120,
        )
    )
    await asyncio.sleep(0.3)
    status, forks = await api("POST", "sessions", sid, "fork", body={"name": "after"})
    assert status == 201, forks
    assert (await slow)[0] == 200
    assert (await _run(api, forks[0]["id"], "done"))["text"] == "'yes'"  # the fork has the cell

    # A fork restarts like any session: same kernel id, an empty kernel, still bound.
    status, restarted = await api("POST", "sessions", forks[0]["id"], "restart")
    assert (status, restarted["kernel"]["id"]) == (200, forks[0]["kernel"]["id"])
    assert restarted["kernel"]["alive"]
    assert (await _run(api, forks[0]["id"], "done"))["error"]["ename"] == "NameError"
    assert (await _run(api, forks[0]["id"], "6 * 7"))["text"] == "42"

    status, error = await api("POST", "sessions", sid, "fork", body={"name": "after"})
    assert (status, error["error"]) == (400, "InvalidArgument"), error
    kernels = set(jp_serverapp.kernel_manager.list_kernel_ids())
    jp_serverapp.web_app.settings["jupyter_exec_sessions"].max_sessions = 3
    status, error = await api("POST", "sessions", sid, "fork", body={"n": 2})
    assert (status, error["error"]) == (429, "SessionLimitReached"), error
    assert set(jp_serverapp.kernel_manager.list_kernel_ids()) == kernels  # nothing forked
    status, error = await api("POST", "sessions", sid, "fork", body={"n": 33})
    assert (status, error["error"]) == (400, "InvalidArgument"), error
    status, error = await api("POST", "sessions", sid, "fork", body={"n": 0})
    assert (status, error["error"]) == (400, "InvalidArgument"), error
    assert "from 1 to" in error["message"]
    for session in (*forks, parent):
        await api("DELETE", "sessions", session["id"])


async def test_undo_checkpoint_and_restore_over_rest(
    api: Api, jp_fetch: Any, jp_ws_fetch: Any, root: Path
) -> None:
    status, model = await api("POST", "sessions", body={"name": "steps", "undo_steps": 2})
    assert status == 201, model
    assert model["undo_steps"] == 2
    sid = model["id"]
    first_kernel = model["kernel"]["id"]
    await _run(api, sid, "x = 1")
    await _run(api, sid, "x = 2")

    status, undone = await api("POST", "sessions", sid, "undo", body={"n": 1})
    assert status == 200, undone
    assert (await _run(api, sid, "x"))["text"] == "1"
    # The notebook is bound to the kernel now serving the session; the replaced one is gone.
    kernel = undone["kernel"]["id"]
    assert kernel != first_kernel
    assert undone["kernel"]["alive"]
    bound = {s["path"]: s["kernel"]["id"] for s in await _jupyter(jp_fetch, "sessions")}
    assert bound[model["notebook"]["path"]] == kernel
    kernels = {k["id"] for k in await _jupyter(jp_fetch, "kernels")}
    assert kernel in kernels
    assert first_kernel not in kernels
    assert await _ws_eval(jp_ws_fetch, kernel, "x") == "1"

    status, error = await api("POST", "sessions", sid, "undo", body={"n": 5})
    assert (status, error["error"]) == (400, "InvalidArgument")
    assert "step(s) available" in error["message"]

    response = await jp_fetch(
        "api", "exec", "sessions", sid, "checkpoints", method="POST", body='{"name": "clean"}'
    )
    assert response.code == 201
    made = json.loads(response.body)
    assert (made["name"], made["session"]) == ("clean", "steps")
    assert response.headers["Location"].endswith(f"/sessions/{sid}/checkpoints/clean")
    status, auto = await api("POST", "sessions", sid, "checkpoints", body={})
    assert (status, auto["name"]) == (201, "checkpoint-2")
    status, listed = await api("GET", "sessions", sid, "checkpoints")
    assert [c["name"] for c in listed] == ["clean", "checkpoint-2"]

    await _run(api, sid, "x = 'changed'")
    status, restored = await api("POST", "sessions", sid, "checkpoints", "clean", "restore")
    assert status == 200, restored
    assert (await _run(api, sid, "x"))["text"] == "1"
    bound = {s["path"]: s["kernel"]["id"] for s in await _jupyter(jp_fetch, "sessions")}
    assert bound[model["notebook"]["path"]] == restored["kernel"]["id"]
    assert kernel not in {k["id"] for k in await _jupyter(jp_fetch, "kernels")}

    status, error = await api("POST", "sessions", sid, "checkpoints", "nope", "restore")
    assert (status, error["error"]) == (404, "CheckpointNotFound")
    assert "clean" in error["message"]
    status, error = await api("POST", "sessions", sid, "checkpoints", body={"name": "clean"})
    assert (status, error["error"]) == (400, "InvalidArgument")

    # The notebook keeps every cell, the undone ones marked; it stays valid.
    notebook = nbformat.read(root / model["notebook"]["path"], as_version=4)
    nbformat.validate(notebook)
    marks = [c.metadata.get("jupyter_exec", {}).get("undone", False) for c in notebook.cells]
    assert marks[1] is True  # "x = 2", taken back by the undo

    # A restart after these swaps still works, on the server's kernel.
    status, restarted = await api("POST", "sessions", sid, "restart")
    assert status == 200, restarted
    assert (await _run(api, sid, "x"))["status"] == "error"
    assert (await api("DELETE", "sessions", sid))[0] == 204
    assert restarted["kernel"]["id"] not in {k["id"] for k in await _jupyter(jp_fetch, "kernels")}


async def test_undo_is_refused_when_off_and_a_dead_kernel_is_a_conflict(
    api: Api, jp_fetch: Any
) -> None:
    status, model = await api("POST", "sessions", body={"name": "plain"})
    assert status == 201, model
    sid = model["id"]
    status, error = await api("POST", "sessions", sid, "undo", body={})
    assert (status, error["error"]) == (400, "InvalidArgument")
    assert "undo_steps" in error["message"]
    status, error = await api("POST", "sessions", body={"name": "many", "undo_steps": 101})
    assert (status, error["error"]) == (400, "InvalidRequest")

    # The kernel shut down from JupyterLab: every state operation says so, 409.
    await jp_fetch("api", "kernels", model["kernel"]["id"], method="DELETE")
    for parts, body in [
        (("fork",), {}),
        (("undo",), {}),
        (("checkpoints",), {"name": "late"}),
        (("checkpoints", "late", "restore"), None),
    ]:
        status, error = await api("POST", "sessions", sid, *parts, body=body)
        assert (status, error["error"]) == (409, "KernelNotAliveError"), parts
    status, error = await api("GET", "sessions", sid, "checkpoints")
    assert (status, error["error"]) == (409, "KernelNotAliveError")
    await api("DELETE", "sessions", sid)
