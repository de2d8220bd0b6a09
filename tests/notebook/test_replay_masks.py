"""No mask hides a value: every default mask has a pair of outputs that must stay different.

A mask (normalisation rule) forgives one volatile token, a duration, an address, a
uuid; it must never reach the value beside it. These pairs are written so that a mask a
little too wide (across a line break, a column gap, a value that only looks volatile)
would call them ``same``: the first of them is the ``describe()`` whose ``std`` the old
``duration`` rule hid (``0.87\\nmin`` read as "0.87 min"). The last test replays a real
notebook whose stored ``describe()`` was edited, through the command line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_exec import Session
from jupyter_exec.notebook.compare import (
    DEFAULT_RULES,
    Masked,
    compare_outputs,
    normalize,
    parse_rule,
)
from jupyter_exec.notebook.report import CellResult, ReplayReport
from tests.cli_helpers import run_cli


def stdout(text: str) -> list[dict[str, Any]]:
    return [{"output_type": "stream", "name": "stdout", "text": text}]


def result(mime: str, text: str) -> list[dict[str, Any]]:
    return [
        {
            "output_type": "execute_result",
            "execution_count": 1,
            "data": {mime: text},
            "metadata": {},
        }
    ]


DESCRIBE = (
    "count    3.000000\nmean     2.333333\nstd      1.527525\nmin      1.000000\n"
    "25%      1.500000\n50%      2.000000\n75%      3.000000\nmax      4.000000\n"
    "dtype: float64"
)
WIDGET = '{{"model_id": "9f1c2b3a4d5e6f708192a3b4c5d6e7f8", "version_major": {}}}'

MUST_DIFFER: list[tuple[str, str, str, bool]] = [
    # (rule, recorded, replayed, whether the rule still masks its own token in them)
    ("duration", "std 0.87\nmin -1.9\n", "std 5.12\nmin -1.9\n", False),
    ("duration", DESCRIBE, DESCRIBE.replace("1.527525", "9.999999"), False),
    ("duration", "Wall time: 1.2 s  loss 0.5", "Wall time: 3 ms  loss 0.7", True),
    ("duration", "rate 12\tms per call", "rate 13\tms per call", False),
    ("tqdm", "rows 12\nB/s\n", "rows 13\nB/s\n", False),
    ("tqdm", "50/50 [00:01<00:00, 41.3it/s]", "40/50 [00:01<00:00, 41.3it/s]", True),
    ("address", "0x00000000deadbeef", "0x00000000deadbeee", False),  # hex() of a value
    ("address", "<Foo object at 0x7f3a2c1d0e80> 5", "<Foo object at 0x7f3a2c1d0e81> 6", True),
    ("tempfile", "tmpvalue_01", "tmpvalue_02", False),  # a name that looks like a temp dir
    ("tempfile", "/tmp/tmpk2j4_x9q/data.csv 5 rows", "/tmp/tmpa8d0zz1m/data.csv 6 rows", True),
    ("datetime", "2024-05-01    0.5", "2024-05-01    0.7", True),
    ("datetime-repr", "datetime.date(2024, 5, 1) 0.5", "datetime.date(2024, 5, 2) 0.7", True),
    ("clock-time", "elapsed 0:00:01 loss 0.31", "elapsed 0:00:02 loss 0.29", True),
    (
        "timeit-loops",
        "1.2 µs ± 4 ns per loop (mean ± std. dev. of 7 runs, 1,000 loops each)",
        "1.2 µs ± 4 ns per loop (mean ± std. dev. of 3 runs, 1,000 loops each)",
        True,
    ),
    (
        "uuid",
        "3f2b9c1e-0c4e-4d3b-9a37-1f0e2d9c9d1a 0.5",
        "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d 0.7",
        True,
    ),
    (
        "ipykernel-file",
        "/tmp/ipykernel_4711/3391.py:2: UserWarning: 0.5",
        "/tmp/ipykernel_99/12.py:2: UserWarning: 0.7",
        True,
    ),
    ("widget-id", WIDGET.format(2), WIDGET.format(3), True),
    (
        "styler-id",
        '<td id="T_8a3f1_row0_col0">0.5</td>',
        '<td id="T_1b2c3_row0_col0">0.7</td>',
        True,
    ),
]


def test_every_default_mask_has_a_pair_that_must_stay_different() -> None:
    assert {rule.name for rule in DEFAULT_RULES} == {rule for rule, *_ in MUST_DIFFER}


@pytest.mark.parametrize(("rule", "before", "after", "masks"), MUST_DIFFER)
@pytest.mark.parametrize("mime", ["stream", "text/plain", "text/html"])
def test_a_mask_never_hides_the_value_beside_its_token(
    rule: str, before: str, after: str, masks: bool, mime: str
) -> None:
    if mime == "stream":
        old, new = stdout(before), stdout(after)
    elif mime == "text/html":  # in <pre>: HTML's whitespace collapse comes after the masks
        old, new = result(mime, f"<pre>{before}</pre>"), result(mime, f"<pre>{after}</pre>")
    else:
        old, new = result(mime, before), result(mime, after)
    found = compare_outputs(old, new, rtol=0.0)
    assert found.verdict == "different", found
    assert found.diff
    assert (rule in found.masks) is masks, found.masks


def test_describe_std_as_the_issue_measured_it() -> None:
    found = compare_outputs(stdout("std 0.87\nmin -1.9"), stdout("std 5.12\nmin -1.9"))
    assert found.verdict == "different"
    assert "-std 0.87" in found.diff
    assert "+std 5.12" in found.diff
    assert found.masks == ()
    assert found.masked == ()


def test_same_only_when_nothing_but_masked_tokens_differ() -> None:
    found = compare_outputs(stdout("Wall time: 1.2 s\n"), stdout("Wall time: 15 ms\n"))
    assert found.verdict == "same"
    assert found.masked == (Masked("duration", ("1.2 s",), ("15 ms",)),)
    assert found.masked[0].describe() == "duration hid '1.2 s' (recorded) / '15 ms' (replayed)"
    # A literal mask replacement on one side is not the other side's masked token.
    literal = compare_outputs(stdout("took <duration>\n"), stdout("took 1 s\n"))
    assert literal.verdict == "different"
    assert "the masks do not line up" in literal.notes[0]


def test_user_rules_mask_one_token_too() -> None:
    greedy = parse_rule(r"loss\s+\S+\s+\S+")
    assert normalize("loss 0.5 acc", [greedy]) == "<normalized>"
    assert normalize("loss 0.5\nacc", [greedy]) == "loss 0.5\nacc"  # across a line: no
    assert normalize("loss  0.5 acc", [greedy]) == "loss  0.5 acc"  # across a column gap: no
    pair = compare_outputs(stdout("loss 0.5\nacc 1\n"), stdout("loss 0.6\nacc 1\n"), [greedy])
    assert pair.verdict == "different"


def test_the_masked_texts_are_bounded_and_reported() -> None:
    many = "".join(f"step {i}: {i}.{i} s\n" for i in range(40))
    found = compare_outputs(stdout(many), stdout(many))
    (masked,) = found.masked
    assert masked.rule == "duration"
    assert masked.recorded == ("0.0 s", "1.1 s", "2.2 s", "3.3 s", "4.4 s")
    cell = CellResult(
        0, "code", "same", "x", masks=found.masks, masked=found.masked, execution_count_now=1
    )
    assert cell.to_dict()["masked"] == [
        {"rule": "duration", "recorded": list(masked.recorded), "replayed": list(masked.replayed)}
    ]
    timed = compare_outputs(stdout("Wall time: 1.2 s\n"), stdout("Wall time: 15 ms\n"))
    other = CellResult(1, "code", "same", "y", masks=timed.masks, masked=timed.masked)
    text = ReplayReport(Path("nb.ipynb"), (cell, other)).to_markdown()
    assert "## What the masks hid" in text
    assert "| 2 | same | duration | `1.2 s` | `15 ms` |" in text
    assert "| 1 |" not in text.split("## What the masks hid")[1]  # hid the same on both sides


# -- a real replay of a notebook whose stored describe() was edited ---------------------------


def test_an_edited_describe_std_replays_as_different_and_the_cli_fails(tmp_path: Path) -> None:
    code = "import pandas as pd\npd.Series([1.0, 2.0, 4.0]).describe()"
    with Session(work_dir=tmp_path, name="stats", timeout=120) as session:
        shown = session.execute(code).results[0].text or ""
    assert "std" in shown
    assert "\nmin" in shown
    path = tmp_path / "stats.ipynb"
    nb = nbformat.read(path, as_version=4)
    recorded = "".join(nb.cells[0].outputs[0]["data"]["text/plain"])
    std_line = next(line for line in recorded.splitlines() if line.startswith("std"))
    edited = recorded.replace(std_line, "std      9.999999")
    assert edited != recorded
    nb.cells[0].outputs[0]["data"]["text/plain"] = edited
    nbformat.write(nb, path)

    report_path = tmp_path / "report.json"
    done = run_cli("replay", str(path), "--report", str(report_path), "-q")
    assert done.returncode == 1, done.stderr
    report = json.loads(report_path.read_text())
    (cell,) = report["cells"]
    assert cell["status"] == "different"
    assert "+" + std_line in cell["diff"].splitlines()
    assert "-std      9.999999" in cell["diff"].splitlines()
    assert "NOT reproduced" in done.stderr
