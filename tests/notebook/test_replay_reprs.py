"""Library-version reprs bridged when the record's versions differ from the replay's.

Each entry of :data:`~jupyter_exec.notebook.reprs.BRIDGES` has a pair a person calls the same
(``equivalent``, the entry named with the versions it bridges) and a pair that must stay
``different`` (another value behind the new form); with the same versions, or a record with
no versions for the package, the entries are off and the same pair is ``different``. A
notebook from elsewhere (no jupyter_exec record at all) is read by its own words: the entries
whose new form the replay prints are on. Replays of a real notebook whose record says NumPy
1, and of one from elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy
import pytest

from jupyter_exec import Session
from jupyter_exec.notebook.compare import compare_outputs
from jupyter_exec.notebook.replay import replay
from jupyter_exec.notebook.reprs import BRIDGES, active_bridges, unrecorded_bridges

OLD = {
    "packages": {
        "numpy": "1.26.4",
        "pandas": "1.5.3",
        "matplotlib": "2.1.2",
        "ipython": "5.8.0",
        "matplotlib-inline": "0.1.3",
    }
}
NEW = {
    "packages": {
        "numpy": "2.1.0",
        "pandas": "2.2.3",
        "matplotlib": "3.9.0",
        "ipython": "9.1.0",
        "matplotlib-inline": "0.1.7",
    }
}


def shown(text: str) -> list[dict[str, Any]]:
    return [
        {
            "output_type": "execute_result",
            "data": {"text/plain": text},
            "metadata": {},
            "execution_count": 1,
        }
    ]


# (entry, recorded in the old version, replayed in the new one, a new one that must differ)
PAIRS = [
    ("numpy-scalar-repr", "9", "np.int64(9)", "np.int64(10)"),
    ("numpy-scalar-repr", "1.5", "np.float64(1.5)", "np.float64(1.25)"),
    ("numpy-scalar-repr", "True", "np.True_", "np.False_"),
    (
        "numpy-scalar-repr",
        "[1, 2.5]",
        "[np.int64(1), np.float32(2.5)]",
        "[np.int64(1), np.int64(2)]",
    ),
    ("numpy-scalar-repr", "(1+2j)", "np.complex128(1+2j)", "np.complex128(1+3j)"),
    ("numpy-scalar-repr", "'a'", "np.str_('a')", "np.str_('b')"),
    ("numpy-scalar-repr", "1.5", "np.longdouble('1.5')", "np.longdouble('1.6')"),
    (
        "numpy-void-repr",
        "(1, 2.)",
        "np.void((1, 2.0), dtype=[('a', '<i8'), ('b', '<f8')])",
        "np.void((1, 2.5), dtype=[('a', '<i8'), ('b', '<f8')])",
    ),
    (
        "pandas-index-repr",
        "Int64Index([1, 2], dtype='int64')",
        "Index([1, 2], dtype='int64')",
        "Index([1, 3], dtype='int64')",
    ),
    (
        "pandas-index-repr",
        "Float64Index([0.5, 1.0], dtype='float64')",
        "Index([0.5, 1.0], dtype='float64')",
        "Index([0.5, 2.0], dtype='float64')",
    ),
    (
        "matplotlib-inline-default-figure",
        "<Figure size 432x288 with 1 Axes>",
        "<Figure size 640x480 with 1 Axes>",
        "<Figure size 640x480 with 2 Axes>",
    ),
    (
        "matplotlib-inline-default-figure",
        "<Figure size 432x288 with 1 Axes>",
        "<Figure size 640x480 with 1 Axes>",
        "<Figure size 600x400 with 1 Axes>",
    ),
    (
        "matplotlib-figure-repr",
        "<matplotlib.figure.Figure at 0x10b4f7a90>",
        "<Figure size 640x480 with 1 Axes>",
        "<Figure size 640x480 with 1 Axes> and more",
    ),
    (
        "matplotlib-hist-container-repr",
        "<a list of 10 Patch objects>",
        "<BarContainer object of 10 artists>",
        "<BarContainer object of 12 artists>",
    ),
    (
        "matplotlib-axes-repr",
        "<matplotlib.axes._subplots.AxesSubplot at 0x7f0c2b5d9e80>",
        "<Axes: xlabel='x'>",
        "<PolarAxes: >",
    ),
    (
        "object-repr-form",
        "[<matplotlib.lines.Line2D object at 0x7f3a2c1d0e80>]",
        "[<matplotlib.lines.Line2D at 0x7ff83d5cffd0>]",
        "[<matplotlib.patches.Rectangle at 0x7ff83d5cffd0>]",
    ),
    (
        "ipython-display-repr",
        "<IPython.core.display.HTML at 0x10b4f7a90>",
        "<IPython.core.display.HTML object>",
        "<IPython.core.display.Javascript object>",
    ),
    (
        "matplotlib-inline-backend-name",
        "module://ipykernel.pylab.backend_inline",
        "inline",
        "agg",
    ),
    (
        "matplotlib-inline-backend-name",
        "backend: module://matplotlib_inline.backend_inline",
        "backend: inline",
        "backend: module://matplotlib_inline.backend_inline2",
    ),
]


@pytest.mark.parametrize(("name", "recorded", "replayed", "other"), PAIRS)
def test_each_entry_bridges_its_pair_and_no_other_value(
    name: str, recorded: str, replayed: str, other: str
) -> None:
    bridges = active_bridges(OLD, NEW)
    found = compare_outputs(shown(recorded), shown(replayed), bridges=bridges)
    assert found.verdict == "equivalent"
    package = next(b.package for b in BRIDGES if b.name == name)
    versions = f"({package} {OLD['packages'][package]} recorded, {NEW['packages'][package]} here)"
    assert f"{name} {versions}" in found.reasons
    assert compare_outputs(shown(recorded), shown(other), bridges=bridges).verdict == "different"
    # The same versions, or none recorded: the entries stay off.
    for before, now in ((NEW, NEW), (OLD, OLD), (None, NEW), ({}, NEW), (OLD, {"packages": {}})):
        off = compare_outputs(shown(recorded), shown(replayed), bridges=active_bridges(before, now))
        assert off.verdict == "different", (before, now)


@pytest.mark.parametrize(("name", "recorded", "replayed", "other"), PAIRS)
def test_a_notebook_that_records_no_versions_is_read_by_its_own_words(
    name: str, recorded: str, replayed: str, other: str
) -> None:
    """A notebook from elsewhere names no versions: each entry the replay's versions print the
    new form of is on, the record taken as the older side, and the reason says it was not
    recorded; another value behind the new form stays different."""
    bridges = unrecorded_bridges(NEW)
    found = compare_outputs(shown(recorded), shown(replayed), bridges=bridges)
    assert found.verdict == "equivalent"
    package = next(b.package for b in BRIDGES if b.name == name)
    assert f"{name} ({package} not recorded, {NEW['packages'][package]} here)" in found.reasons
    assert compare_outputs(shown(recorded), shown(other), bridges=bridges).verdict == "different"


def test_an_unrecorded_entry_is_on_only_where_the_replay_prints_the_new_form() -> None:
    names = {b.bridge.name for b in unrecorded_bridges(OLD)}  # NumPy 1, pandas 1, mpl 2.1
    assert names == {"object-repr-form", "ipython-display-repr", "matplotlib-inline-backend-name"}
    assert unrecorded_bridges(None) == ()
    assert unrecorded_bridges({"packages": {"numpy": None}}) == ()
    # The figure's rewrite drops the size: a record in the new form at another size differs;
    # only the inline backend's old default (6x4 in at 72 dpi) reads as the new one.
    bridges = unrecorded_bridges(NEW)
    for before, verdict in (("432x288", "equivalent"), ("500x300", "different")):
        assert compare_outputs(
            shown(f"<Figure size {before} with 1 Axes>"),
            shown("<Figure size 640x480 with 1 Axes>"),
            bridges=bridges,
        ).verdict == (verdict)
    without = unrecorded_bridges({"packages": {**NEW["packages"], "matplotlib-inline": "0.1.3"}})
    assert compare_outputs(
        shown("<Figure size 432x288 with 1 Axes>"),
        shown("<Figure size 640x480 with 1 Axes>"),
        bridges=without,
    ).verdict == ("different")


def test_a_rewrite_leaves_lines_already_equal_alone() -> None:
    """A record in the new form: the figure's one-sided rewrite must not make the equal line
    differ when another line of the block differs by a bridged repr."""
    bridges = active_bridges(OLD, NEW)
    record = "9\n<Figure size 640x480 with 1 Axes>"
    found = compare_outputs(
        shown(record), shown("np.int64(9)\n<Figure size 640x480 with 1 Axes>"), bridges=bridges
    )
    assert found.verdict == "equivalent"
    assert compare_outputs(
        shown(record), shown("np.int64(8)\n<Figure size 640x480 with 1 Axes>"), bridges=bridges
    ).verdict == ("different")


def test_a_replay_of_a_notebook_from_elsewhere_names_the_entries(tmp_path: Path) -> None:
    """An nbclient-style notebook (no jupyter_exec record) whose record says ``9``."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    cells = [("import numpy as np\nnp.int64(4) + 5", "9"), ("np.int64(4) + 6", "11.0")]
    for source, text in cells:
        cell = nbformat.v4.new_code_cell(source, execution_count=1)
        cell.outputs = [nbformat.v4.new_output("execute_result", {"text/plain": text})]
        nb.cells.append(cell)
    path = tmp_path / "elsewhere.ipynb"
    nbformat.write(nb, path)
    report = replay(path)
    assert [c.status for c in report.cells] == ["equivalent", "different"]
    reason = f"numpy-scalar-repr (numpy not recorded, {numpy.__version__} here)"
    assert report.cells[0].reasons == (reason,)
    assert reason in report.extra["environment"]["repr_rules"]


def test_every_entry_has_a_pair() -> None:
    assert {b.name for b in BRIDGES} == {name for name, *_ in PAIRS}


def test_an_entry_needs_the_versions_on_the_two_sides_of_its_change() -> None:
    scalar = next(b for b in BRIDGES if b.name == "numpy-scalar-repr")
    assert scalar.bridges("1.26.4", "2.0.0")
    assert scalar.bridges("2.4.6", "1.21.0")  # a record newer than the replay
    assert not scalar.bridges("2.0.1", "2.4.6")
    assert not scalar.bridges("1.24.0", "1.26.4")
    assert not scalar.bridges("unknown", "2.4.6")
    # matplotlib 3.2 already had the Figure repr: the hist container and the Axes entries
    # bridge 3.9, not the Figure one.
    names = [
        b.bridge.name
        for b in active_bridges(
            {"packages": {"matplotlib": "3.2.2"}}, {"packages": {"matplotlib": "3.9.0"}}
        )
    ]
    assert names == [
        "matplotlib-hist-container-repr",
        "matplotlib-axes-repr",
        "object-repr-form",
        "matplotlib-inline-backend-name",
    ]


def test_a_record_newer_than_the_replay_is_rewritten_on_its_own_side() -> None:
    bridges = active_bridges(NEW, OLD)  # recorded with NumPy 2, replayed with NumPy 1
    found = compare_outputs(shown("np.int64(9)"), shown("9"), bridges=bridges)
    assert found.verdict == "equivalent"
    assert compare_outputs(shown("np.int64(9)"), shown("10"), bridges=bridges).verdict == (
        "different"
    )


def test_a_repr_in_a_stream_is_bridged_and_a_line_break_is_not_crossed() -> None:
    def out(text: str) -> list[dict[str, Any]]:
        return [{"output_type": "stream", "name": "stdout", "text": text}]

    bridges = active_bridges(OLD, NEW)
    assert compare_outputs(out("n = 9\n"), out("n = np.int64(9)\n"), bridges=bridges).verdict == (
        "equivalent"
    )
    split = compare_outputs(out("n = 9\n"), out("n = np.int64(\n9)\n"), bridges=bridges)
    assert split.verdict == "different"


def test_a_replay_of_a_numpy_1_record_is_equivalent_with_the_entry_named(
    tmp_path: Path,
) -> None:
    with Session(work_dir=tmp_path, name="np") as session:
        session.execute("import numpy as np\nnp.int64(4) + 5")
        session.execute("np.int64(4) + 6")
    path = tmp_path / "np.ipynb"
    raw = json.loads(path.read_text())
    environment = raw["metadata"]["jupyter_exec"]["environment"]
    assert environment["packages"]["numpy"] == numpy.__version__
    here = numpy.__version__
    environment["packages"]["numpy"] = "1.26.4"  # as if recorded with NumPy 1
    raw["cells"][0]["outputs"][0]["data"]["text/plain"] = "9"
    raw["cells"][1]["outputs"][0]["data"]["text/plain"] = "12"  # a changed value
    path.write_text(json.dumps(raw))
    report = replay(path)
    assert [c.status for c in report.cells] == ["equivalent", "different"]
    reason = f"numpy-scalar-repr (numpy 1.26.4 recorded, {here} here)"
    assert report.cells[0].reasons == (reason,)
    assert reason in report.extra["environment"]["repr_rules"]
    # The same record with the versions here: the entries are off.
    environment["packages"]["numpy"] = here
    path.write_text(json.dumps(raw))
    again = replay(path, output=tmp_path / "again.ipynb")
    assert [c.status for c in again.cells] == ["different", "different"]
    assert again.extra["environment"]["repr_rules"] == []


def test_a_rewrite_that_keeps_every_value_reads_either_side() -> None:
    # A record made in between (its hist already a BarContainer) beside a changed NumPy repr.
    bridges = active_bridges(OLD, NEW)
    record = "(9, <BarContainer object of 10 artists>)"
    assert compare_outputs(
        shown(record), shown("(np.int64(9), <BarContainer object of 10 artists>)"), bridges=bridges
    ).verdict == ("equivalent")
    assert compare_outputs(
        shown(record), shown("(np.int64(9), <BarContainer object of 11 artists>)"), bridges=bridges
    ).verdict == ("different")
    # The figure's rewrite drops its size and Axes: never applied to the older side.
    figure = "(9, <Figure size 640x480 with 1 Axes>)"
    two = "(np.int64(9), <Figure size 640x480 with 2 Axes>)"
    assert compare_outputs(shown(figure), shown(two), bridges=bridges).verdict == "different"
