"""The JupyterLab sessions panel: installed with the package, driven in a real browser.

An "agent" works over REST while a person watches and steers it from the panel in a real
JupyterLab (headless Debian Chromium, Playwright): the panel lists the agent's session, shows it
busy with its running cell while a long cell runs, interrupts it, opens its notebook on the
agent's kernel, starts a session for the agent and shuts one down. Every wait is on a state
(a row's ``data-status``, a REST answer), never on a sleep. Screenshots go to
``artifacts/browser/`` (``panel-*.png``).

The extension is the one the editable install builds and scripts/_venv.sh links into .venv,
where a wheel installs it: ``jupyter labextension list`` must show it enabled (that a wheel
built from a clean checkout carries it: tests/test_install.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from lab_helpers import (
    ARTIFACTS,
    add_cell,
    chromium_page,
    notebook_widget,
    open_lab,
    require_browser,
)
from server_helpers import JupyterProcess

REPO = Path(__file__).parents[2]
# Writes a flag in the work dir once it runs: an interrupt before that could land before
# the kernel runs the code (and be lost), so tests interrupt only once the flag is there.
LONG_CELL = (
    "import pathlib, time\npathlib.Path('running.flag').touch()\n"
    "for step in range(1200):\n    time.sleep(0.25)"
)

# One line, so typing it in the notebook's editor adds no indentation of its own; a flag too.
PERSON_CELL = (
    "import pathlib, time; pathlib.Path('person.flag').touch(); "
    "[time.sleep(0.25) for _ in range(2400)]"
)


# -- installed where JupyterLab looks ----------------------------------------------------


def test_labextension_is_listed_enabled_in_the_venv() -> None:
    """``jupyter labextension list`` of this environment shows the panel, enabled and OK."""
    listed = subprocess.run(
        [sys.executable, "-m", "jupyterlab.labextensions", "list"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    lines = [ln for ln in (listed.stdout + listed.stderr).splitlines() if "jupyter-exec" in ln]
    assert lines, listed.stdout + listed.stderr
    assert re.search(r"jupyter-exec v\S+ .*enabled.*OK.*\(python, jupyter-exec\)", lines[0]), lines


def test_server_extension_names_the_labextension() -> None:
    from jupyter_exec import server

    paths = server._jupyter_labextension_paths()
    assert paths == [{"src": "../labextension", "dest": "jupyter-exec"}]
    built = Path(server.__file__).parent / paths[0]["src"]
    meta = json.loads((built / "package.json").read_text())
    assert meta["name"] == "jupyter-exec"
    assert (built / meta["jupyterlab"]["_build"]["load"]).is_file()


# -- the listing the panel shows ---------------------------------------------------------


async def test_listing_shows_status_running_cell_and_last_activity(api, session, root) -> None:
    import asyncio

    sid = session["id"]
    flag = root / session["work_dir"] / "running.flag"
    assert (session["status"], session["running"]) == ("idle", None)
    datetime.fromisoformat(session["last_activity"])
    running = asyncio.ensure_future(
        api("POST", "sessions", sid, "execute", body={"code": LONG_CELL}, request_timeout=120)
    )
    model: dict[str, Any] = {}
    for _ in range(600):  # the cell starts within a minute even on a loaded machine
        model = (await api("GET", "sessions"))[1][0]
        if flag.exists() and model["running"] is not None:
            break
        await asyncio.sleep(0.1)
    assert model["status"] == "busy", model
    assert model["running"]["code"] == LONG_CELL
    datetime.fromisoformat(model["running"]["started"])
    assert (await api("POST", "sessions", sid, "interrupt"))[0] == 204
    status, out = await asyncio.wait_for(running, 60)
    assert (status, out["error"]["ename"]) == (200, "KeyboardInterrupt")
    status, model = await api("GET", "sessions", sid)
    for _ in range(600):  # the kernel's idle status follows its reply on another channel
        if model["status"] == "idle" and model["running"] is None:
            break
        await asyncio.sleep(0.1)
        model = (await api("GET", "sessions", sid))[1]
    assert (model["status"], model["running"]) == ("idle", None), model
    assert model["last_activity"] >= session["last_activity"]


def _message(kind: str, msg_id: str, **content: Any) -> dict[str, Any]:
    return {
        "header": {"msg_type": kind},
        "parent_header": {"msg_type": "execute_request", "msg_id": msg_id},
        "content": content,
    }


def test_activity_knows_the_running_cells_code_from_its_execute_input() -> None:
    from jupyter_exec.server.activity import KernelActivity

    activity = KernelActivity(kernel=None)
    assert activity.running is None
    activity.observe(_message("status", "a", execution_state="busy"))
    activity.observe(_message("execute_input", "a", code="slow()", execution_count=1))
    code, started = activity.running or ("", "")
    assert code == "slow()"
    datetime.fromisoformat(started)
    activity.observe(_message("stream", "a", name="stdout", text="x"))
    assert (activity.running or ("",))[0] == "slow()"
    activity.observe(_message("status", "a", execution_state="idle"))
    assert activity.running is None
    # A lost idle: the next cell on the same shell ends the old one, and its code with it.
    activity.observe(_message("status", "b", execution_state="busy"))
    activity.observe(_message("execute_input", "b", code="first()"))
    activity.observe(_message("status", "c", execution_state="busy"))
    activity.observe(_message("execute_input", "c", code="second()"))
    assert (activity.running or ("",))[0] == "second()"
    assert activity._code.keys() == {"c"}


# -- the panel in a real browser ---------------------------------------------------------


class Agent:
    """The agent's side: the REST API, with calls that may run in the background."""

    def __init__(self, lab: JupyterProcess) -> None:
        self.lab = lab

    def __call__(self, method: str, path: str = "", expect: int = 200, **body: Any) -> Any:
        response = requests.request(
            method,
            f"{self.lab.url}/api/exec/sessions{path}",
            json=body if body or method == "POST" else None,
            headers=self.lab.headers,
            timeout=300,
        )
        assert response.status_code == expect, response.text
        return response.json() if response.content else None

    def in_background(self, path: str, **body: Any) -> tuple[threading.Thread, list[Any]]:
        answer: list[Any] = []
        thread = threading.Thread(target=lambda: answer.append(self("POST", path, **body)))
        thread.start()
        return thread, answer


def test_person_watches_and_steers_the_agent_from_the_panel(lab: JupyterProcess) -> None:
    sync_api = require_browser("the panel test")
    expect = sync_api.expect
    agent = Agent(lab)
    session = agent("POST", expect=201, name="agent")
    sid = session["id"]
    assert agent("POST", f"/{sid}/execute", code="answer = 42")["status"] == "ok"

    with chromium_page(sync_api, "panel-failure.png") as page:
        open_lab(page, lab)
        page.locator(".lm-TabBar-tab[data-id='jupyter-exec-sessions']").click()
        panel = page.locator("#jupyter-exec-sessions")
        expect(panel).to_be_visible(timeout=30_000)

        # The agent's session is listed, idle, with its cell count and work dir.
        row = panel.locator(f".jp-ExecSessions-item[data-session-id='{sid}']")
        expect(row).to_have_attribute("data-status", "idle", timeout=30_000)
        expect(row.locator(".jp-ExecSessions-name")).to_have_text("agent")
        expect(row.locator(".jp-ExecSessions-meta")).to_contain_text("local · 1 cell")
        expect(row.locator(".jp-ExecSessions-workdir")).to_have_text("jupyter-exec/agent")
        page.screenshot(path=ARTIFACTS / "panel-1-listed.png")

        # A long cell over REST: the row turns busy and shows the running code.
        thread, answer = agent.in_background(f"/{sid}/execute", code=LONG_CELL)
        expect(row).to_have_attribute("data-status", "busy", timeout=60_000)
        expect(row.locator(".jp-ExecSessions-running")).to_have_text(LONG_CELL)
        flag = lab.root / session["work_dir"] / "running.flag"
        _wait_until(flag.exists, "the long cell to start")
        page.screenshot(path=ARTIFACTS / "panel-2-busy.png")
        close_up = {"x": 0, "y": 0, "width": 640, "height": 360}
        page.screenshot(path=ARTIFACTS / "panel-2-busy-close-up.png", clip=close_up)

        # Interrupt from the panel: the agent's call returns interrupted, the kernel idles.
        row.locator("button[data-action='interrupt']").click()
        thread.join(120)
        assert not thread.is_alive()
        assert answer[0]["error"]["ename"] == "KeyboardInterrupt", answer
        expect(row).to_have_attribute("data-status", "idle", timeout=30_000)
        expect(row.locator(".jp-ExecSessions-running")).to_be_hidden()
        assert agent("GET", f"/{sid}")["status"] == "idle"

        # Open the notebook from the panel: it joins the agent's kernel.
        row.locator("button[data-action='open']").click()
        notebook = notebook_widget(page, expect, "agent.ipynb")
        expect(notebook.locator(".jp-Notebook .jp-Cell")).to_have_count(2, timeout=30_000)
        idle = notebook.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
        expect(idle).to_have_count(1, timeout=30_000)
        bound = requests.get(f"{lab.url}/api/sessions", headers=lab.headers, timeout=30)
        paths = {s["path"]: s["kernel"]["id"] for s in bound.json()}
        assert paths[session["notebook"]["path"]] == session["kernel"]["id"]
        page.screenshot(path=ARTIFACTS / "panel-3-notebook.png")

        # The person runs a long cell in the notebook: the panel shows it (a person's cell
        # on the agent's kernel), and interrupt from the panel stops it there too.
        cells = notebook.locator(".jp-Notebook .jp-Cell")
        add_cell(page, expect, cells, PERSON_CELL, count=3)
        expect(row).to_have_attribute("data-status", "busy", timeout=60_000)
        expect(row.locator(".jp-ExecSessions-running")).to_have_text(PERSON_CELL)
        _wait_until((lab.root / session["work_dir"] / "person.flag").exists, "the cell")
        page.screenshot(path=ARTIFACTS / "panel-3-person-busy.png")
        row.locator("button[data-action='interrupt']").click()
        error = cells.nth(2).locator(".jp-OutputArea-output")
        expect(error).to_contain_text("KeyboardInterrupt", timeout=60_000)
        expect(row).to_have_attribute("data-status", "idle", timeout=30_000)

        # Start a session for an agent from the panel: its id is shown to copy.
        form = panel.locator(".jp-ExecSessions-new")
        form.locator("input[name='name']").fill("for-the-agent")
        form.locator("select[name='backend']").select_option("local")
        form.locator("button[type='submit']").click()
        created = panel.locator(".jp-ExecSessions-created")
        expect(created).to_be_visible(timeout=60_000)
        new_id = created.locator(".jp-ExecSessions-createdId").inner_text()
        listed = {s["id"]: s for s in agent("GET")}
        assert listed[new_id]["name"] == "for-the-agent"
        assert listed[new_id]["backend"] == "local"
        new_row = panel.locator(f".jp-ExecSessions-item[data-session-id='{new_id}']")
        expect(new_row).to_have_attribute("data-status", "idle", timeout=30_000)
        assert agent("POST", f"/{new_id}/execute", code="handed = 1")["status"] == "ok"
        page.screenshot(path=ARTIFACTS / "panel-4-started.png")

        # A name that is taken: the server's own message, in a dialog; nothing is started.
        form.locator("input[name='name']").fill("for-the-agent")
        form.locator("button[type='submit']").click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_contain_text("Cannot start a session", timeout=60_000)
        expect(dialog).to_contain_text("exists already")
        dialog.locator(".jp-Dialog-button").last.click()
        expect(dialog).to_have_count(0)
        assert [s["name"] for s in agent("GET")].count("for-the-agent") == 1

        # Restart from the panel (after a confirmation): the kernel's state is gone.
        new_row.locator("button[data-action='restart']").click()
        page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept").click()
        # The panel says so once the server's restart has returned.
        expect(page.get_by_text("Restarted the kernel of for-the-agent")).to_be_visible(
            timeout=60_000
        )
        forgot = agent("POST", f"/{new_id}/execute", code="handed")
        assert forgot["error"]["ename"] == "NameError", forgot

        # Forks and network approvals: shown where the server has them, absent otherwise.
        _check_forks_and_approvals(lab, agent, page, sid, expect)

        # Shut the agent's session down from the panel (after a confirmation).
        row.locator("button[data-action='shutdown']").click()
        page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept").click()
        expect(row).to_have_count(0, timeout=60_000)
        agent("GET", f"/{sid}", expect=404)
        assert new_id in {s["id"] for s in agent("GET")}
        page.screenshot(path=ARTIFACTS / "panel-6-shut-down.png")
    agent("DELETE", f"/{new_id}", expect=204)


def _check_forks_and_approvals(
    lab: JupyterProcess, agent: Agent, page: Any, sid: str, expect: Any
) -> None:
    """No pending approval: no approvals section. Forks: the button and the tree, if served.

    The fork and approval routes come with other work; until the server has them the panel
    must simply not offer them (a 404 is no error), and once it has them this checks the tree.
    """
    panel = page.locator("#jupyter-exec-sessions")
    row = panel.locator(f".jp-ExecSessions-item[data-session-id='{sid}']")
    approvals = requests.get(f"{lab.url}/api/exec/approvals", headers=lab.headers, timeout=30)
    assert approvals.status_code in (200, 404), approvals.text
    if approvals.status_code == 404 or not approvals.json():
        expect(panel.locator(".jp-ExecSessions-approvals")).to_be_hidden()
    model = agent("GET", f"/{sid}")
    if not {"forks", "parent", "parent_id"} & set(model):
        expect(row.locator("button[data-action='fork']")).to_be_hidden()
        return
    expect(row.locator("button[data-action='fork']")).to_be_visible()
    forked = requests.post(
        f"{lab.url}/api/exec/sessions/{sid}/fork", json={}, headers=lab.headers, timeout=300
    )
    assert forked.ok, forked.text

    def parent(s: dict[str, Any]) -> Any:
        ref = s.get("parent") or s.get("parent_id")
        return ref.get("id") if isinstance(ref, dict) else ref

    children = [s["id"] for s in agent("GET") if parent(s) == sid]
    assert children, agent("GET")
    child = panel.locator(f".jp-ExecSessions-item[data-session-id='{children[0]}']")
    expect(child).to_have_attribute("data-depth", "1", timeout=30_000)
    page.screenshot(path=ARTIFACTS / "panel-5-fork.png")
    for fork in children:
        agent("DELETE", f"/{fork}", expect=204)


def _wait_until(condition: Any, what: str, timeout: float = 60.0) -> None:
    """Wait for a state of the world (a file, an answer), checking every tenth of a second."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.1)


ASK = """
import urllib.request
try:
    urllib.request.urlopen("http://asked.test/", timeout=120)
    print("reached")
except Exception as exc:
    print("refused:", exc)
"""


@pytest.mark.docker
def test_person_denies_a_network_approval_from_the_panel(lab: JupyterProcess) -> None:
    """A Docker kernel whose policy asks: the request waits in the panel; Deny refuses it.

    Needs the approvals routes of the server (``GET /api/exec/approvals``); on a server
    without them the panel shows no approvals (checked in the test above) and this ends.
    """
    agent = Agent(lab)
    routes = requests.get(f"{lab.url}/api/exec/approvals", headers=lab.headers, timeout=30)
    if routes.status_code == 404:
        return
    sync_api = require_browser("the panel test")
    expect = sync_api.expect
    image = os.environ.get("JX_TEST_IMAGE", "jupyter-exec/kernel:latest")
    spec = json.loads((REPO / "kernels" / "python3-docker" / "kernel.json").read_text())
    spec["metadata"]["kernel_provisioner"]["config"]["image"] = image
    kernels = lab.workdir / "data" / "kernels" / "python3-docker"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps(spec))
    session = agent("POST", expect=201, name="net", backend="docker", network={"ask": True})
    sid = session["id"]
    with chromium_page(sync_api, "panel-failure-approval.png") as page:
        open_lab(page, lab)
        page.locator(".lm-TabBar-tab[data-id='jupyter-exec-sessions']").click()
        panel = page.locator("#jupyter-exec-sessions")
        row = panel.locator(f".jp-ExecSessions-item[data-session-id='{sid}']")
        expect(row).to_have_attribute("data-status", "idle", timeout=60_000)

        thread, answer = agent.in_background(f"/{sid}/execute", code=ASK)
        item = panel.locator(".jp-ExecSessions-approval")
        expect(item).to_have_count(1, timeout=120_000)
        expect(item.locator(".jp-ExecSessions-approvalText")).to_contain_text(
            "net, cell 1 asks for asked.test:80"
        )
        page.screenshot(path=ARTIFACTS / "panel-7-approval.png")
        close_up = {"x": 0, "y": 0, "width": 640, "height": 440}
        page.screenshot(path=ARTIFACTS / "panel-7-approval-close-up.png", clip=close_up)
        item.locator("button[data-action='deny']").click()
        thread.join(180)
        assert not thread.is_alive()
        assert answer[0]["stdout"].startswith("refused:"), answer[0]
        expect(item).to_have_count(0, timeout=30_000)
        assert (
            requests.get(f"{lab.url}/api/exec/approvals", headers=lab.headers, timeout=30).json()
            == []
        )
    agent("DELETE", f"/{sid}", expect=204)
