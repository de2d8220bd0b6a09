"""``Result.chart`` and ``Result.data`` through the real SDK: the kernel's own formats.

Each sandbox kernel loads :mod:`jupyter_exec.e2b.kernel_formats` when it
starts, so a matplotlib figure arrives as a PNG *and* as the SDK's chart
objects, and a DataFrame with its columns as ``data``; the notebook on disk
stays valid nbformat. The figures are the kinds E2B documents (line, scatter,
bar, pie, box-and-whisker, several axes); every expected value is computed
here from the data the cell plotted, not read back from the server.
"""

from __future__ import annotations

import datetime
import json

import nbformat
import pytest
from e2b_code_interpreter import Sandbox
from e2b_code_interpreter.charts import (
    BarChart,
    BoxAndWhiskerChart,
    Chart,
    ChartType,
    LineChart,
    PieChart,
    ScatterChart,
    SuperChart,
)
from e2b_server_helpers import Running

from jupyter_exec.e2b.kernel_formats import MAX_DATA_CELLS

pytest.importorskip("matplotlib")


def chart_of(sandbox: Sandbox, code: str) -> Chart:
    execution = sandbox.run_code("import matplotlib.pyplot as plt, numpy as np\n" + code)
    assert execution.error is None, execution.error
    [result] = execution.results
    assert result.png  # the picture is still there, beside its data
    assert result.chart is not None
    return result.chart


def test_line_chart_with_dates_units_and_labels(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    chart = chart_of(
        sandbox,
        """
days = [__import__("datetime").date(2024, 3, 1) + __import__("datetime").timedelta(days=i)
        for i in range(30)]
plt.plot(days, np.arange(30) ** 2, label="squares")
plt.plot(days, np.arange(30) * 10.0)
plt.xlabel("Day [d]"); plt.ylabel("Energy (kWh)"); plt.title("Use per day")
plt.show()
""",
    )
    assert isinstance(chart, LineChart)
    assert (chart.type, chart.title) == (ChartType.LINE, "Use per day")
    assert (chart.x_label, chart.x_unit, chart.y_label, chart.y_unit) == (
        "Day [d]", "d", "Energy (kWh)", "kWh",
    )  # fmt: skip
    assert (chart.x_scale, chart.y_scale) == ("datetime", "linear")
    assert all(isinstance(datetime.datetime.fromisoformat(t), datetime.datetime)
               for t in chart.x_ticks)  # fmt: skip
    assert all(isinstance(t, float) for t in chart.y_ticks)
    assert len(chart.y_tick_labels) == len(chart.y_ticks)
    squares, tens = chart.elements
    assert (squares.label, tens.label) == ("squares", "Line 1")
    assert squares.points[3] == ("2024-03-04", 9.0)
    assert [y for _, y in tens.points] == [i * 10.0 for i in range(30)]


def test_scatter_chart_and_log_scale(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    chart = chart_of(
        sandbox,
        """
plt.scatter([1, 10, 100], [2, 3, 4], label="small")
plt.scatter([5, 50], [6, 7], label="big")
plt.xscale("log"); plt.xlabel("size")
plt.show()
""",
    )
    assert isinstance(chart, ScatterChart)
    assert chart.title is None
    assert (chart.x_label, chart.y_label) == ("size", None)
    assert (chart.x_scale, chart.y_scale) == ("log", "linear")
    assert [(e.label, e.points) for e in chart.elements] == [
        ("small", [(1.0, 2.0), (10.0, 3.0), (100.0, 4.0)]),
        ("big", [(5.0, 6.0), (50.0, 7.0)]),
    ]


def test_bar_chart_upright_and_sideways(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    chart = chart_of(
        sandbox,
        """
plt.bar(["north", "south", "east"], [12, 7, 3.5], label="2024")
plt.xlabel("Region"); plt.ylabel("Sales (k€)"); plt.title("Sales")
plt.show()
""",
    )
    assert isinstance(chart, BarChart)
    assert (chart.title, chart.x_label, chart.y_unit) == ("Sales", "Region", "k€")
    assert [(b.label, b.value, b.group) for b in chart.elements] == [
        ("north", 12, "2024"), ("south", 7, "2024"), ("east", 3.5, "2024"),
    ]  # fmt: skip
    sideways = chart_of(
        sandbox,
        "plt.barh(['a', 'b'], [3, 4]); plt.xlabel('Count'); plt.ylabel('Letter'); plt.show()",
    )
    assert isinstance(sideways, BarChart)
    assert [(b.label, b.value) for b in sideways.elements] == [("a", 3), ("b", 4)]
    assert (sideways.x_label, sideways.y_label) == ("Letter", "Count")  # x: the categories


def test_pie_chart(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    chart = chart_of(
        sandbox,
        """
fig, ax = plt.subplots()
ax.pie([50, 30, 20], labels=["rent", "food", "fun"], autopct="%1.0f%%", radius=1.5)
ax.set_title("Budget")
plt.show()
""",
    )
    assert isinstance(chart, PieChart)
    assert chart.title == "Budget"
    assert [(p.label, p.angle, p.radius) for p in chart.elements] == [
        ("rent", 180, 1.5), ("food", 108, 1.5), ("fun", 72, 1.5),
    ]  # fmt: skip


def test_box_and_whisker_chart(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    groups = {"A": [1, 2, 3, 4, 5], "B": [10, 12, 13, 14, 15, 40]}
    chart = chart_of(
        sandbox,
        f"""
groups = {groups!r}
fig, ax = plt.subplots()
ax.boxplot(list(groups.values()), tick_labels=list(groups), patch_artist=True)
ax.set_title("Spread"); ax.set_xlabel("Group"); ax.set_ylabel("Value")
plt.show()
""",
    )
    assert isinstance(chart, BoxAndWhiskerChart)
    assert (chart.title, chart.x_label, chart.y_label) == ("Spread", "Group", "Value")
    expected = []
    for label, values in groups.items():  # matplotlib's rule: whiskers reach 1.5 IQR, the rest fly
        q1, median, q3 = (_percentile(values, p) for p in (25, 50, 75))
        inside = [v for v in values if q1 - 1.5 * (q3 - q1) <= v <= q3 + 1.5 * (q3 - q1)]
        outliers = [float(v) for v in values if v not in inside]
        expected.append((label, min(inside), q1, median, q3, max(inside), outliers))
    assert [
        (b.label, b.min, b.first_quartile, b.median, b.third_quartile, b.max, b.outliers)
        for b in chart.elements
    ] == expected
    assert expected[1][-1] == [40.0]  # the data has an outlier, and it was found


def _percentile(values: list[int], p: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def test_several_axes_are_a_superchart_and_a_stray_figure_is_unknown(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    chart = chart_of(
        sandbox,
        """
fig, (left, right) = plt.subplots(1, 2)
fig.suptitle("Both")
left.plot([0, 1, 2], [0, 1, 4]); left.set_title("curve")
right.bar(["x", "y"], [1, 2]); right.set_title("bars")
plt.show()
""",
    )
    assert isinstance(chart, SuperChart)
    assert chart.title == "Both"
    line, bars = chart.elements
    assert isinstance(line, LineChart)
    assert isinstance(bars, BarChart)
    assert (line.title, bars.title) == ("curve", "bars")
    assert line.elements[0].points == [(0.0, 0.0), (1.0, 1.0), (2.0, 4.0)]
    circles = chart_of(
        sandbox,
        "fig, ax = plt.subplots(); ax.add_patch(plt.Circle((0, 0), 1)); ax.set_title('c'); "
        "plt.show()",
    )
    assert (circles.type, circles.title, circles.elements) == (ChartType.UNKNOWN, "c", [])
    empty = sandbox.run_code("import matplotlib.pyplot as plt\nplt.figure(); plt.show()")
    assert all(r.chart is None for r in empty.results)  # nothing drawn: no chart


def test_dataframe_data_and_the_notebook_stays_valid(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    before = sandbox.run_code("1").execution_count
    execution = sandbox.run_code(
        "import pandas as pd\n"
        "pd.DataFrame({'n': [1, 2, None], 'when': pd.to_datetime(['2024-01-02'] * 3)})"
    )
    [result] = execution.results
    assert result.data is not None
    assert result.data["n"] == [1.0, 2.0, None]
    assert result.data["when"][0].startswith("2024-01-02")
    assert result.html  # the table as always
    big = sandbox.run_code(f"pd.DataFrame({{'x': range({MAX_DATA_CELLS + 1})}})")
    assert big.results[0].data is None  # too big to repeat as JSON; the HTML has it
    assert big.results[0].html
    assert before is not None
    assert big.execution_count == before + 2  # the formats cost no cells
    assert json.loads(execution.to_json())["results"][0]["data"]["n"][0] == 1.0
    names = sandbox.run_code("sorted(k for k in globals() if 'jx' in k or 'e2b' in k)")
    assert names.text == "[]"  # the startup left nothing in the user's namespace
    notebook = debug_env.root / "debug_sandbox_id" / "debug_sandbox_id.ipynb"
    nbformat.validate(nbformat.read(notebook, as_version=4))


def test_pil_images_are_shown_on_show_and_save(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    code = (
        "from PIL import Image\n"
        "image = Image.new('RGB', (6, 4), 'green')\n"
        "image.{call}\n"
        "print('after')"
    )
    shown = sandbox.run_code(code.format(call="show()"))  # no desktop viewer is looked for
    saved = sandbox.run_code(code.format(call="save('green.png')"))
    for execution in (shown, saved):
        assert execution.error is None
        [result] = execution.results
        assert result.png
        assert "".join(execution.logs.stdout) == "after\n"
    assert sandbox.files.read("green.png", format="bytes")[:4] == b"\x89PNG"  # and it was saved
