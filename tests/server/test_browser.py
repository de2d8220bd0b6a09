"""A person joins the agent's session in a real JupyterLab (headless Debian Chromium, Playwright).

The agent creates a session over REST and runs a cell that sets a variable and one that plots.
The person opens the session's notebook in JupyterLab: it shows both cells and the plot, and is
attached to the agent's live kernel, so a cell typed in the browser prints the agent's variable
(and the agent then sees what the person defined). Screenshots go to ``artifacts/browser/``.

Needs ``/usr/bin/chromium`` and the ``playwright`` package (``scripts/provision-browser``); it
is skipped without them, except in CI (``CI=true``), where it fails instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from server_helpers import JupyterProcess

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("JUPYTER_EXEC_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).parents[2] / "artifacts" / "browser"
FLAGS = ["--disable-gpu", "--disable-quic", "--disable-dev-shm-usage"]


def _require_browser() -> Any:
    missing = []
    if not shutil.which(CHROMIUM):
        missing.append(f"{CHROMIUM} (run scripts/provision-browser)")
    try:
        from playwright import sync_api
    except ImportError:
        missing.append("the playwright package (pip install -e '.[test]')")
        sync_api = None
    if missing:
        message = "browser test needs " + " and ".join(missing)
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return sync_api


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[JupyterProcess]:
    """``jupyter lab`` with no news toast, no update check and no restored workspace."""
    settings = tmp_path / "lab" / "settings"
    notification = settings / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    with JupyterProcess(
        tmp_path / "lab",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
        f"--LabApp.workspaces_dir={tmp_path / 'lab' / 'workspaces'}",
        f"--LabApp.user_settings_dir={settings}",
        app="lab",
    ) as server:
        yield server


def test_person_joins_the_agents_session_in_jupyterlab(lab: JupyterProcess) -> None:
    sync_api = _require_browser()
    expect = sync_api.expect
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def call(method: str, path: str = "", **body: Any) -> Any:
        url = f"{lab.url}/api/exec/sessions{path}"
        response = requests.request(method, url, json=body, headers=lab.headers, timeout=120)
        assert response.ok, response.text
        return response.json()

    session = call("POST", name="agent")
    run = f"/{session['id']}/execute"
    assert call("POST", run, code="agent_var = 42")["status"] == "ok"
    plot = (
        "%matplotlib inline\nimport matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [agent_var, 0, agent_var])\nplt.title('agent plot')\nplt.show()"
    )
    plotted = call("POST", run, code=plot)
    assert plotted["status"] == "ok", plotted
    assert plotted["results"][0]["files"]["image/png"]["url"].endswith(".png")
    notebook = session["notebook"]["path"]
    label = notebook.rsplit("/", 1)[-1]

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
            expect(cells).to_have_count(2)
            image = panel.locator(".jp-OutputArea-output.jp-RenderedImage img")
            expect(image).to_be_visible()
            assert image.evaluate("e => e.naturalWidth") > 100
            # Attached: the toolbar names the kernel (not "No Kernel") and it is idle.
            expect(panel.locator(".jp-KernelName")).to_contain_text("Python", timeout=30_000)
            indicator = panel.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
            expect(indicator).to_have_count(1, timeout=30_000)
            page.screenshot(path=ARTIFACTS / "1-agent-notebook.png")

            # The notebook is attached to the agent's kernel, not a new one.
            bound = requests.get(f"{lab.url}/api/sessions", headers=lab.headers, timeout=10)
            kernels = {s["path"]: s["kernel"]["id"] for s in bound.json()}
            assert kernels[notebook] == session["kernel"]["id"]

            # The person adds a cell below the plot and runs it.
            cells.last.locator(".jp-InputArea-editor").click()
            page.keyboard.press("Escape")
            page.keyboard.press("b")
            expect(cells).to_have_count(3)
            page.keyboard.press("Enter")
            page.keyboard.type("print(agent_var)\nperson_var = agent_var + 1")
            page.keyboard.press("Shift+Enter")
            output = cells.nth(2).locator(".jp-OutputArea-output")
            expect(output).to_have_text("42", timeout=30_000)
            expect(cells.nth(2).locator(".jp-InputPrompt")).to_contain_text("[3]")
            page.screenshot(path=ARTIFACTS / "2-person-cell.png")
        except Exception:
            page.screenshot(path=ARTIFACTS / "failure.png")
            raise
        finally:
            browser.close()

    # And the agent sees what the person defined: one kernel, shared state.
    assert call("POST", run, code="person_var")["text"] == "43"
