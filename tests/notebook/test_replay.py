"""Replay: comparison rules without a kernel, then whole notebooks replayed on real kernels.

The kernel tests share their work: each module-scoped fixture records or
writes one notebook and replays it once, and several tests read that one
report. ``mixed`` is a jupyter-exec recording with a non-deterministic cell,
errors on either side and volatile outputs; ``foreign`` is a notebook in the
exact JSON layout JupyterLab / papermill save, replayed through the CLI.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from PIL import Image

from jupyter_exec import Execution, NotebookError, Session
from jupyter_exec.cli import main
from jupyter_exec.models import CellError
from jupyter_exec.notebook.compare import (
    DEFAULT_RULES,
    ImageTolerance,
    compare_images,
    compare_outputs,
    normalize,
    parse_rule,
)
from jupyter_exec.notebook.judge import _judge
from jupyter_exec.notebook.replay import (
    CellResult,
    ReplayReport,
    replay,
    replay_async,
)

DATA = Path(__file__).parents[1] / "data"


def run_cli(*argv: str) -> int:
    return main(["replay", *argv])


def png(color: str, size: tuple[int, int] = (8, 6), **save: Any) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG", **save)
    return base64.b64encode(buf.getvalue()).decode()


def jpeg(color: str, size: tuple[int, int] = (8, 6)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "JPEG")
    return base64.b64encode(buf.getvalue()).decode()


def stream(text: str, name: str = "stdout") -> dict[str, Any]:
    return {"output_type": "stream", "name": name, "text": text}


def result(data: dict[str, Any], kind: str = "execute_result") -> dict[str, Any]:
    out: dict[str, Any] = {"output_type": kind, "data": data, "metadata": {}}
    if kind == "execute_result":
        out["execution_count"] = 1
    return out


# -- comparison, no kernel ------------------------------------------------------------------


def test_streams_split_or_merged_and_line_lists_compare_equal() -> None:
    recorded = [stream(["line 1\n"]), stream("line 2\n"), stream(["oops\n"], "stderr")]
    replayed = [stream("line 1\nline 2\n"), stream("oops\n", "stderr")]
    assert compare_outputs(recorded, replayed).same


def test_carriage_returns_are_applied_before_comparing() -> None:
    raw = stream("  0%|          | 0/2\r100%|##########| 2/2\n")
    assert compare_outputs([raw], [stream("100%|##########| 2/2\n")]).same


def test_execute_result_and_display_data_with_same_data_are_same() -> None:
    data = {"text/plain": "42"}
    assert compare_outputs([result(data)], [result(data, "display_data")]).same


def test_text_difference_gives_a_short_unified_diff() -> None:
    comparison = compare_outputs([stream("a\nb\nc\n")], [stream("a\nB\nc\n")])
    assert not comparison.same
    assert comparison.diff.splitlines()[:2] == ["--- recorded", "+++ replayed"]
    assert "-b" in comparison.diff.splitlines()
    assert "+B" in comparison.diff.splitlines()


def test_long_diffs_are_cut() -> None:
    before = [stream("".join(f"{i}\n" for i in range(500)))]
    after = [stream("".join(f"{i}!\n" for i in range(500)))]
    diff = compare_outputs(before, after).diff
    assert len(diff.splitlines()) <= 41
    assert "more diff lines" in diff


def test_errors_compare_name_and_value_not_traceback() -> None:
    def error(tb: str, evalue: str = "division by zero") -> dict[str, Any]:
        return {
            "output_type": "error",
            "ename": "ZeroDivisionError",
            "evalue": evalue,
            "traceback": [f"\x1b[0;31m{tb}\x1b[0m"],
        }

    assert compare_outputs([error("Cell In[7], line 1")], [error("Cell In[2], line 1")]).same
    assert not compare_outputs([error("x")], [error("x", "other")]).same


def test_html_whitespace_and_json_key_order_are_not_differences() -> None:
    html = "<table>\n  <tr><td>1</td></tr>\n</table>"
    assert compare_outputs(
        [result({"text/html": html})],
        [result({"text/html": "<table><tr>  <td>1</td></tr></table>\n"})],
    ).same
    assert compare_outputs(
        [result({"application/json": {"b": 1, "a": [1, 2]}})],
        [result({"application/json": {"a": [1, 2], "b": 1}})],
    ).same
    assert not compare_outputs(
        [result({"application/json": {"a": 1}})], [result({"application/json": {"a": 2}})]
    ).same


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("<__main__.Foo object at 0x7f3a2c1d0e80>", "<__main__.Foo object at 0x7f11aa0b2d10>"),
        ("Wall time: 1.23 s", "Wall time: 15.7 ms"),
        (
            "CPU times: user 3 µs, sys: 0 ns, total: 3 µs",
            "CPU times: user 2 µs, sys: 1 ns, total: 3 µs",
        ),
        ("50/50 [00:01<00:00, 41.3it/s]", "50/50 [00:02<00:00, 22.90it/s]"),
        (
            "2.1 µs ± 41 ns per loop (mean ± std. dev. of 7 runs, 100,000 loops each)",
            "1.9 µs ± 9 ns per loop (mean ± std. dev. of 7 runs, 1,000,000 loops each)",
        ),
        ("at 2024-05-01 12:03:44.123456", "at 2026-11-21T05:44:54+00:00"),
        ("Mon May  1 12:03:44 2024", "Mon May  1 09:00:01 2024"),
        ("datetime.datetime(2024, 5, 1, 12, 3)", "datetime.datetime(2025, 1, 2, 0, 0, 9)"),
        ("id 3f2b9c1e-0c4e-4d3b-9a37-1f0e2d9c9d1a", "id 0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"),
        ("/tmp/ipykernel_4711/3391.py:2: UserWarning", "/tmp/ipykernel_99/12.py:2: UserWarning"),
        ("/tmp/tmpk2j4_x9q/data.csv", "/tmp/tmpa8d0zz1m/data.csv"),
    ],
)
def test_default_rules_remove_volatile_text(before: str, after: str) -> None:
    assert normalize(before, DEFAULT_RULES) == normalize(after, DEFAULT_RULES)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("0.5147975062243892", "0.46419219795110467"),
        ("0xff", "0xfe"),  # small hex numbers are values, not addresses
        ("md5 9e107d9d372bb6826bd81d3542a419d6", "md5 e4d909c290d0fb1ca068ffaddf22cbd0"),
        ("took 3 steps", "took 4 steps"),
    ],
)
def test_default_rules_keep_real_values(before: str, after: str) -> None:
    assert normalize(before, DEFAULT_RULES) != normalize(after, DEFAULT_RULES)


def test_every_default_rule_is_documented_with_an_example() -> None:
    names = [rule.name for rule in DEFAULT_RULES]
    assert len(names) == len(set(names))
    assert all(rule.example for rule in DEFAULT_RULES)


def test_user_rules() -> None:
    seed = parse_rule(r"seed=\d+")
    assert normalize("seed=12 ok", [seed]) == "<normalized> ok"
    renamed = parse_rule(r"run (\d+)=>run #")
    assert normalize("run 7 done", [renamed]) == "run # done"
    with pytest.raises(ValueError, match="invalid normalisation regex"):
        parse_rule("(unclosed")
    comparison = compare_outputs([stream("seed=1\n")], [stream("seed=2\n")], [seed])
    assert comparison.same


def test_images_compare_by_pixels_not_bytes() -> None:
    fast, small = png("red", compress_level=0), png("red", compress_level=9)
    assert fast != small
    assert compare_outputs(
        [result({"image/png": fast})], [result({"image/png": small}, "display_data")]
    ).same


def test_image_differences_and_tolerance() -> None:
    base = Image.new("RGB", (10, 10), "white")
    changed = base.copy()
    changed.putpixel((0, 0), (250, 255, 255))  # one pixel, off by 5

    def encode(image: Image.Image) -> bytes:
        buf = io.BytesIO()
        image.save(buf, "PNG")
        return buf.getvalue()

    a, b = encode(base), encode(changed)
    why = compare_images(a, b, ImageTolerance())
    assert why is not None
    assert "1 of 100 pixels differ" in why
    assert compare_images(a, b, ImageTolerance(fraction=0.01)) is None
    assert compare_images(a, b, ImageTolerance(pixel_threshold=5)) is None
    assert compare_images(a, b, ImageTolerance(pixel_threshold=4)) is not None
    big = encode(Image.new("RGB", (12, 10), "white"))
    assert compare_images(a, big, ImageTolerance(fraction=1.0)) == "image size 10x10 -> 12x10"
    comparison = compare_outputs(
        [result({"image/png": base64.b64encode(a).decode()})],
        [result({"image/png": base64.b64encode(b).decode()})],
    )
    assert not comparison.same
    assert comparison.notes[0].startswith("[output 1: image/png] 1 of 100 pixels differ")
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        ImageTolerance(fraction=2)


def test_without_pillow_images_compare_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    a = base64.b64decode(png("red", compress_level=0))
    b = base64.b64decode(png("red", compress_level=9))
    monkeypatch.setitem(sys.modules, "PIL", None)
    assert compare_images(a, a, ImageTolerance()) is None
    assert "install Pillow" in (compare_images(a, b, ImageTolerance()) or "")


def _execution(outputs: list[dict[str, Any]], error: CellError | None = None) -> Execution:
    return Execution(
        code="",
        status="error" if error else "ok",
        error=error,
        execution_count=3,
        outputs=tuple(outputs),
    )


def test_verdicts_for_errors_on_either_side() -> None:
    boom = {"output_type": "error", "ename": "ValueError", "evalue": "boom", "traceback": []}
    cell = {"cell_type": "code", "source": "f()", "outputs": [boom], "execution_count": 2}
    tol, rules = ImageTolerance(), DEFAULT_RULES
    same = _judge(0, cell, _execution([boom], CellError("ValueError", "boom")), rules, tol)
    assert (same.status, same.error_before, same.error_now) == (
        "same",
        "ValueError: boom",
        "ValueError: boom",
    )
    assert _judge(0, cell, _execution([]), rules, tol).status == "error_before"
    fine = {**cell, "outputs": []}
    now = _judge(0, fine, _execution([boom], CellError("ValueError", "boom")), rules, tol)
    assert now.status == "error_now"
    assert "-[error]" not in now.diff
    assert "+[error]" in now.diff


def test_papermill_and_unrun_cells_get_notes() -> None:
    pending = {
        "cell_type": "code",
        "source": "x",
        "outputs": [],
        "execution_count": None,
        "metadata": {"papermill": {"status": "pending"}, "tags": ["injected-parameters"]},
    }
    verdict = _judge(4, pending, _execution([stream("1\n")]), DEFAULT_RULES, ImageTolerance())
    assert verdict.status == "not_run"  # no outputs in the record: nothing to compare with
    assert verdict.ok
    assert verdict.number == 5
    assert any("not run in the record" in n for n in verdict.notes)
    assert any("injected parameters" in n for n in verdict.notes)


# -- notebooks that cannot be replayed: no kernel starts --------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no notebook at"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a notebook"),
        ('{"cells": []}', "not a notebook"),
        ((DATA / "nbformat2.ipynb").read_text(), "nbformat 2"),
        ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"x": 1}]}', "valid"),
    ],
)
def test_unreadable_notebooks_raise_notebook_error(
    tmp_path: Path, content: str | None, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.ipynb"
    if content is not None:
        path.write_text(content)
    with pytest.raises(NotebookError, match=message):
        replay(path)
    assert run_cli(str(path), "-q") == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "bad.replayed.ipynb").exists()


def test_the_original_is_never_the_output(tmp_path: Path) -> None:
    path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), path)
    with pytest.raises(NotebookError, match="overwrite the original"):
        replay(path, output=path)


def test_cli_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), path)
    assert run_cli(str(path), "--report", "r.txt") == 2
    assert run_cli(str(path), "--normalize", "(bad") == 2
    assert run_cli(str(path), "--image-tolerance", "3") == 2
    assert run_cli(str(path), "--rtol", "-1") == 2
    assert run_cli() == 2
    err = capsys.readouterr().err
    assert ".json, .md or .html" in err
    assert "invalid normalisation regex" in err
    assert "within 0..1" in err
    with pytest.raises(SystemExit):
        run_cli(str(path), "--until", "-1")


def test_help_and_rule_listing(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_cli("--help")
    out = capsys.readouterr().out
    assert "examples:" in out
    assert "exit status" in out
    assert run_cli("--list-rules") == 0
    out = capsys.readouterr().out
    assert all(rule.name in out for rule in DEFAULT_RULES)


# -- a jupyter-exec recording, replayed (real kernels) -----------------------------------------

MIXED_CELLS = [
    'import random\nx = 6 * 7\nprint("x =", x)',  # 0 same
    "x + 1",  # 1 same
    "random.random()",  # 2 different: unseeded
    "1 / 0",  # 3 an error both times: same
    'open("input.txt").read()',  # 4 the file is gone at replay: error now
    'open("later.txt").read()',  # 5 the file appears before replay: error before
    "import matplotlib.pyplot as plt\n"  # 6 a plot, PNG re-encoded in the record: same
    "fig, ax = plt.subplots(figsize=(2, 1.5))\n"
    "ax.plot([1, 3, 2])\n"
    "plt.show()",
    "object()",  # 7 a memory address: same
    "%time sum(range(10))",  # 8 timings: same
    "import datetime, uuid\nprint(datetime.datetime.now(), uuid.uuid4())",  # 9 same
    "print(x * 2)",  # 10 same
]


@dataclass
class Replayed:
    path: Path
    report: ReplayReport
    progress: str
    original: bytes
    recorded_png: str


def _png_of(path: Path, index: int) -> str:
    cell = json.loads(path.read_text())["cells"][index]
    return "".join(next(o["data"]["image/png"] for o in cell["outputs"] if "data" in o))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    root = tmp_path_factory.mktemp("mixed")
    (root / "input.txt").write_text("hello")
    with Session(work_dir=root, name="mixed", timeout=60) as session:
        for code in MIXED_CELLS:
            session.execute(code)
    path = root / "mixed.ipynb"
    # Re-encode the plot: other bytes, the same pixels.
    raw = json.loads(path.read_text())
    for output in raw["cells"][6]["outputs"]:
        if "image/png" in output.get("data", {}):
            image = Image.open(io.BytesIO(base64.b64decode("".join(output["data"]["image/png"]))))
            buf = io.BytesIO()
            image.save(buf, "PNG", compress_level=0)
            output["data"]["image/png"] = base64.b64encode(buf.getvalue()).decode()
    path.write_text(json.dumps(raw, indent=1))
    (root / "input.txt").unlink()
    (root / "later.txt").write_text("now here")
    original = path.read_bytes()
    progress = io.StringIO()
    report = replay(path, progress=progress, timeout=60)
    return Replayed(path, report, progress.getvalue(), original, _png_of(path, 6))


def test_nondeterministic_cell_differs_there_and_nowhere_else(mixed: Replayed) -> None:
    statuses = {c.index: c.status for c in mixed.report.cells}
    assert statuses == {
        **dict.fromkeys(range(len(MIXED_CELLS)), "same"),
        2: "different",
        4: "error_now",
        5: "error_before",
    }
    random_cell = mixed.report.cells[2]
    assert [ln[0] for ln in random_cell.diff.splitlines()[3:]] == [" ", "-", "+"]
    assert not mixed.report.reproduced
    assert [c.number for c in mixed.report.problems] == [3, 5, 6]


def test_error_cells(mixed: Replayed) -> None:
    both, now, before = (mixed.report.cells[i] for i in (3, 4, 5))
    assert both.error_before == both.error_now == "ZeroDivisionError: division by zero"
    assert now.error_before is None
    assert (now.error_now or "").startswith("FileNotFoundError")
    assert (before.error_before or "").startswith("FileNotFoundError")
    assert before.error_now is None
    assert "'now here'" in before.diff


def test_plot_with_same_pixels_but_other_bytes_is_same(mixed: Replayed) -> None:
    replayed_png = _png_of(mixed.report.output or Path(), 6)
    assert replayed_png != mixed.recorded_png
    assert mixed.report.cells[6].status == "same"


def test_replayed_notebook_is_new_and_the_original_untouched(
    mixed: Replayed, read_notebook: Any
) -> None:
    assert mixed.path.read_bytes() == mixed.original
    assert mixed.report.output == mixed.path.with_name("mixed.replayed.ipynb")
    nb = read_notebook(mixed.report.output)
    assert [c.execution_count for c in nb.cells] == list(range(1, len(MIXED_CELLS) + 1))
    assert [c.source for c in nb.cells] == MIXED_CELLS
    assert nb.metadata.jupyter_exec.replay.of == str(mixed.path)
    assert nb.metadata.jupyter_exec.replay.reproduced is False


def test_progress_line_per_cell(mixed: Replayed) -> None:
    where, environment, head, *lines = mixed.progress.splitlines()
    # First where it runs and why, then what changed in the environment: the input file
    # the record read is gone.
    assert where.startswith("replaying on the host: ")
    assert environment == "environment: 1 difference(s) from the record"
    assert head == "  input file input.txt: missing or unreadable here"
    assert len(lines) == len(MIXED_CELLS)
    assert lines[0] == "[ 1/11] cell 1 ... same"
    assert lines[2] == "[ 3/11] cell 3 ... DIFFERENT"
    assert lines[4].startswith("[ 5/11] cell 5 ... ERROR NOW (FileNotFoundError")


def test_report_as_json_and_markdown(mixed: Replayed) -> None:
    data = json.loads(json.dumps(mixed.report.to_dict()))
    assert data["reproduced"] is False
    assert data["counts"] == {
        "same": 8,
        "equivalent": 0,
        "different": 1,
        "nondeterministic": 0,
        "error_now": 1,
        "error_before": 1,
        "not_run": 0,
        "skipped": 0,
    }
    assert data["environment_differences"] == ["input file input.txt: missing or unreadable here"]
    assert data["cells"][2]["status"] == "different"
    assert "address" in data["rules"]
    text = mixed.report.to_markdown()
    assert "| 3 | 3 → 3 | DIFFERENT | `random.random()` |" in text
    assert "## Cell 3: different" in text
    assert "```diff" in text


def test_until_replays_a_prefix_clean(
    mixed: Replayed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "report.md"
    out = tmp_path / "prefix.ipynb"
    code = run_cli(
        str(mixed.path), "--until", "2", "--output", str(out), "--report", str(report_path)
    )
    assert code == 0
    assert "reproduced: 2 same, 9 skipped" in capsys.readouterr().err
    assert report_path.read_text().startswith("# Replay of `mixed.ipynb`")
    nb = nbformat.read(out, as_version=4)
    assert [c.source for c in nb.cells] == MIXED_CELLS[:2]


# -- a notebook from another tool (JupyterLab / papermill layout), via the CLI -----------------


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _code(count: int | None, source: str, outputs: list[dict[str, Any]], **meta: Any) -> Any:
    papermill = {
        "duration": 0.01,
        "end_time": "2024-05-01T12:00:01.000000",
        "exception": False,
        "start_time": "2024-05-01T12:00:00.990000",
        "status": "completed",
    }
    return {
        "cell_type": "code",
        "execution_count": count,
        "id": hashlib.sha1(source.encode()).hexdigest()[:8],
        "metadata": {
            "execution": {"iopub.execute_input": "2024-05-01T12:00:00.991Z"},
            "papermill": papermill,
            **meta,
        },
        "outputs": outputs,
        "source": _lines(source),
    }


def _foreign_notebook() -> dict[str, Any]:
    """A papermill-executed notebook, saved as JupyterLab does: line lists, ids, metadata."""
    import pandas as pd

    frame_html = pd.DataFrame({"a": [1, 2]})._repr_html_().replace("\n", "\n\n  ")
    tqdm_raw = (
        "  0%|          | 0/2 [00:00<?, ?it/s]\r100%|##########| 2/2 [00:00<00:00, 8.12it/s]\n"
    )
    cells = [
        {"cell_type": "markdown", "id": "md1", "metadata": {}, "source": ["# A report\n", "run"]},
        _code(1, "n = 1", [], tags=["parameters"]),
        _code(2, "# Parameters\nn = 3\n", [], tags=["injected-parameters"]),
        _code(
            3,
            'for i in range(n):\n    print(f"line {i}")',
            [stream(["line 0\n"]), stream(["line 1\n"]), stream(["line 2\n"])],
        ),
        _code(
            4,
            'import sys\nprint("to stderr", file=sys.stderr)\nprint("to stdout")',
            [stream(["to stdout\n"]), stream(["to stderr\n"], "stderr")],
        ),
        _code(
            5,
            '{"n": n, "items": list(range(12))}',
            [
                {
                    "data": {
                        "text/plain": ["{'n': 3, 'items': [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}"]
                    },
                    "execution_count": 5,
                    "metadata": {},
                    "output_type": "execute_result",
                }
            ],
        ),
        _code(6, "n * 10", [result({"text/plain": ["30"]}, "display_data")]),
        {"cell_type": "raw", "id": "raw1", "metadata": {}, "source": ["raw text"]},
        _code(
            7,
            'import pandas as pd\npd.DataFrame({"a": [1, 2]})',
            [
                {
                    "data": {
                        "text/html": _lines(frame_html),
                        "text/plain": _lines("   a\n0  1\n1  2"),
                    },
                    "execution_count": 7,
                    "metadata": {},
                    "output_type": "execute_result",
                }
            ],
        ),
        _code(
            8,
            'from IPython.display import JSON\nJSON({"b": [1, 2], "a": n})',
            [
                {
                    "data": {
                        "application/json": {"a": 3, "b": [1, 2]},
                        "text/plain": ["<IPython.core.display.JSON object>"],
                    },
                    "execution_count": 8,
                    "metadata": {"application/json": {"expanded": False, "root": "root"}},
                    "output_type": "execute_result",
                }
            ],
        ),
        _code(
            9,
            'from PIL import Image\nImage.new("RGB", (8, 6), "teal")',
            [
                {
                    "data": {
                        "image/png": png("teal", compress_level=1),
                        "image/jpeg": jpeg("teal"),
                        "text/plain": ["<PIL.Image.Image image mode=RGB size=8x6>"],
                    },
                    "execution_count": 9,
                    "metadata": {},
                    "output_type": "execute_result",
                }
            ],
        ),
        _code(
            10,
            "import time\nt0 = time.perf_counter()\n"
            'print("  0%|          | 0/2 [00:00<?, ?it/s]", end="\\r")\n'
            "rate = 2 / (time.perf_counter() - t0 + 1e-3)\n"
            'print(f"100%|##########| 2/2 [00:00<00:00, {rate:.2f}it/s]")',
            [stream(_lines(tqdm_raw), "stdout")],
        ),
        _code(None, "", []),
    ]
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {
                "display_name": "Python 3 (ipykernel)",
                "language": "python",
                "name": "python3",
            },
            "language_info": {"name": "python", "version": "3.11.7"},
            "papermill": {
                "default_parameters": {},
                "duration": 2.5,
                "end_time": "2024-05-01T12:00:03.000000",
                "environment_variables": {},
                "exception": None,
                "input_path": "report.ipynb",
                "output_path": "report-n3.ipynb",
                "parameters": {"n": 3},
                "start_time": "2024-05-01T12:00:00.500000",
                "version": "2.6.0",
            },
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@dataclass
class Foreign:
    path: Path
    code: int
    report: dict[str, Any]
    replayed: Path


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Foreign:
    root = tmp_path_factory.mktemp("foreign")
    path = root / "report-n3.ipynb"
    path.write_text(json.dumps(_foreign_notebook(), indent=1, sort_keys=True) + "\n")
    report = root / "report.json"
    replayed = root / "out" / "again.ipynb"
    replayed.parent.mkdir()
    code = run_cli(
        str(path), "-q", "--timeout", "60", "--report", str(report), "--output", str(replayed)
    )
    return Foreign(path, code, json.loads(report.read_text()), replayed)


def test_foreign_notebook_replays_clean(foreign: Foreign) -> None:
    bad = {
        c["index"]: (c["status"], c["diff"], c["notes"])
        for c in foreign.report["cells"]
        if c["status"] not in ("same", "skipped")
    }
    assert bad == {}
    assert foreign.code == 0
    assert foreign.report["reproduced"] is True


def test_foreign_notebook_skips_and_facts(foreign: Foreign) -> None:
    cells = foreign.report["cells"]
    skipped = {c["index"]: c["notes"][0] for c in cells if c["status"] == "skipped"}
    assert skipped == {0: "markdown cell", 7: "raw cell", 12: "empty code cell"}
    assert foreign.report["extra"]["papermill"]["parameters"] == {"n": 3}
    assert "papermill's injected parameters" in cells[2]["notes"]


def test_foreign_replay_keeps_the_documents_shape(foreign: Foreign, read_notebook: Any) -> None:
    nb = read_notebook(foreign.replayed)
    original = nbformat.read(foreign.path, as_version=4)
    assert [c.cell_type for c in nb.cells] == [c.cell_type for c in original.cells]
    assert [c.source for c in nb.cells] == [c.source for c in original.cells]
    assert nb.cells[0].source == "# A report\nrun"


# -- an IPython 2 (nbformat 3) notebook, through the async API ---------------------------------


async def test_v3_notebook_is_upgraded_and_replayed(tmp_path: Path) -> None:
    seen: list[CellResult] = []

    async def on_cell(cell: CellResult) -> None:
        seen.append(cell)

    report = await replay_async(DATA / "v3.ipynb", work_dir=tmp_path, on_cell=on_cell, timeout=60)
    assert report.reproduced
    assert [c.status for c in seen] == ["skipped", "same", "same"]
    assert report.output == tmp_path / "v3.replayed.ipynb"
    assert report.cells == tuple(seen)


@pytest.fixture(autouse=True)
def _no_stray_files() -> Iterator[None]:
    """Replays write next to their notebooks only (in tmp dirs); the repo stays clean."""
    before = set(DATA.iterdir())
    yield
    assert set(DATA.iterdir()) == before


# -- what a person sees: display updates from later cells, clear_output(wait=True) ----------
#
# tests/data/display-updates.ipynb and clear-output.ipynb are our own notebooks, recorded by
# nbclient (NotebookClient(nb).execute()), so their outputs are what Jupyter shows at the end:
# a display a later cell updated shows its last value in every cell showing that id.


def _without_outputs(name: str) -> Any:
    nb = nbformat.read(DATA / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


@pytest.mark.parametrize("name", ["display-updates.ipynb", "clear-output.ipynb"])
async def test_what_nbclient_records_replays_with_no_difference(
    name: str, tmp_path: Path, read_notebook: Any
) -> None:
    # The record made now, by nbclient itself, from the notebook's code.
    nbclient = pytest.importorskip("nbclient")
    recorded = _without_outputs(name)
    await nbclient.NotebookClient(recorded, timeout=60, kernel_name="python3").async_execute()
    notebook = tmp_path / name
    nbformat.write(recorded, notebook)
    seen: list[CellResult] = []
    report = await replay_async(notebook, timeout=60, on_cell=seen.append)
    assert report.reproduced, report.to_markdown()
    assert {c.status for c in report.cells} == {"same", "skipped"}
    # The replayed notebook shows what nbclient's does, cell by cell.
    assert report.output is not None
    ours = [c for c in read_notebook(report.output).cells if c.cell_type == "code"]
    theirs = [c for c in recorded.cells if c.cell_type == "code"]
    assert len(ours) == len(theirs)
    for mine, its in zip(ours, theirs, strict=True):
        assert compare_outputs(its.outputs, mine.outputs).same, its.source
    if name == "display-updates.ipynb":
        # Three cells show ids later cells update: first judged different, then the same.
        revised = [c for c in report.cells if any("later cell updated" in n for n in c.notes)]
        assert [c.number for c in revised] == [3, 4, 6]
        assert [(c.number, c.status) for c in seen if c.number in (3, 4, 6)] == [
            (3, "different"),
            (4, "different"),
            (6, "different"),
            (3, "same"),
            (4, "same"),
            (6, "same"),
        ]


@pytest.mark.parametrize(
    ("name", "cell", "recorded", "changed"),
    [
        # A display a later cell updates: the record's final value differs from the replay's.
        ("display-updates.ipynb", 3, "'finished'", "'done'"),
        # The execute_result another cell updates.
        ("display-updates.ipynb", 6, "'final answer'", "'last answer'"),
        # After clear_output(wait=True) in a loop, only the last step shows.
        ("clear-output.ipynb", 3, "step 4\n", "step 3\n"),
    ],
)
def test_a_real_difference_in_a_final_state_is_still_reported(
    name: str, cell: int, recorded: str, changed: str, tmp_path: Path
) -> None:
    text = (DATA / name).read_text()
    nb = json.loads(text)
    target = nb["cells"][cell - 1]
    outputs = json.dumps(target["outputs"])
    assert json.dumps(recorded)[1:-1] in outputs  # the data file holds what the test expects
    target["outputs"] = json.loads(
        outputs.replace(json.dumps(recorded)[1:-1], json.dumps(changed)[1:-1], 1)
    )
    (tmp_path / name).write_text(json.dumps(nb))
    report = replay(tmp_path / name, timeout=60)
    assert not report.reproduced
    assert [c.number for c in report.problems] == [cell]
    diff = report.problems[0].diff
    assert f"-{changed.strip()}" in diff
    assert f"+{recorded.strip()}" in diff


# -- a shared notebook: cells placed in one order, run in another -----------------------------


def _shared_notebook() -> Any:
    """A person's cell inserted at the top and run last; a markdown cell stays put.

    The order in which they ran is recorded in ``jupyter_exec.run``; the
    execution counts agree with it (In [3] sits at the top).
    """

    def ran(count: int, source: str, text: str, by: str) -> Any:
        cell = nbformat.v4.new_code_cell(source, execution_count=count)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        run = {"seq": count, "by": by, **({"session": "agent"} if by == "agent" else {})}
        cell.metadata["jupyter_exec"] = {"run": run}
        return cell

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        ran(3, "total = base + step\nprint(total)", "12\n", "person"),
        nbformat.v4.new_markdown_cell("The agent's part"),
        ran(1, "base = 10\nprint(base)", "10\n", "agent"),
        ran(2, "step = 2\nprint(step)", "2\n", "agent"),
        ran(4, "print(total * 2)", "24\n", "agent"),
    ]
    return nb


def test_run_order_sorts_only_the_cells_that_carry_one() -> None:
    from jupyter_exec.engine.runorder import run_order

    nb = _shared_notebook()
    assert run_order(nb.cells) == [2, 1, 3, 0, 4]
    del nb.cells[4].metadata["jupyter_exec"]  # a cell nobody saw run keeps its place
    assert run_order(nb.cells) == [2, 1, 3, 0, 4]
    for cell in nb.cells:
        cell.metadata.pop("jupyter_exec", None)
    assert run_order(nb.cells) == [0, 1, 2, 3, 4]


async def test_shared_notebook_replays_in_the_order_its_cells_ran(tmp_path: Path) -> None:
    notebook = tmp_path / "shared.ipynb"
    nbformat.write(_shared_notebook(), notebook)
    seen: list[CellResult] = []
    report = await replay_async(notebook, timeout=60, on_cell=seen.append)
    assert report.reproduced, report.to_markdown()
    assert [c.number for c in seen] == [3, 2, 4, 1, 5]
    assert [c.status for c in seen] == ["same", "skipped", "same", "same", "same"]
    # The execution counts are out of placed order, but the recorded order was followed.
    assert not any("out of order" in w for w in report.warnings)
    assert report.output is not None
    replayed = nbformat.read(report.output, as_version=4)
    assert replayed.cells[0].source == "base = 10\nprint(base)"
