"""Outputs judged by meaning, per MIME type: hand-written pairs, no kernel.

Each rule has a pair a person calls the same (``equivalent``, with the reason) and a
pair a person calls different (still ``different``): a rule that made everything
equivalent would fail the second half.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from jupyter_exec.models import Execution
from jupyter_exec.notebook.compare import DEFAULT_RULES, ImageTolerance, compare_outputs
from jupyter_exec.notebook.judge import _judge
from jupyter_exec.notebook.meaning import canonical_html, canonical_xml, lines_close
from jupyter_exec.notebook.passes import _Judging, _nondeterministic


def rich(mime: str, value: Any) -> list[dict[str, Any]]:
    return [{"output_type": "display_data", "data": {mime: value}, "metadata": {}}]


def stdout(text: str) -> list[dict[str, Any]]:
    return [{"output_type": "stream", "name": "stdout", "text": text}]


SVG_A = '<svg height="100" width="100">\n  <circle cx="50" cy="50" fill="red" r="40"/>\n</svg>'
SVG_B = (
    '<svg width="100"  height="100"><!-- drawn -->'
    '<circle r="40" fill="red" cy="50" cx="50" />\n</svg>'
)


def test_svg_attribute_order_whitespace_and_comments_are_equivalent() -> None:
    found = compare_outputs(rich("image/svg+xml", SVG_A), rich("image/svg+xml", SVG_B))
    assert found.verdict == "equivalent"
    assert found.reasons == ("SVG canonical form (attribute order, whitespace, comments)",)
    assert found.diff  # the text difference is still shown


def test_svg_with_another_value_is_different() -> None:
    other = SVG_B.replace('fill="red"', 'fill="blue"')
    found = compare_outputs(rich("image/svg+xml", SVG_A), rich("image/svg+xml", other))
    assert found.verdict == "different"
    assert found.reasons == ()


def test_xml_is_canonicalised_and_entities_are_not_expanded() -> None:
    a = '<?xml version="1.0"?><doc b="2" a="1"><x>1</x></doc>'
    b = '<doc a="1" b="2">\n  <x>1</x>\n</doc>'
    assert compare_outputs(rich("application/xml", a), rich("application/xml", b)).verdict == (
        "equivalent"
    )
    bomb = '<!DOCTYPE d [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><d>&b;</d>'
    assert canonical_xml(bomb) is None  # compared as text, never expanded
    assert canonical_xml("<unclosed>") is None


def test_html_attribute_order_and_whitespace_are_equivalent() -> None:
    a = '<div class="box" id="x">\n  <b style="color: red">hi</b>   there\n</div>'
    b = '<div id="x" class="box"><b style="color:  red">hi</b> there</div>'
    found = compare_outputs(rich("text/html", a), rich("text/html", b))
    assert found.verdict == "equivalent"
    assert found.reasons == ("HTML canonical form (attribute order, whitespace, comments)",)
    changed = compare_outputs(rich("text/html", a), rich("text/html", b.replace("hi", "ho")))
    assert changed.verdict == "different"


def _frame(values: list[float], style: str = "") -> str:
    rows = "".join(
        f"<tr><th>{i}</th><td>{v!r}</td><td>name{i}</td></tr>" for i, v in enumerate(values)
    )
    return (
        f'<div><style scoped>{style}</style><table border="1" class="dataframe">'
        f"<thead><tr><th></th><th>x</th><th>label</th></tr></thead><tbody>{rows}</tbody>"
        "</table></div>"
    )


def test_dataframe_html_with_1e_9_differences_is_equivalent_by_cell_values() -> None:
    before = _frame([0.1, 2.5, 1000.0], ".dataframe tbody tr th {vertical-align: top;}")
    after = _frame([0.1 + 1e-10, 2.5 - 2e-9, 1000.000001], "")  # and pandas' style changed
    found = compare_outputs(rich("text/html", before), rich("text/html", after))
    assert found.verdict == "equivalent"
    assert found.reasons == ("DataFrame HTML by cell values (within rtol=1e-06)",)
    lines, table = canonical_html(after) or ([], False)
    assert table
    assert lines[0] == "|  | x | label |"


def test_dataframe_with_a_changed_value_or_label_is_different() -> None:
    before = _frame([0.1, 2.5, 1000.0])
    assert compare_outputs(
        rich("text/html", before), rich("text/html", _frame([0.1, 2.6, 1000.0]))
    ).verdict == ("different")
    relabelled = before.replace("name1", "other")
    assert compare_outputs(rich("text/html", before), rich("text/html", relabelled)).verdict == (
        "different"
    )


def test_json_key_order_and_float_formatting_are_not_differences() -> None:
    a = {"b": [1, 2.5], "a": {"y": 1.0, "x": "s"}}
    b = '{"a": {"x": "s", "y": 1.00}, "b": [1, 2.50]}'
    assert compare_outputs(rich("application/json", a), rich("application/json", b)).same
    found = compare_outputs(
        rich("application/json", {"n": 1}), rich("application/json", {"n": 1.0})
    )
    assert found.verdict == "equivalent"
    assert found.reasons == ("JSON by value (number formatting)",)
    other = compare_outputs(rich("application/json", {"n": 1}), rich("application/json", {"n": 2}))
    assert other.verdict == "different"


def test_numbers_in_text_compare_with_rtol_only_when_asked() -> None:
    a, b = stdout("loss 0.123456789 after 10 steps\n"), stdout("loss 0.123456790 after 10 steps\n")
    assert compare_outputs(a, b).verdict == "different"
    found = compare_outputs(a, b, rtol=1e-6)
    assert found.verdict == "equivalent"
    assert found.reasons == ("numbers within rtol=1e-06",)
    assert compare_outputs(a, b, rtol=1e-12).verdict == "different"
    # Only numbers may move: other words, or another count of numbers, still differ.
    assert compare_outputs(a, stdout("loss 0.123456789 after 10 epochs\n"), rtol=1).verdict == (
        "different"
    )
    assert not lines_close(["1 2"], ["1 2 3"], 1.0)
    with pytest.raises(ValueError, match="rtol"):
        compare_outputs(a, b, rtol=-1)


def test_masks_applied_are_listed() -> None:
    a = stdout("<Foo object at 0x7f3a2c1d0e80> at 2024-05-01 12:03:44\n")
    b = stdout("<Foo object at 0x7f00000000aa> at 2025-01-02 01:02:03\n")
    found = compare_outputs(a, b)
    assert found.same
    assert found.masks == ("address", "datetime")
    assert compare_outputs(stdout("plain\n"), stdout("plain\n")).masks == ()


def _execution(outputs: list[dict[str, Any]]) -> Execution:
    return Execution(code="", status="ok", outputs=tuple(outputs))


def _cell(outputs: list[dict[str, Any]], count: int | None = 1) -> dict[str, Any]:
    return {"cell_type": "code", "source": "x", "outputs": outputs, "execution_count": count}


def test_verdicts_equivalent_and_not_run_carry_reasons_and_are_ok() -> None:
    judged = _judge(
        0,
        _cell(rich("image/svg+xml", SVG_A)),
        _execution(rich("image/svg+xml", SVG_B)),
        DEFAULT_RULES,
        ImageTolerance(),
    )
    assert (judged.status, judged.ok) == ("equivalent", True)
    assert judged.to_dict()["reasons"] == [
        "SVG canonical form (attribute order, whitespace, comments)"
    ]
    never = _judge(1, _cell([], None), _execution(stdout("hi\n")), DEFAULT_RULES, ImageTolerance())
    assert (never.status, never.ok, never.diff) == ("not_run", True, "")


def test_cells_that_differ_between_two_replays_are_nondeterministic() -> None:
    judging = _Judging(DEFAULT_RULES, ImageTolerance(), 0.0)
    record = _cell(stdout("0.5\n"))
    steady = _cell(stdout("same\n"))
    first = [
        judging.judge(0, record, _execution(stdout("0.7\n"))),
        judging.judge(1, steady, _execution(stdout("same\n"))),
        judging.judge(2, steady, _execution(stdout("changed\n"))),
    ]
    second = [
        judging.judge(0, record, _execution(stdout("0.1\n"))),
        judging.judge(1, steady, _execution(stdout("same\n"))),
        judging.judge(2, steady, _execution(stdout("changed\n"))),
    ]
    merged = _nondeterministic(first, second, judging)
    assert [r.status for r in merged] == ["nondeterministic", "same", "different"]
    assert merged[0].ok
    assert not merged[2].ok
    assert "differ between two replays" in merged[0].notes[-1]
    assert json.loads(json.dumps([r.to_dict() for r in merged]))[0]["status"] == (
        "nondeterministic"
    )
