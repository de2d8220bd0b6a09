"""The in-kernel chart and data reading, in this process (no kernel): the edges a sandbox test
would not reach cheaply - limits, blank figures, values JSON cannot hold."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from jupyter_exec.e2b.kernel_formats import (  # noqa: E402
    CHART_MIME,
    DATA_MIME,
    MAX_DATA_CELLS,
    MAX_POINTS,
    figure_chart,
    frame_data,
    install,
)


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def test_a_blank_figure_has_no_chart_and_too_many_points_none_either() -> None:
    assert figure_chart(plt.figure()) is None
    figure = plt.figure()
    plt.plot(np.arange(MAX_POINTS + 1))
    assert figure_chart(figure) is None
    figure = plt.figure()
    plt.plot(np.arange(10))
    assert figure_chart(figure) is not None


def test_values_json_cannot_hold_become_null_or_text() -> None:
    figure = plt.figure()
    plt.plot([0, 1, 2], [1.0, float("nan"), float("inf")], label="gaps")
    chart = figure_chart(figure)
    assert chart is not None
    assert chart["elements"][0]["points"] == [[0.0, 1.0], [1.0, None], [2.0, None]]
    json.dumps(chart, allow_nan=False)  # strict JSON: what the kernel's messages carry
    figure = plt.figure()
    plt.plot(np.array(["2024-01-01", "2024-01-02"], dtype="datetime64[D]"), [1, 2])
    dated = figure_chart(figure)
    assert dated is not None
    assert dated["x_scale"] == "datetime"
    assert [x for x, _ in dated["elements"][0]["points"]] == [
        "2024-01-01T00:00:00", "2024-01-02T00:00:00",
    ]  # fmt: skip
    assert datetime.datetime.fromisoformat(dated["x_ticks"][0])


def test_frame_data_limits_and_values() -> None:
    assert frame_data(pd.DataFrame({"x": range(MAX_DATA_CELLS + 1)})) is None
    frame = pd.DataFrame({1: [1.5, None], "t": pd.to_datetime(["2024-05-06", None])})
    data = frame_data(frame)
    assert data is not None
    assert data["1"] == [1.5, None]
    assert data["t"][0].startswith("2024-05-06")
    assert data["t"][1] is None


def test_install_adds_both_formats_to_a_shell() -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    install(shell)
    try:
        figure = plt.figure()
        plt.bar(["a"], [1])
        bundle, _ = shell.display_formatter.format(figure)
        assert bundle[CHART_MIME]["type"] == "bar"
        assert DATA_MIME not in bundle
        bundle, _ = shell.display_formatter.format(pd.DataFrame({"a": [1]}))
        assert bundle[DATA_MIME] == {"a": [1]}
        assert CHART_MIME not in bundle
    finally:  # the shell is this process's singleton: leave it as found
        for mime in (CHART_MIME, DATA_MIME):
            shell.display_formatter.formatters.pop(mime, None)
