"""Code that runs inside an E2B sandbox's kernel: chart data from matplotlib figures, and a
DataFrame's columns, as extra display formats (the SDK's ``Result.chart`` and ``Result.data``).

Why in the kernel: only the kernel holds the figure. When IPython displays a
:class:`matplotlib.figure.Figure` (``plt.show()``, a figure as a cell's last
value), every display formatter is asked for its format; this module adds two
of them, so the figure's PNG and its data leave the kernel in one bundle:

* :data:`CHART_MIME`: what kind of chart each axes draws (line, scatter, bar,
  pie, box-and-whisker; a figure of several axes is a ``superchart``), its
  title, axis labels and units, ticks and scale, and its elements, in the
  shapes ``e2b_code_interpreter.charts`` reads;
* :data:`DATA_MIME`: a small ``pandas.DataFrame`` as ``{column: [values]}``.

Both are vendor JSON types, so the session's notebook stays valid nbformat
(E2B's own kernel uses ``e2b/chart`` and ``e2b/data``, whose dict values
nbformat refuses). The E2B server maps both to the SDK's fields
(:mod:`jupyter_exec.e2b.protocol`). Nothing is imported before a figure or a
frame exists, and a figure that cannot be read gets no chart, never an error.
The server loads this file (and :mod:`jupyter_exec.e2b.kernel_images`) through
:mod:`jupyter_exec.e2b.kernel_startup`; it needs the standard library and IPython only.
"""

from __future__ import annotations

import datetime
import math
import re
import sys
from typing import Any

__all__ = ["CHART_MIME", "DATA_MIME", "MAX_DATA_CELLS", "MAX_POINTS", "figure_chart",
           "frame_data", "install"]  # fmt: skip

CHART_MIME = "application/vnd.e2b.chart+json"
DATA_MIME = "application/vnd.e2b.data+json"
MAX_POINTS = 100_000
"""A figure with more points than this gets no chart (its PNG is still shown)."""
MAX_DATA_CELLS = 10_000
"""A DataFrame with more cells than this gets no ``data`` (its HTML is still shown)."""

_UNIT = re.compile(r"\s\(([^)]*)\)|\[([^\]]*)\]")

Chart = dict[str, Any]


# -- values -------------------------------------------------------------------------------------


def _value(value: Any) -> Any:
    """One data value as JSON: numbers as floats, dates as ISO text, anything else as text."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if type(value).__name__ == "datetime64":
        return str(value.astype("datetime64[s]"))
    if isinstance(value, str):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None


def _rounded(value: Any) -> float:
    """A float without the noise of the arithmetic that drew it (10 significant digits)."""
    return float(f"{float(value):.10g}")


def _text(value: str) -> str | None:
    return value or None


# -- axes ---------------------------------------------------------------------------------------


def _num2date(value: float) -> Any:
    from matplotlib import dates

    convert: Any = dates.num2date  # untyped in matplotlib
    return convert(value)


def _is_dates(axis: Any) -> bool:
    from matplotlib import dates

    return isinstance(axis.get_major_locator(), dates.DateLocator)


def _scale(axis: Any, scale: str) -> str:
    from matplotlib import category

    if _is_dates(axis):
        return "datetime"
    if isinstance(axis.get_major_locator(), category.StrCategoryLocator):
        return "categorical"
    return scale


def _ticks(axis: Any) -> list[Any]:
    if _is_dates(axis):
        return [_num2date(t).isoformat() for t in axis.get_ticklocs()]
    return [float(t) for t in axis.get_ticklocs()]


def _labels(ax: Any) -> dict[str, Any]:
    """Title, axis labels and the units written in them (``"Time (s)"``, ``"Power [W]"``)."""
    chart: dict[str, Any] = {"title": _title(ax)}
    for name, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
        match = _UNIT.search(label or "")
        chart[f"{name}_label"] = _text(label)
        chart[f"{name}_unit"] = (match.group(1) or match.group(2)) if match else None
    return chart


def _title(ax: Any) -> str | None:
    return _text(ax.get_title()) or _text(ax.get_title("left")) or _text(ax.get_title("right"))


def _swapped(chart: Chart) -> Chart:
    """Labels of a sideways chart swapped, so ``x`` is always the category axis."""
    for a, b in (("x_label", "y_label"), ("x_unit", "y_unit")):
        chart[a], chart[b] = chart[b], chart[a]
    return chart


def _is_rule(line: Any) -> bool:
    """A two-point horizontal or vertical line: a rule (``axhline``), not data."""
    x, y = line.get_xdata(), line.get_ydata()
    return len(x) == 2 and len(y) == 2 and (x[0] == x[1] or y[0] == y[1])


def _name(label: str, kind: str, index: int) -> str:
    """An artist's label, or ``"<kind> <n>"`` for matplotlib's hidden default ones."""
    return f"{kind} {index}" if not label or label.startswith("_") else label


# -- one chart per axes -------------------------------------------------------------------------


def _kind(ax: Any) -> str:
    from matplotlib.collections import PathCollection
    from matplotlib.patches import PathPatch, Rectangle, Wedge

    lines = [line for line in ax.lines if not _is_rule(line)]
    patches, collections = list(ax.patches), list(ax.collections)
    if ax.images or ax.tables:
        return "unknown"
    if patches and all(isinstance(p, Wedge) for p in patches) and not collections:
        return "pie"
    if ax.containers and patches and all(isinstance(p, Rectangle) for p in patches):
        return "bar" if not collections else "unknown"
    if patches and all(isinstance(p, PathPatch) for p in patches) and ax.lines:
        return "box_and_whisker" if not collections else "unknown"
    if patches:
        return "unknown"
    if collections and all(isinstance(c, PathCollection) for c in collections) and not lines:
        return "scatter"
    if lines and not collections:
        return "line"
    return "unknown"


def _point_chart(ax: Any, kind: str) -> Chart:
    chart = {"type": kind, **_labels(ax), "elements": []}
    for name, axis, scale in (("x", ax.xaxis, ax.get_xscale()), ("y", ax.yaxis, ax.get_yscale())):
        chart[f"{name}_ticks"] = _ticks(axis)
        chart[f"{name}_tick_labels"] = [t.get_text() for t in axis.get_ticklabels()]
        chart[f"{name}_scale"] = _scale(axis, scale)
    if kind == "line":
        lines = [line for line in ax.lines if not _is_rule(line)]
        for i, line in enumerate(lines):
            points = [
                [_value(x), _value(y)]
                for x, y in zip(line.get_xdata(), line.get_ydata(), strict=False)
            ]
            chart["elements"].append({"label": _name(line.get_label(), "Line", i),
                                      "points": points})  # fmt: skip
    else:
        dates = {name: _is_dates(axis) for name, axis in (("x", ax.xaxis), ("y", ax.yaxis))}
        for i, collection in enumerate(ax.collections):
            points = [
                [_date_or_value(x, dates["x"]), _date_or_value(y, dates["y"])]
                for x, y in collection.get_offsets()
            ]
            chart["elements"].append({"label": _name(collection.get_label(), "Series", i),
                                      "points": points})  # fmt: skip
    return chart


def _date_or_value(value: Any, is_date: bool) -> Any:
    if is_date:
        return _num2date(float(value)).isoformat()
    return _value(value)


def _category_at(axis: Any, low: float, high: float) -> str:
    """The tick label between ``low`` and ``high`` (a bar's or a box's category)."""
    for position, label in zip(axis.get_ticklocs(), axis.get_ticklabels(), strict=False):
        if low <= position <= high:
            return str(label.get_text())
    return ""


def _bar_chart(ax: Any) -> Chart:
    chart: Chart = {"type": "bar", **_labels(ax), "elements": []}
    sideways = False
    for i, container in enumerate(ax.containers):
        rects = [r for r in container if hasattr(r, "get_height")]
        sideways = getattr(container, "orientation", "vertical") == "horizontal"
        group = _name(container.get_label(), "Group", i)
        for rect in rects:
            if sideways:
                low, high = sorted((rect.get_y(), rect.get_y() + rect.get_height()))
                label, value = _category_at(ax.yaxis, low, high), rect.get_width()
            else:
                low, high = sorted((rect.get_x(), rect.get_x() + rect.get_width()))
                label, value = _category_at(ax.xaxis, low, high), rect.get_height()
            chart["elements"].append({"label": label, "group": group, "value": _value(value)})
    return _swapped(chart) if sideways else chart


def _pie_chart(ax: Any) -> Chart:
    elements = [
        {"label": wedge.get_label(), "angle": abs(_rounded(wedge.theta2 - wedge.theta1)),
         "radius": _rounded(wedge.r)}
        for wedge in ax.patches
    ]  # fmt: skip
    return {"type": "pie", "title": _title(ax), "elements": elements}


def _box_chart(ax: Any) -> Chart:
    """Box-and-whisker statistics read back from the boxes and lines ``boxplot`` drew."""
    boxes: list[dict[str, Any]] = []
    for patch in ax.patches:
        vertices = patch.get_path().vertices
        xs, ys = [_rounded(v) for v in vertices[:, 0]], [_rounded(v) for v in vertices[:, 1]]
        boxes.append({"x": (min(xs), max(xs)), "y": (min(ys), max(ys)), "outliers": []})
    sideways = _sideways(boxes, ax.lines)
    axis = ax.yaxis if sideways else ax.xaxis
    for box in boxes:
        if sideways:
            box["x"], box["y"] = box["y"], box["x"]
        box["label"] = _category_at(axis, *box["x"])
    for line in ax.lines:
        xs = [_rounded(v) for v in line.get_xdata()]
        ys = [_rounded(v) for v in line.get_ydata()]
        if sideways:
            xs, ys = ys, xs
        for box in boxes:
            _read_line(box, xs, ys, marker=line.get_linestyle() in ("None", "", " "))
    elements = []
    for box in boxes:
        low, high = box["y"]
        elements.append({
            "label": box["label"], "min": box.get("min", low), "first_quartile": low,
            "median": box.get("median", low), "third_quartile": high,
            "max": box.get("max", high), "outliers": box["outliers"],
        })  # fmt: skip
    chart = {"type": "box_and_whisker", **_labels(ax), "elements": elements}
    return _swapped(chart) if sideways else chart


def _sideways(boxes: list[dict[str, Any]], lines: list[Any]) -> bool:
    """Whether ``vert=False`` drew the boxes: they share one height (upright ones one width),
    or, for a single box, more of its lines (whiskers one way; caps and median the other)
    are vertical than horizontal."""
    widths = {_rounded(b["x"][1] - b["x"][0]) for b in boxes}
    heights = {_rounded(b["y"][1] - b["y"][0]) for b in boxes}
    if len(boxes) > 1 and len(widths) != len(heights):
        return len(heights) < len(widths)
    two = [line for line in lines if len(line.get_xdata()) == 2 and len(line.get_ydata()) == 2]
    upright = sum(1 for line in two if line.get_ydata()[0] == line.get_ydata()[1])
    sideways = sum(1 for line in two if line.get_xdata()[0] == line.get_xdata()[1])
    return sideways > upright


def _read_line(box: dict[str, Any], xs: list[float], ys: list[float], *, marker: bool) -> None:
    """What one of ``boxplot``'s lines says about ``box``: median, a whisker or outliers."""
    left, right = box["x"]
    low, high = box["y"]
    if marker:  # fliers: points, no line
        box["outliers"].extend(y for x, y in zip(xs, ys, strict=False) if left <= x <= right)
        return
    if len(xs) != 2 or not all(left <= x <= right for x in xs):
        return
    if ys[0] == ys[1] and low <= ys[0] <= high and xs[0] != xs[1]:
        box["median"] = ys[0]
    elif xs[0] == xs[1] and ys[0] != ys[1]:  # a whisker: from the box's edge outwards
        if max(ys) == low:
            box["min"] = min(ys)
        elif min(ys) == high:
            box["max"] = max(ys)


def axes_chart(ax: Any) -> Chart:
    """The chart one axes draws (``type`` ``"unknown"`` with no elements if it is none of ours)."""
    kind = _kind(ax)
    if kind in ("line", "scatter"):
        return _point_chart(ax, kind)
    if kind == "bar":
        return _bar_chart(ax)
    if kind == "pie":
        return _pie_chart(ax)
    if kind == "box_and_whisker":
        return _box_chart(ax)
    return {"type": "unknown", "title": _title(ax), "elements": []}


def _points(chart: Chart) -> int:
    elements = chart.get("elements") or []
    return sum(len(e.get("points", ())) if isinstance(e, dict) else 1 for e in elements) + sum(
        _points(e) for e in elements if isinstance(e, dict) and "type" in e
    )


def figure_chart(figure: Any) -> Chart | None:
    """The chart data of a figure, or ``None`` (no axes with data, or too many points)."""
    axes = [ax for ax in figure.get_axes() if ax.has_data()]
    if not axes:
        return None
    if len(axes) == 1:
        chart = axes_chart(axes[0])
    else:
        suptitle = getattr(figure, "_suptitle", None)
        title = _text(suptitle.get_text()) if suptitle is not None else None
        chart = {"type": "superchart", "title": title, "elements": [axes_chart(a) for a in axes]}
    return chart if _points(chart) <= MAX_POINTS else None


def frame_data(frame: Any) -> dict[str, list[Any]] | None:
    """A small DataFrame as ``{column: [values]}`` (dates as ISO text, NaN as null)."""
    if frame.size > MAX_DATA_CELLS:
        return None
    import json

    return {
        str(name): json.loads(frame[name].to_json(orient="values", date_format="iso"))
        for name in frame.columns
    }


# -- the formatter ------------------------------------------------------------------------------


def _format(obj: Any, mime: str) -> Any:
    """``obj`` in format ``mime`` (a figure's chart, a frame's data), or ``None``; never raises."""
    try:
        if mime == DATA_MIME:
            pandas = sys.modules.get("pandas")
            return frame_data(obj) if pandas and isinstance(obj, pandas.DataFrame) else None
        if mime == CHART_MIME and "matplotlib" in sys.modules:
            from matplotlib.figure import Figure

            return figure_chart(obj) if isinstance(obj, Figure) else None
    except Exception:
        return None
    return None


def install(shell: Any = None) -> None:
    """Register the two formats with IPython's display formatter (once per kernel)."""
    ipython = sys.modules.get("IPython")
    shell = shell or (ipython.get_ipython() if ipython is not None else None)
    if shell is None:  # PYTHONSTARTUP read by a plain ``python`` the kernel started
        return
    from IPython.core.formatters import BaseFormatter

    display = shell.display_formatter

    class ExtraFormat(BaseFormatter):
        """One of this module's formats: the object's value for it, or ``None``."""

        def __call__(self, obj: Any) -> Any:
            return _format(obj, self.format_type) if self.enabled else None

    for mime in (CHART_MIME, DATA_MIME):
        if mime not in display.formatters:
            display.formatters[mime] = ExtraFormat(parent=display, format_type=mime)
