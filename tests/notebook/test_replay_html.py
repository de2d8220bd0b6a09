"""The HTML replay report: cell by cell, side by side, image differences drawn, self-contained."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

from PIL import Image

from jupyter_exec import Session
from jupyter_exec.cli import main
from jupyter_exec.notebook.htmlreport import CSP


def _png(color: tuple[int, int, int]) -> str:
    buffer = io.BytesIO()
    image = Image.new("RGB", (16, 12), color)
    image.paste((255, 255, 255), (4, 4, 8, 8))
    image.save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_html_report_shows_cells_side_by_side_with_the_image_difference(tmp_path: Path) -> None:
    with Session(work_dir=tmp_path, name="pics") as session:
        session.execute(
            "from PIL import Image\nimg = Image.new('RGB', (16, 12), (10, 20, 30))\n"
            "img.paste((255, 255, 255), (4, 4, 8, 8))\nimg"
        )
        session.execute("print('kept')")
    path = tmp_path / "pics.ipynb"
    raw = json.loads(path.read_text())
    outputs = raw["cells"][0]["outputs"]
    (picture,) = [o for o in outputs if "image/png" in o.get("data", {})]
    picture["data"]["image/png"] = _png((200, 20, 30))  # the record showed another colour
    path.write_text(json.dumps(raw))
    assert main(["replay", str(path), "--html", "--quiet"]) == 1
    page = (tmp_path / "pics.replay.html").read_text()
    assert f'content="{CSP.replace(chr(39), "&#x27;")}"' in page
    assert "<h4>recorded</h4>" in page
    assert "<h4>replayed</h4>" in page
    assert 'Cell 1: <span class="different">DIFFERENT</span>' in page
    assert 'Cell 2: <span class="same">same</span>' in page
    assert "pixels that differ: output 1 image/png" in page
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    # Recorded and replayed (a PIL image shows as JPEG and PNG), then the difference drawn
    # for the PNG whose pixels changed (the JPEG was left as it was).
    assert len(images) == 5
    with Image.open(io.BytesIO(base64.b64decode(images[-1]))) as diff:
        rgb = diff.convert("RGB")
        assert rgb.getpixel((0, 0)) == (220, 0, 0)  # a changed pixel, marked
        assert rgb.getpixel((5, 5)) != (220, 0, 0)  # the white square did not change
    assert "http://" not in page
    assert "https://" not in page  # no external asset of any kind
