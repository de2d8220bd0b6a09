"""A person hands the kernel of their open notebook to an agent from the sessions panel.

Real JupyterLab, real Chromium (Playwright): the person runs ``x = 41`` in their notebook,
picks that notebook's kernel under "Running kernel" in the panel's form, and the session
appears; the agent, over REST, runs ``x + 1`` on it and gets 42. Shutting the session down
leaves the person's kernel running. Screenshots: ``artifacts/browser/attach-*.png``.
"""

from __future__ import annotations

import re

import nbformat
import requests
from lab_helpers import ARTIFACTS, CHROMIUM, FLAGS, require_browser
from server_helpers import JupyterProcess
from test_lab_panel import Agent, _wait_until


def _kernel_of(server: JupyterProcess, path: str) -> str | None:
    listed = requests.get(f"{server.url}/api/sessions", headers=server.headers, timeout=30)
    return next((s["kernel"]["id"] for s in listed.json() if s["path"] == path), None)


def _connected(server: JupyterProcess, path: str) -> bool:
    """The notebook's kernel is idle and the page holds a websocket to it."""
    kernel_id = _kernel_of(server, path)
    if kernel_id is None:
        return False
    url = f"{server.url}/api/kernels/{kernel_id}"
    kernel = requests.get(url, headers=server.headers, timeout=30).json()
    return bool(kernel["connections"] >= 1 and kernel["execution_state"] == "idle")


def _kernels(server: JupyterProcess) -> list[str]:
    listed = requests.get(f"{server.url}/api/kernels", headers=server.headers, timeout=30)
    return [k["id"] for k in listed.json()]


def test_person_hands_their_running_kernel_to_an_agent(lab: JupyterProcess) -> None:
    sync_api = require_browser("the attach test")
    expect = sync_api.expect
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    agent = Agent(lab)
    mine = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")])
    mine.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": ""}
    nbformat.write(mine, lab.root / "mine.ipynb")

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(f"{lab.url}/lab/tree/mine.ipynb?token={lab.token}")
            page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
            notebook = page.locator(".jp-NotebookPanel").first
            idle = notebook.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
            expect(idle).to_have_count(1, timeout=60_000)
            # Connected to its kernel, so a cell run now is not lost.
            expect(notebook.locator(".jp-KernelName")).to_contain_text("Python", timeout=60_000)
            _wait_until(lambda: _connected(lab, "mine.ipynb"), "the notebook's kernel connection")

            # The person runs a cell in their own notebook.
            cell = notebook.locator(".jp-Notebook .jp-Cell").first
            cell.locator(".jp-InputArea-editor").click()
            page.keyboard.type("x = 41")
            page.keyboard.press("Shift+Enter")
            expect(cell.locator(".jp-InputPrompt")).to_have_text(
                re.compile(r"\[1\]"), timeout=60_000
            )
            kernel_id = _kernel_of(lab, "mine.ipynb")
            assert kernel_id is not None

            # In the panel, "Running kernel" offers that notebook's kernel, by its path.
            page.locator(".lm-TabBar-tab[data-id='jupyter-exec-sessions']").click()
            panel = page.locator("#jupyter-exec-sessions")
            expect(panel).to_be_visible(timeout=30_000)
            form = panel.locator(".jp-ExecSessions-new")
            choice = form.locator("select[name='backend']")
            choice.focus()  # the running kernels are looked up as the person is about to choose
            option = choice.locator(f"option[value='kernel:{kernel_id}']")
            expect(option).to_have_text(re.compile(r"^mine\.ipynb \(python3\)$"), timeout=30_000)
            choice.select_option(f"kernel:{kernel_id}")
            form.locator("input[name='name']").fill("helper")
            page.screenshot(path=ARTIFACTS / "attach-1-pick-kernel.png")
            form.locator("button[type='submit']").click()

            created = panel.locator(".jp-ExecSessions-created")
            expect(created).to_contain_text("Attached helper", timeout=60_000)
            sid = created.locator(".jp-ExecSessions-createdId").inner_text()
            row = panel.locator(f".jp-ExecSessions-item[data-session-id='{sid}']")
            expect(row).to_have_attribute("data-status", "idle", timeout=30_000)
            model = agent("GET", f"/{sid}")
            assert (model["kernel"]["id"], model["owns_kernel"]) == (kernel_id, False)

            # The agent works on the person's kernel: it sees what the person defined.
            out = agent("POST", f"/{sid}/execute", code="x + 1")
            assert (out["status"], out["text"]) == ("ok", "42"), out
            meta = row.locator(".jp-ExecSessions-meta")
            expect(meta).to_contain_text("local, attached · 1 cell", timeout=30_000)
            page.screenshot(path=ARTIFACTS / "attach-2-attached.png")

            # The kernel is no longer offered: one session per kernel.
            choice.blur()
            choice.focus()
            expect(option).to_have_count(0, timeout=30_000)

            # Shut the session down from the panel: the person's kernel keeps running.
            row.locator("button[data-action='shutdown']").click()
            dialog = page.locator(".jp-Dialog")
            expect(dialog).to_contain_text("keeps running")
            dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
            expect(row).to_have_count(0, timeout=60_000)
            assert kernel_id in _kernels(lab)
            assert _kernel_of(lab, "mine.ipynb") == kernel_id
            expect(idle).to_have_count(1, timeout=30_000)
            page.screenshot(path=ARTIFACTS / "attach-3-shut-down.png")
        except Exception:
            page.screenshot(path=ARTIFACTS / "attach-failure.png")
            raise
        finally:
            browser.close()
    agent_notebook = nbformat.read(lab.root / model["notebook"]["path"], as_version=4)
    assert [c.source for c in agent_notebook.cells] == ["x + 1"]  # not the person's cell
