"""A fork made over REST, opened by a person in a real JupyterLab (headless Chromium).

The agent sets a variable, forks the session and changes the variable in the fork only.
Opening the fork's notebook in JupyterLab attaches to the fork's own kernel: the notebook
shows the parent's cells and the fork's, and a cell typed in the browser sees the fork's
value, not the parent's. Screenshots go to ``artifacts/browser/``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests
from server_helpers import JupyterProcess
from test_browser import ARTIFACTS, CHROMIUM, FLAGS, _require_browser, lab

__all__ = ["lab"]  # the fixture, shared with test_browser

pytestmark = pytest.mark.browser


def test_a_fork_opens_in_jupyterlab_on_its_own_kernel(lab: JupyterProcess) -> None:
    sync_api = _require_browser()
    expect = sync_api.expect
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def call(method: str, path: str = "", **body: Any) -> Any:
        url = f"{lab.url}/api/exec/sessions{path}"
        response = requests.request(method, url, json=body, headers=lab.headers, timeout=120)
        assert response.ok, response.text
        return response.json()

    parent = call("POST", name="agent")
    assert call("POST", f"/{parent['id']}/execute", code="value = 'parent'")["status"] == "ok"
    fork = call("POST", f"/{parent['id']}/fork")[0]
    assert call("POST", f"/{fork['id']}/execute", code="value = 'fork'")["status"] == "ok"
    notebook = fork["notebook"]["path"]
    label = notebook.rsplit("/", 1)[-1]

    # The file browser's listing has the fork's notebook beside the parent's.
    listing = requests.get(
        f"{lab.url}/api/contents/{notebook.rsplit('/', 1)[0]}", headers=lab.headers, timeout=10
    ).json()
    assert {"agent.ipynb", label} <= {item["name"] for item in listing["content"]}

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(f"{lab.url}/lab/tree/{notebook}?token={lab.token}")
            page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
            tab = page.locator(
                "#jp-main-dock-panel .lm-TabBar-tab",
                has=page.locator(
                    ".lm-TabBar-tabLabel", has_text=re.compile(f"^{re.escape(label)}$")
                ),
            )
            expect(tab).to_have_class(re.compile(r"\blm-mod-current\b"), timeout=60_000)
            panel = page.locator(f"[id='{tab.get_attribute('data-id')}']")
            cells = panel.locator(".jp-Notebook .jp-Cell")
            expect(cells).to_have_count(2)  # the parent's cell, then the fork's
            expect(panel.locator(".jp-KernelName")).to_contain_text("Python", timeout=30_000)
            indicator = panel.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
            expect(indicator).to_have_count(1, timeout=30_000)

            bound = requests.get(f"{lab.url}/api/sessions", headers=lab.headers, timeout=10)
            kernels = {s["path"]: s["kernel"]["id"] for s in bound.json()}
            assert kernels[notebook] == fork["kernel"]["id"] != parent["kernel"]["id"]

            cells.last.locator(".jp-InputArea-editor").click()
            page.keyboard.press("Escape")
            page.keyboard.press("b")
            expect(cells).to_have_count(3)
            page.keyboard.press("Enter")
            page.keyboard.type("print(value)\nperson = value.upper()")
            page.keyboard.press("Shift+Enter")
            expect(cells.nth(2).locator(".jp-OutputArea-output")).to_have_text(
                "fork", timeout=30_000
            )
            page.screenshot(path=ARTIFACTS / "3-fork-notebook.png")
        except Exception:
            page.screenshot(path=ARTIFACTS / "fork-failure.png")
            raise
        finally:
            browser.close()

    # One kernel per branch: the fork's has what the person ran there, the parent's does not.
    assert call("POST", f"/{fork['id']}/execute", code="person")["text"] == "'FORK'"
    assert call("POST", f"/{parent['id']}/execute", code="value")["text"] == "'parent'"
    status = call("POST", f"/{parent['id']}/execute", code="person")["error"]["ename"]
    assert status == "NameError"
