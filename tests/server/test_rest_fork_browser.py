"""A fork made over REST, opened by a person in a real JupyterLab (headless Chromium).

The agent sets a variable, forks the session and changes the variable in the fork only.
Opening the fork's notebook in JupyterLab attaches to the fork's own kernel: the notebook
shows the parent's cells and the fork's, and a cell typed in the browser sees the fork's
value, not the parent's. Screenshots go to ``artifacts/browser/``.
"""

from __future__ import annotations

import pytest
import requests
from lab_helpers import (
    ARTIFACTS,
    add_cell,
    chromium_page,
    notebook_widget,
    open_lab,
    require_browser,
    sessions_api,
)
from server_helpers import JupyterProcess

pytestmark = pytest.mark.browser


def test_a_fork_opens_in_jupyterlab_on_its_own_kernel(lab: JupyterProcess) -> None:
    sync_api = require_browser()
    expect = sync_api.expect
    call = sessions_api(lab)
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

    with chromium_page(sync_api, "fork-failure.png") as page:
        open_lab(page, lab, f"/tree/{notebook}")
        panel = notebook_widget(page, expect, label)
        cells = panel.locator(".jp-Notebook .jp-Cell")
        expect(cells).to_have_count(2)  # the parent's cell, then the fork's
        expect(panel.locator(".jp-KernelName")).to_contain_text("Python", timeout=30_000)
        indicator = panel.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
        expect(indicator).to_have_count(1, timeout=30_000)

        bound = requests.get(f"{lab.url}/api/sessions", headers=lab.headers, timeout=10)
        kernels = {s["path"]: s["kernel"]["id"] for s in bound.json()}
        assert kernels[notebook] == fork["kernel"]["id"] != parent["kernel"]["id"]

        add_cell(page, expect, cells, "print(value)\nperson = value.upper()", count=3)
        expect(cells.nth(2).locator(".jp-OutputArea-output")).to_have_text("fork", timeout=30_000)
        page.screenshot(path=ARTIFACTS / "3-fork-notebook.png")

    # One kernel per branch: the fork's has what the person ran there, the parent's does not.
    assert call("POST", f"/{fork['id']}/execute", code="person")["text"] == "'FORK'"
    assert call("POST", f"/{parent['id']}/execute", code="value")["text"] == "'parent'"
    status = call("POST", f"/{parent['id']}/execute", code="person")["error"]["ename"]
    assert status == "NameError"
