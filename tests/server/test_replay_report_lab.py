"""An HTML replay report opens in JupyterLab: the server serves it as a plain .html file."""

from __future__ import annotations

from pathlib import Path

import requests
from server_helpers import JupyterProcess

from jupyter_exec.notebook.htmlreport import render_html
from jupyter_exec.notebook.report import CellResult, ReplayReport


def test_jupyterlab_serves_the_html_report(lab: JupyterProcess) -> None:
    report = ReplayReport(
        notebook=Path("analysis.ipynb"),
        cells=(
            CellResult(
                index=0,
                cell_type="code",
                status="equivalent",
                source="SVG(...)",
                reasons=("SVG canonical form (attribute order, whitespace, comments)",),
                recorded=({"output_type": "stream", "name": "stdout", "text": "a<b"},),
                replayed=({"output_type": "stream", "name": "stdout", "text": "a<b"},),
            ),
        ),
        environment=("six 1.16.0 recorded, 1.17.0 here",),
    )
    page = render_html(report)
    (lab.root / "analysis.replay.html").write_text(page, encoding="utf-8")
    served = requests.get(f"{lab.url}/files/analysis.replay.html", headers=lab.headers, timeout=30)
    assert served.status_code == 200
    assert served.headers["Content-Type"].startswith("text/html")
    assert served.text == page
    opened = requests.get(
        f"{lab.url}/lab/tree/analysis.replay.html", headers=lab.headers, timeout=30
    )
    assert opened.status_code == 200  # the Lab page that opens it in its HTML viewer
    assert "a&lt;b" in served.text
