"""The replay report a person reads: one self-contained HTML file, cell by cell, side by side.

A recorded output is attacker-controlled (anyone could have written the
notebook), so the page shows every recorded and replayed value as *text*:

* everything is escaped with :func:`html.escape` (quotes too), HTML and SVG
  outputs included: their source is shown, never rendered;
* the only images are PNG/JPEG/GIF payloads that were decoded and re-encoded
  as base64 here (nothing of the original string reaches an attribute), and
  the difference image this module draws itself;
* a Content-Security-Policy ``<meta>`` allows no script, no connection, no
  frame, no form and no external resource at all: ``default-src 'none'``,
  images only from ``data:``, and only the page's own style block (by hash).

It opens in any browser and in JupyterLab (its HTML viewer), with no assets
beside it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import html
import io
from collections.abc import Iterable, Mapping
from typing import Any

from jupyter_exec.engine.mime import IMAGES
from jupyter_exec.notebook.report import _SHOWN, CellResult, ReplayReport

__all__ = ["CSP", "render_html"]

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
pre{background:#f6f6f6;padding:.5em;overflow:auto;white-space:pre-wrap;max-height:30em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}
.side{display:grid;grid-template-columns:1fr 1fr;gap:1em}
.same,.equivalent,.not_run,.skipped{color:#2a7}.different,.error_now,.error_before{color:#c22}
.nondeterministic{color:#b70}section{border-top:1px solid #ddd;margin-top:1em}
img{max-width:100%;border:1px solid #ccc}
"""
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
CSP = (
    "default-src 'none'; img-src data:; "
    f"style-src 'sha256-{_STYLE_HASH}'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'"
)
"""The page's policy: no script of any kind can run, whatever the outputs hold."""

_IMAGE_FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF"}
MAX_TEXT_CHARS = 20_000


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return str(value)


def _pre(text: str) -> str:
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + f"\n... ({len(text) - MAX_TEXT_CHARS:,} more characters)"
    return f"<pre>{_e(text)}</pre>"


def _decoded(value: Any) -> bytes | None:
    try:
        return base64.b64decode(_text(value), validate=False)
    except (binascii.Error, ValueError):
        return None


def _image(data: bytes, mime: str) -> str:
    """An <img> of ``data`` re-encoded by Pillow (or its checked bytes), or a note."""
    try:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as image:
            image.load()
            buffer = io.BytesIO()
            image.convert("RGBA").save(buffer, "PNG")
        payload, shown = buffer.getvalue(), "image/png"
    except Exception:  # Pillow missing or the data is no image: show no image
        return f"<p><em>{_e(mime)}: not a decodable image ({len(data):,} bytes)</em></p>"
    return f'<img alt="{_e(mime)}" src="data:{shown};base64,{base64.b64encode(payload).decode()}">'


def _outputs(outputs: Iterable[Mapping[str, Any]]) -> str:
    parts: list[str] = []
    for output in outputs:
        kind = str(output.get("output_type", ""))
        if kind == "stream":
            parts.append(f"<h5>{_e(output.get('name', 'stream'))}</h5>")
            parts.append(_pre(_text(output.get("text", ""))))
        elif kind == "error":
            parts.append("<h5>error</h5>")
            parts.append(_pre(f"{output.get('ename', '')}: {output.get('evalue', '')}"))
        elif kind in ("execute_result", "display_data"):
            for mime, value in sorted((output.get("data") or {}).items()):
                parts.append(f"<h5>{_e(mime)}</h5>")
                if mime in _IMAGE_FORMATS and mime in IMAGES:
                    data = _decoded(value)
                    parts.append(_image(data, mime) if data else _pre("(undecodable)"))
                else:  # HTML, SVG, JSON, JavaScript ...: their source, as text
                    parts.append(_pre(_text(value)))
    return "".join(parts) or "<p><em>no outputs</em></p>"


def _difference_images(cell: CellResult) -> str:
    """For each image both sides show under the same label: the pixels that differ, in red."""
    try:
        from PIL import Image, ImageChops
    except ImportError:
        return ""
    shown: list[str] = []
    before = _images(cell.recorded)
    for key, after_bytes in _images(cell.replayed).items():
        before_bytes = before.get(key)
        if before_bytes is None or before_bytes == after_bytes:
            continue
        try:
            with (
                Image.open(io.BytesIO(before_bytes)) as a_file,
                Image.open(io.BytesIO(after_bytes)) as b_file,
            ):
                a, b = a_file.convert("RGB"), b_file.convert("RGB")
        except Exception:  # undecodable: nothing to draw
            continue
        if a.size != b.size:
            continue
        mask = ImageChops.difference(a, b).convert("L").point(lambda v: 255 if v else 0)
        if not mask.getbbox():
            continue
        marked = Image.blend(a, Image.new("RGB", a.size, (255, 255, 255)), 0.6)
        marked.paste(Image.new("RGB", a.size, (220, 0, 0)), mask=mask)
        shown.append(f"<h5>pixels that differ: output {key[0]} {_e(key[1])}</h5>")
        shown.append(_image(_png(marked), "image/png"))
    return "".join(shown)


def _png(image: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def _images(outputs: Iterable[Mapping[str, Any]]) -> dict[tuple[int, str], bytes]:
    found: dict[tuple[int, str], bytes] = {}
    number = 0
    for output in outputs:
        if output.get("output_type") not in ("execute_result", "display_data"):
            continue
        number += 1
        for mime, value in (output.get("data") or {}).items():
            if mime in _IMAGE_FORMATS and (data := _decoded(value)):
                found[(number, mime)] = data
    return found


def _cell(cell: CellResult) -> str:
    status = cell.status
    parts = [
        f'<section id="cell-{cell.number}"><h3>Cell {cell.number}: '
        f'<span class="{_e(status)}">{_e(_SHOWN[status])}</span></h3>',
        _pre(cell.source),
    ]
    facts = [*(f"equivalent: {r}" for r in cell.reasons), *cell.notes]
    if cell.error_before:
        facts.append(f"error in the record: {cell.error_before}")
    if cell.error_now:
        facts.append(f"error now: {cell.error_now}")
    if cell.masks:
        facts.append(f"masks applied: {', '.join(cell.masks)}")
    facts.extend(f"mask {m.describe()}" for m in cell.masked)
    if facts:
        parts.append("<ul>" + "".join(f"<li>{_e(f)}</li>" for f in facts) + "</ul>")
    if cell.cell_type == "code" and status != "skipped":
        parts.append(
            '<div class="side"><div><h4>recorded</h4>'
            + _outputs(cell.recorded)
            + "</div><div><h4>replayed</h4>"
            + _outputs(cell.replayed)
            + "</div></div>"
        )
        parts.append(_difference_images(cell))
    if cell.diff:
        parts.append("<h4>text difference</h4>" + _pre(cell.diff))
    parts.append("</section>")
    return "".join(parts)


def render_html(report: ReplayReport) -> str:
    """The whole report as one HTML page (see the module docstring for what it refuses)."""
    rows = "".join(
        f'<tr><td><a href="#cell-{c.number}">{c.number}</a></td>'
        f'<td class="{_e(c.status)}">{_e(_SHOWN[c.status])}</td>'
        f"<td><code>{_e(next((ln for ln in c.source.splitlines() if ln.strip()), '')[:120])}"
        "</code></td></tr>"
        for c in report.cells
    )
    environment = (
        "<ul>" + "".join(f"<li>{_e(line)}</li>" for line in report.environment) + "</ul>"
        if report.environment
        else "<p>as recorded (or the record names no environment)</p>"
    )
    warnings = "".join(f"<li>{_e(w)}</li>" for w in report.warnings)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(CSP)}">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>Replay of {_e(report.notebook.name)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>Replay of {_e(report.notebook.name)}</h1>"
        f"<p><strong>{_e(report.summary())}</strong></p>"
        f"<h2>Environment differences</h2>{environment}"
        + (f"<h2>Warnings</h2><ul>{warnings}</ul>" if warnings else "")
        + f"<h2>Cells</h2><table><tr><th>cell</th><th>verdict</th><th>first line</th></tr>{rows}"
        "</table>"
        + "".join(_cell(c) for c in report.cells if c.cell_type == "code")
        + "</body></html>\n"
    )
