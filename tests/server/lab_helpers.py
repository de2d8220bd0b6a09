"""JupyterLab in a real browser, for the browser tests of the server extension.

One way to start ``jupyter lab`` for a test (settings of its own: no news toast, no update
check, no restored workspace, so nothing covers the page), to drive headless Debian Chromium
through Playwright (a screenshot under ``artifacts/browser/`` when a step fails), to find the
widget of a notebook's tab, and to type a cell as a person does. The browser needs
``/usr/bin/chromium`` and the ``playwright`` package (``scripts/provision-browser``): without
them a test is skipped, except in CI (``CI=true``), where it fails instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from server_helpers import JupyterProcess

CHROMIUM = os.environ.get("JUPYTER_EXEC_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).parents[2] / "artifacts" / "browser"
FLAGS = ["--disable-gpu", "--disable-quic", "--disable-dev-shm-usage"]


def require_browser(what: str = "browser test") -> Any:
    """Playwright's ``sync_api``; ``what`` names the test in the message when it is missing."""
    missing = []
    if not shutil.which(CHROMIUM):
        missing.append(f"{CHROMIUM} (run scripts/provision-browser)")
    try:
        from playwright import sync_api
    except ImportError:
        missing.append("the playwright package (pip install -e '.[test]')")
        sync_api = None
    if missing:
        message = f"{what} needs " + " and ".join(missing)
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return sync_api


def jupyter_lab(tmp_path: Path, *args: str) -> JupyterProcess:
    """``jupyter lab`` (to enter) with no news toast, no update check, no restored workspace."""
    settings = tmp_path / "lab" / "settings"
    notification = settings / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    return JupyterProcess(
        tmp_path / "lab",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
        f"--LabApp.workspaces_dir={tmp_path / 'lab' / 'workspaces'}",
        f"--LabApp.user_settings_dir={settings}",
        *args,
        app="lab",
    )


def sessions_api(lab: JupyterProcess) -> Callable[..., Any]:
    """``call(method, path="", **body)``: the JSON answer of ``/api/exec/sessions{path}``,
    which must succeed (the agent's side of a test, over REST)."""

    def call(method: str, path: str = "", **body: Any) -> Any:
        url = f"{lab.url}/api/exec/sessions{path}"
        response = requests.request(method, url, json=body, headers=lab.headers, timeout=120)
        assert response.ok, response.text
        return response.json()

    return call


@contextmanager
def chromium_page(
    sync_api: Any, failure: str, *, height: int = 900, log: Path | None = None
) -> Iterator[Any]:
    """A page of headless Chromium; if the block fails, a screenshot ``ARTIFACTS/failure``
    (and ``log``, the lab's, copied beside it as ``<failure stem>-lab.log``)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": height})
        try:
            yield page
        except Exception:
            page.screenshot(path=ARTIFACTS / failure)
            if log is not None:
                (ARTIFACTS / f"{Path(failure).stem}-lab.log").write_bytes(log.read_bytes())
            raise
        finally:
            browser.close()


def open_lab(page: Any, lab: JupyterProcess, path: str = "") -> None:
    """Go to ``/lab{path}`` (``/tree/<notebook>`` opens one) and wait for the splash to go."""
    page.goto(f"{lab.url}/lab{path}?token={lab.token}")
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)


def notebook_widget(page: Any, expect: Any, label: str) -> Any:
    """The widget of the main area's tab labelled ``label``, once that tab is the current one."""
    tab = page.locator(
        "#jp-main-dock-panel .lm-TabBar-tab",
        has=page.locator(".lm-TabBar-tabLabel", has_text=re.compile(f"^{re.escape(label)}$")),
    )
    expect(tab).to_have_class(re.compile(r"\blm-mod-current\b"), timeout=60_000)
    return page.locator(f"[id='{tab.get_attribute('data-id')}']")


def add_cell(
    page: Any, expect: Any, cells: Any, code: str, *, count: int, at_top: bool = False
) -> None:
    """As a person does: a new cell below the last (or above the first), ``code`` typed in it,
    run with Shift+Enter; ``count`` is how many cells the notebook must have once it is added."""
    (cells.first if at_top else cells.last).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Escape")
    page.keyboard.press("a" if at_top else "b")
    expect(cells).to_have_count(count)
    page.keyboard.press("Enter")
    page.keyboard.type(code)
    page.keyboard.press("Shift+Enter")
