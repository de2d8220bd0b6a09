"""The REST API against a real server (pytest-jupyter) and real kernels."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

from server_helpers import tiny_png


async def test_session_lifecycle(api, jp_fetch, root: Path) -> None:
    status, model = await api("POST", "sessions", body={"name": "life", "work_dir": "runs/a"})
    assert status == 201, model
    sid = model["id"]
    assert model["name"] == "life"
    assert model["work_dir"] == "runs/a"
    assert model["notebook"]["path"] == "runs/a/life.ipynb"
    assert (root / "runs/a/life.ipynb").is_file()

    # The kernel is the server's: listed in /api/kernels, bound to the notebook in /api/sessions.
    kernels = json.loads((await jp_fetch("api", "kernels")).body)
    assert model["kernel"]["id"] in [k["id"] for k in kernels]
    jupyter_sessions = json.loads((await jp_fetch("api", "sessions")).body)
    bound = {s["path"]: s["kernel"]["id"] for s in jupyter_sessions}
    assert bound["runs/a/life.ipynb"] == model["kernel"]["id"]

    assert (await api("GET", "sessions"))[1][0]["id"] == sid
    status, got = await api("GET", "sessions", sid)
    assert (status, got["kernel"]["alive"]) == (200, True)

    status, out = await api("POST", "sessions", sid, "execute", body={"code": "x = 6 * 7\nx"})
    assert (status, out["status"], out["text"]) == (200, "ok", "42")

    # The kernel runs in the work dir.
    status, out = await api(
        "POST", "sessions", sid, "execute", body={"code": "import os; os.getcwd()"}
    )
    assert Path(json.loads(out["text"].replace("'", '"'))).resolve() == (root / "runs/a").resolve()

    status, restarted = await api("POST", "sessions", sid, "restart")
    assert (status, restarted["kernel"]["id"]) == (200, model["kernel"]["id"])
    status, out = await api("POST", "sessions", sid, "execute", body={"code": "x"})
    assert (out["status"], out["error"]["ename"]) == ("error", "NameError")

    nb = json.loads((root / "runs/a/life.ipynb").read_text())
    assert [c["source"] for c in nb["cells"]][-1] == ["x"]
    assert nb["metadata"]["language_info"]["name"] == "python"
    assert nb["cells"][-1]["metadata"]["jupyter_exec"]["kernel"] == "restarted by request"

    status, _ = await api("DELETE", "sessions", sid)
    assert status == 204
    kernels = json.loads((await jp_fetch("api", "kernels")).body)
    assert model["kernel"]["id"] not in [k["id"] for k in kernels]
    assert (await api("GET", "sessions", sid))[0] == 404
    assert (root / "runs/a/life.ipynb").is_file()  # the record stays


async def test_results_errors_timeouts_and_file_urls(api, jp_fetch, session, root: Path) -> None:
    sid = session["id"]
    png = tiny_png()
    code = (
        "from IPython.display import Image, display\n"
        f"display(Image(data={png!r}))\n"
        "open('table.csv', 'w').write('a,b\\n1,2\\n')\n"
        "print('done')"
    )
    status, out = await api("POST", "sessions", sid, "execute", body={"code": code})
    assert (status, out["status"], out["stdout"]) == (200, "ok", "done\n")
    image = out["results"][0]["files"]["image/png"]
    assert image["path"] == "jupyter-exec/agent/agent_files/cell-001-1.png"  # its own folder
    urls = {f["path"]: f["url"] for f in out["files"]}
    assert set(urls) == {image["path"], "jupyter-exec/agent/table.csv"}
    assert base64.b64decode(out["results"][0]["data"]["image/png"]) == png

    # The URLs are Jupyter's own file handler (under the base URL), with its authentication.
    base = "/a%40b/"
    for path, url in urls.items():
        assert url.startswith(base + "files/")
        response = await jp_fetch(*url[len(base) :].split("/"))
        assert response.body == (root / path).read_bytes()
    unauthenticated = await jp_fetch(
        *image["url"][len(base) :].split("/"),
        headers={"Authorization": ""},
        raise_error=False,
        follow_redirects=False,
    )
    assert unauthenticated.code in (302, 401, 403)  # not served without the token
    assert unauthenticated.body != png

    status, out = await api("POST", "sessions", sid, "execute", body={"code": "1/0"})
    assert (status, out["status"], out["error"]["ename"]) == (200, "error", "ZeroDivisionError")

    keep = "kept = 1\nimport time\nfor _ in range(100): time.sleep(0.1)"
    status, out = await api("POST", "sessions", sid, "execute", body={"code": keep, "timeout": 0.5})
    assert (status, out["status"], out["error"]["ename"]) == (200, "timeout", "ExecutionTimeout")
    assert out["state_lost"] is False
    assert (await api("POST", "sessions", sid, "execute", body={"code": "kept"}))[1]["text"] == "1"

    status, model = await api("GET", "sessions", sid)
    assert model["cells"] == 4


async def test_interrupt_stops_running_code_and_keeps_state(api, session) -> None:
    sid = session["id"]
    await api("POST", "sessions", sid, "execute", body={"code": "y = 5"})
    loop = "import time\nfor _ in range(600): time.sleep(0.05)"
    running = asyncio.ensure_future(
        api("POST", "sessions", sid, "execute", body={"code": loop}, request_timeout=60)
    )
    await asyncio.sleep(1.0)
    assert not running.done()
    assert (await api("POST", "sessions", sid, "interrupt"))[0] == 204
    status, out = await asyncio.wait_for(running, 20)
    assert (status, out["status"], out["error"]["ename"]) == (200, "error", "KeyboardInterrupt")
    assert (await api("POST", "sessions", sid, "execute", body={"code": "y"}))[1]["text"] == "5"


def _events(raw: str) -> list[tuple[str, Any]]:
    events = []
    for block in raw.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln and not ln.startswith(":")]
        if lines:
            kind = lines[0].removeprefix("event: ")
            events.append((kind, json.loads(lines[1].removeprefix("data: "))))
    return events


async def test_stream_delivers_outputs_as_they_arrive(jp_fetch, session) -> None:
    arrivals: list[tuple[float, bytes]] = []
    loop = asyncio.get_running_loop()
    code = "import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second')\n'end'"
    response = await jp_fetch(
        "api",
        "exec",
        "sessions",
        session["id"],
        "execute",
        "stream",
        method="POST",
        body=json.dumps({"code": code}),
        streaming_callback=lambda chunk: arrivals.append((loop.time(), chunk)),
    )
    assert response.headers["Content-Type"].startswith("text/event-stream")
    raw = b"".join(chunk for _, chunk in arrivals).decode()
    events = _events(raw)
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "result"
    outputs = [data for kind, data in events if kind == "output"]
    assert outputs[0] == {"output_type": "stream", "name": "stdout", "text": "first\n"}
    assert events[-1][1]["stdout"] == "first\nsecond\n"
    assert events[-1][1]["text"] == "'end'"
    # "first" reached the client well before the code finished.
    first_at = next(t for t, chunk in arrivals if b"first" in chunk)
    result_at = next(t for t, chunk in arrivals if b"event: result" in chunk)
    assert result_at - first_at > 1.0


async def test_kernel_shut_down_from_outside(api, jp_fetch, session) -> None:
    await jp_fetch("api", "kernels", session["kernel"]["id"], method="DELETE")
    status, error = await api("POST", "sessions", session["id"], "execute", body={"code": "1"})
    assert (status, error["error"]) == (409, "KernelNotAliveError")
    assert "shut down outside" in error["message"]
    status, model = await api("GET", "sessions", session["id"])
    assert model["kernel"]["alive"] is False


async def test_replay_a_recorded_notebook(api, jp_fetch, session, root: Path) -> None:
    sid = session["id"]
    for code in ("n = 3", "print(sum(range(n)))", "n * 2"):
        assert (await api("POST", "sessions", sid, "execute", body={"code": code}))[0] == 200
    kernels_before = len(json.loads((await jp_fetch("api", "kernels")).body))

    status, report = await api(
        "POST", "replay", body={"notebook": session["notebook"]["path"]}, request_timeout=120
    )
    assert status == 200, report
    assert report["reproduced"] is True, report
    assert report["notebook"]["path"] == "jupyter-exec/agent/agent.ipynb"
    assert report["output"]["path"] == "jupyter-exec/agent/agent.replayed.ipynb"
    assert (root / report["output"]["path"]).is_file()
    assert [c["status"] for c in report["cells"]] == ["same", "same", "same"]
    # The replay's kernel came from the server and is gone again.
    assert len(json.loads((await jp_fetch("api", "kernels")).body)) == kernels_before

    for notebook in ("../outside.ipynb", "jupyter-exec/agent/missing.ipynb", "/etc/passwd"):
        status, error = await api("POST", "replay", body={"notebook": notebook})
        assert status == 400, (notebook, error)
    (root / "broken.ipynb").write_text("{not json")
    status, error = await api("POST", "replay", body={"notebook": "broken.ipynb"})
    assert (status, error["error"]) == (400, "InvalidRequest")
    assert "not valid JSON" in error["message"]


async def test_a_rest_replay_runs_in_its_own_folder_and_saves_state_only_when_asked(
    api, session, root: Path
) -> None:
    sid = session["id"]
    code = "%%file made.txt\nhello"
    assert (await api("POST", "sessions", sid, "execute", body={"code": code}))[0] == 200
    folder = root / "jupyter-exec" / "agent"
    run = folder / "agent.replayed_work"
    for asked in (None, True):
        body: dict[str, Any] = {"notebook": session["notebook"]["path"]}
        if asked is not None:
            body["save_state"] = asked
        status, report = await api("POST", "replay", body=body, request_timeout=120)
        assert status == 200, report
        assert report["reproduced"] is True, [c["diff"] for c in report["cells"]]
        assert report["work_dir"] == "jupyter-exec/agent/agent.replayed_work"
        assert (run / "made.txt").read_text() == "hello\n"
        assert (run / ".agent.replayed_state").is_dir() is bool(asked)
