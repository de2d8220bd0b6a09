"""A person joins the agent's session in a real JupyterLab (headless Debian Chromium, Playwright).

The agent creates a session over REST and runs a cell that sets a variable and one that plots.
The person opens the session's notebook in JupyterLab: it shows both cells and the plot, and is
attached to the agent's live kernel, so a cell typed in the browser prints the agent's variable
(and the agent then sees what the person defined). Screenshots go to ``artifacts/browser/``.
What the browser needs, and when it is skipped, is in lab_helpers.py.
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


def test_person_joins_the_agents_session_in_jupyterlab(lab: JupyterProcess) -> None:
    sync_api = require_browser()
    expect = sync_api.expect
    call = sessions_api(lab)
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

    with chromium_page(sync_api, "failure.png") as page:
        open_lab(page, lab, f"/tree/{notebook}")
        panel = notebook_widget(page, expect, notebook.rsplit("/", 1)[-1])
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
        add_cell(page, expect, cells, "print(agent_var)\nperson_var = agent_var + 1", count=3)
        output = cells.nth(2).locator(".jp-OutputArea-output")
        expect(output).to_have_text("42", timeout=30_000)
        expect(cells.nth(2).locator(".jp-InputPrompt")).to_contain_text("[3]")
        page.screenshot(path=ARTIFACTS / "2-person-cell.png")

    # And the agent sees what the person defined: one kernel, shared state.
    assert call("POST", run, code="person_var")["text"] == "43"
