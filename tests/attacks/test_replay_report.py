"""Attacks on the HTML replay report: a notebook whose outputs carry script.

The attacker wrote the notebook (its recorded outputs, its source, its error names)
and its code runs in the replay (so the replayed outputs are theirs too). Whoever opens
the report in a browser or JupyterLab must run none of it: every value is shown as
escaped text, the only images are PNGs re-encoded here, and the page's CSP allows no
script at all. Checked structurally (the parsed page) and by its policy.
"""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import nbformat

from jupyter_exec.cli import main
from jupyter_exec.notebook.htmlreport import CSP

SCRIPT = "<script>document.title='pwned'</script>"
PAYLOADS = {
    "text/html": SCRIPT + '<img src=x onerror="alert(1)"><a href="javascript:alert(2)">x</a>'
    '<iframe src="https://evil.example/"></iframe><meta http-equiv="refresh" content="0;url=//e">',
    "image/svg+xml": '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(3)"><script>alert(4)'
    "</script></svg>",
    "application/javascript": "alert(5)",
    "text/plain": "</pre></section>" + SCRIPT,
    "text/markdown": "[x](javascript:alert(6))",
    # Not an image: a string that would close the attribute if pasted into src="...".
    "image/png": '"><script>alert(7)</script>',
    "image/jpeg": base64.b64encode(b'\xff\xd8"><script>alert(8)</script>').decode(),
}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str]] = []
        self.csp: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend((k, v or "") for k, v in attrs)
        found = dict(attrs)
        if tag == "meta" and found.get("http-equiv") == "Content-Security-Policy":
            self.csp.append(found.get("content") or "")


def _hostile_notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    replayed = "\n".join(
        [
            "from IPython.display import HTML, SVG, Javascript, display",
            f"display(HTML({PAYLOADS['text/html']!r}))",
            f"display({{'text/html': {SCRIPT!r}, 'text/plain': '</pre>' + {SCRIPT!r}}}, raw=True)",
            "print(" + repr("</pre><script>alert(9)</script>") + ")",
            f"raise ValueError({'<img src=x onerror=alert(10)>'!r})",
        ]
    )
    cell = nbformat.v4.new_code_cell(replayed + "\n# " + SCRIPT, execution_count=1)
    cell.outputs = [
        nbformat.v4.new_output("display_data", data=PAYLOADS),
        nbformat.v4.new_output("stream", name="stdout", text=SCRIPT),
        nbformat.v4.new_output(
            "error", ename="<img src=x onerror=alert(11)>", evalue=SCRIPT, traceback=[SCRIPT]
        ),
    ]
    nb.cells = [cell]
    nbformat.write(nb, path)


def test_recorded_and_replayed_outputs_with_script_cannot_run_in_the_html_report(
    tmp_path: Path,
) -> None:
    notebook = tmp_path / "hostile.ipynb"
    _hostile_notebook(notebook)
    report = tmp_path / "report.html"
    assert main(["replay", str(notebook), "--report", str(report), "--quiet"]) == 1
    page = report.read_text()
    parsed = _Page()
    parsed.feed(page)
    # Structure: only the report's own elements; no script, frame, object, svg, link, form.
    allowed = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "h5",
               "p", "strong", "em", "ul", "li", "table", "tr", "th", "td", "a", "code", "pre",
               "section", "span", "div", "img"}  # fmt: skip
    assert set(parsed.tags) <= allowed
    assert parsed.tags.count("meta") == 3  # charset, CSP, referrer: the refresh stayed text
    # No event handler, no javascript: URL, no external source; images are our PNGs only.
    assert not [k for k, _ in parsed.attrs if k.startswith("on")]
    assert not [v for _, v in parsed.attrs if "javascript:" in v.lower()]
    assert {v[: v.index(",")] for k, v in parsed.attrs if k == "src"} <= {"data:image/png;base64"}
    assert all(v.startswith("#cell-") for k, v in parsed.attrs if k == "href")
    # The payloads are there, as text a person can read.
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in page
    assert "not a decodable image" in page
    # And the policy would stop a script even if one slipped through.
    assert parsed.csp == [CSP]
    assert "default-src 'none'" in CSP
    assert "script-src" not in CSP
    assert "unsafe-inline" not in CSP
    assert json.dumps(page).count("<script") == 0


def test_hostile_outputs_run_nothing_in_a_browser_and_the_csp_alone_would_stop_a_script(
    tmp_path: Path,
) -> None:
    """The report in headless Chromium: no dialog, no title change, no script element. A
    copy with a script planted after the policy proves the policy alone blocks one, and a
    page without the policy proves the harness sees a script that runs (the test can fail)."""
    from lab_helpers import chromium_page, require_browser

    sync_api = require_browser("HTML report attack")
    notebook = tmp_path / "hostile.ipynb"
    _hostile_notebook(notebook)
    report = tmp_path / "report.html"
    assert main(["replay", str(notebook), "--report", str(report), "--quiet"]) == 1
    page_text = report.read_text()
    planted = tmp_path / "planted.html"
    planted.write_text(
        page_text.replace("<title>", "<script>document.title='pwned'</script><title>")
    )
    control = tmp_path / "control.html"
    control.write_text("<title>x</title><script>document.title='pwned';alert(1)</script>")
    dialogs: list[str] = []
    with chromium_page(sync_api, "replay-report-attack.png") as page:
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(control.as_uri())
        assert page.title() == "pwned"  # the harness sees a script that runs
        assert dialogs == ["1"]
        dialogs.clear()
        page.goto(report.as_uri())
        page.wait_for_load_state("load")
        assert page.title() == "Replay of hostile.ipynb"
        assert page.evaluate("document.scripts.length") == 0
        assert page.evaluate("document.querySelectorAll('iframe, object, embed, svg').length") == 0
        page.goto(planted.as_uri())
        page.wait_for_load_state("load")
        assert page.evaluate("document.scripts.length") == 1  # there, and blocked by the CSP
        assert page.title() == "Replay of hostile.ipynb"
    assert dialogs == []
