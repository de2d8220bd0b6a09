"""Plots judged as plots: the same figure re-rendered is equivalent, a plot of other data is not.

Figures are rendered by matplotlib (Agg) twice, with other settings (font family, text and
line anti-aliasing, line width, line colour) or other data; the last test replays a real
notebook whose record was drawn in another style.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import matplotlib
import numpy as np
import pytest
from cycler import cycler
from PIL import Image

from jupyter_exec import Session
from jupyter_exec.notebook.compare import ImageTolerance, compare_outputs
from jupyter_exec.notebook.images import plot_match, svg_pixels
from jupyter_exec.notebook.replay import replay

matplotlib.use("agg")
import matplotlib.pyplot as plt

RESTYLED: dict[str, Any] = {
    "font.family": "monospace",
    "text.antialiased": False,
    "lines.antialiased": False,
    "lines.linewidth": 1.8,
    "axes.prop_cycle": cycler(color=["#d62728"]),
}

UNFILLED: dict[str, Any] = {k: v for k, v in RESTYLED.items() if k != "axes.prop_cycle"}
"""The restyling without the colour: what changes strokes and glyphs, not fills."""


SIZE = (6.4, 4.8)
"""The figure size in inches; the plots are drawn at 72 dpi unless a test says otherwise."""


def line_plot(
    y: Callable[[Any], Any], *, size: tuple[float, float] = SIZE, dpi: int = 72, **style: Any
) -> bytes:
    with _styled(style):
        figure, axes = plt.subplots(figsize=size, dpi=dpi)
        x = np.linspace(0, 10, 50)
        axes.plot(x, y(x))
        axes.set_title("signal")
        axes.set_xlabel("time")
        return _png(figure)


def bar_plot(heights: list[float], *, dpi: int = 72, **style: Any) -> bytes:
    with _styled(style):
        figure, axes = plt.subplots(figsize=SIZE, dpi=dpi)
        axes.bar(range(len(heights)), heights)
        return _png(figure)


def heat_map(seed: int, *, dpi: int = 72, **style: Any) -> bytes:
    with _styled(style):
        figure, axes = plt.subplots(figsize=SIZE, dpi=dpi)
        axes.imshow(np.random.default_rng(seed).random((8, 8)))
        return _png(figure)


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()


def _styled(style: dict[str, Any]) -> Any:
    return plt.rc_context(cast(Any, style))


def shown(png: bytes) -> list[dict[str, Any]]:
    data = {"image/png": base64.b64encode(png).decode(), "text/plain": "<Figure>"}
    return [{"output_type": "display_data", "data": data, "metadata": {}}]


def test_the_same_line_plot_in_another_style_is_equivalent_with_its_score() -> None:
    before, after = line_plot(np.sin), line_plot(np.sin, **RESTYLED)
    assert before != after
    found = compare_outputs(shown(before), shown(after))
    assert found.verdict == "equivalent"
    (reason,) = found.reasons
    assert reason.startswith("[output 1: image/png] the same plot re-rendered: plot score 0.99")
    match = plot_match(before, after)
    assert match is not None
    assert 0.99 <= match.score < 1.0  # other pixels, the same strokes
    assert f"{match.score:.4f}" in reason


@pytest.mark.parametrize(
    "other",
    [np.cos, lambda x: np.sin(x) * 1.1, lambda x: np.sin(x + 0.3)],
    ids=["cos", "amplitude 1.1", "phase 0.3"],
)
def test_a_line_plot_of_other_data_is_different_in_any_style(other: Callable[[Any], Any]) -> None:
    for style in ({}, RESTYLED):
        found = compare_outputs(shown(line_plot(np.sin)), shown(line_plot(other, **style)))
        assert found.verdict == "different"
        assert "plot score" in found.notes[0]


def test_bars_and_image_cells_are_judged_by_their_fills() -> None:
    heights = [3.0, 1.0, 4.0, 1.5, 5.0]
    found = compare_outputs(shown(bar_plot(heights)), shown(bar_plot(heights, **UNFILLED)))
    assert found.verdict == "equivalent"
    # Bars filled in another colour are not taken for the same plot (a fill's colour can
    # be its value, as in an image plot).
    recoloured = compare_outputs(shown(bar_plot(heights)), shown(bar_plot(heights, **RESTYLED)))
    assert recoloured.verdict == "different"
    taller = [3.0, 1.0, 4.0, 1.5, 5.2]
    assert compare_outputs(shown(bar_plot(heights)), shown(bar_plot(taller))).verdict == (
        "different"
    )
    # The same geometry with other values: the colours of the cells tell them apart.
    same_map = compare_outputs(shown(heat_map(1)), shown(heat_map(1, **RESTYLED)))
    assert same_map.verdict == "equivalent"
    other_map = compare_outputs(shown(heat_map(1)), shown(heat_map(2)))
    assert other_map.verdict == "different"
    assert "fills in the same colour: " in other_map.notes[0]


def test_the_same_plot_at_another_dpi_is_equivalent_at_a_common_size_with_its_score() -> None:
    """The old inline backend drew at 72 dpi, matplotlib-inline 0.1.4 and later at 100."""
    draws: tuple[Callable[[int], bytes], ...] = (
        lambda dpi: line_plot(np.sin, dpi=dpi),
        lambda dpi: bar_plot([3.0, 1.0, 4.0, 1.5, 5.0], dpi=dpi),
        lambda dpi: heat_map(1, dpi=dpi),
    )
    for draw in draws:
        before, after = draw(72), draw(100)
        found = compare_outputs(shown(before), shown(after))
        assert found.verdict == "equivalent", found.notes
        (reason,) = found.reasons
        assert "the same plot re-rendered: plot score" in reason
        assert "scaled: content " in reason
        match = plot_match(before, after)
        assert match is not None
        assert match.scaled is not None
        assert match.score >= 0.99
        (wa, ha), (wb, _), common = match.scaled
        assert wb > wa * 1.3  # 100/72: well beyond the few percent aligned as they are
        assert common == (wa, ha)  # the larger brought down to the smaller


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            lambda: bar_plot([3.0, 1.0, 4.0, 1.5, 5.0], dpi=72),
            lambda: bar_plot([3.0, 1.0, 4.0, 1.5, 5.2], dpi=100),
        ),
        (
            lambda: bar_plot([3.0, 1.0, 4.0, 1.5, 5.0], dpi=72),
            lambda: bar_plot([3.0, 1.0, 4.3, 1.5, 5.0], dpi=100),
        ),
        (lambda: line_plot(np.sin, dpi=72), lambda: line_plot(lambda x: np.sin(x) * 1.1, dpi=100)),
        (lambda: line_plot(np.sin, dpi=72), lambda: line_plot(lambda x: np.sin(x + 0.3), dpi=100)),
        (lambda: heat_map(1, dpi=72), lambda: heat_map(2, dpi=100)),
    ],
    ids=["last bar 5.2", "middle bar 4.3", "amplitude 1.1", "phase 0.3", "other heat map"],
)
def test_a_plot_of_other_data_at_another_dpi_stays_different(
    before: Callable[[], bytes], after: Callable[[], bytes]
) -> None:
    found = compare_outputs(shown(before()), shown(after()))
    assert found.verdict == "different"
    assert "plot score" in found.notes[0]
    assert "scaled: content " in found.notes[0]


def test_the_same_data_in_a_figure_of_another_shape_stays_different() -> None:
    """Same data, same dpi or not: a wider figure changes every slope, so it is another
    picture, never compared at a common size."""
    square = line_plot(np.sin, size=(4.8, 4.8), dpi=100)
    for other in (line_plot(np.sin, dpi=72), line_plot(np.sin, size=(8.0, 4.8), dpi=72)):
        found = compare_outputs(shown(square), shown(other))
        assert found.verdict == "different"
        assert "image size" in found.notes[0]
        assert plot_match(square, other) is None
    # A thumbnail against a poster: too little is left of the larger at the common size.
    assert plot_match(line_plot(np.sin, dpi=72), line_plot(np.sin, dpi=250)) is not None
    assert plot_match(line_plot(np.sin, dpi=50), line_plot(np.sin, dpi=250)) is None


def test_plots_are_judged_by_pixels_only_when_asked_and_small_images_always() -> None:
    before, after = line_plot(np.sin), line_plot(np.sin, **RESTYLED)
    exact = compare_outputs(
        shown(before), shown(after), image_tolerance=ImageTolerance(plot_score=None)
    )
    assert exact.verdict == "different"
    assert compare_outputs(
        shown(before), shown(after), image_tolerance=ImageTolerance(plot_score=1.0)
    ).verdict == ("different")
    with pytest.raises(ValueError, match="plot score"):
        ImageTolerance(plot_score=1.5)
    assert plot_match(before, b"not an image") is None
    with Image.open(io.BytesIO(before)) as image:
        wider = io.BytesIO()
        image.resize((image.width * 11 // 10, image.height)).save(wider, "PNG")
        padded = io.BytesIO()
        canvas = Image.new("RGBA", (image.width + 6, image.height + 3), "white")
        canvas.paste(image, (6, 0))  # a tight bounding box grew on the left
        canvas.save(padded, "PNG")
    # 10% wider, its glyphs too: no figure draws its text stretched, so matched by the axes
    # frame its labels are unlike
    stretched = plot_match(before, wider.getvalue())
    assert stretched is not None
    assert stretched.framed is not None
    assert stretched.score < 0.99
    assert stretched.framed.texts[0] < stretched.framed.texts[1]
    aligned = plot_match(before, padded.getvalue())
    assert aligned is not None
    assert aligned.score == 1.0
    tiny = [Image.new("RGB", (20, 20), "white") for _ in range(2)]
    tiny[1].putpixel((3, 3), (0, 0, 0))
    encoded = []
    for image in tiny:
        buffer = io.BytesIO()
        image.save(buffer, "PNG")
        encoded.append(buffer.getvalue())
    assert plot_match(*encoded) is None  # an icon, not a plot


def test_a_replay_of_a_plot_recorded_in_another_style_is_equivalent(tmp_path: Path) -> None:
    setup = "import matplotlib.pyplot as plt, numpy as np\nx = np.linspace(0, 10, 50)\n"
    with Session(work_dir=tmp_path, name="plots") as session:
        session.execute(setup + f"plt.rcParams.update({UNFILLED!r})")
        for y in ("np.sin(x)", "np.cos(x)"):
            drawn = session.execute(f"plt.plot(x, {y}); plt.title('signal');")
            assert drawn.results[0].png
    path = tmp_path / "plots.ipynb"
    raw = json.loads(path.read_text())
    raw["cells"][0]["source"] = setup  # the replay draws in the default style
    raw["cells"][2]["source"] = "plt.plot(x, np.sin(x) * 1.1); plt.title('signal');"
    path.write_text(json.dumps(raw))
    report = replay(path)
    assert [c.status for c in report.cells] == ["same", "equivalent", "different"]
    assert "the same plot re-rendered: plot score" in report.cells[1].reasons[0]
    assert "plot score" in report.cells[2].notes[0]


# -- the same plot in a figure of another shape: matched by its axes frame -------------------

OLD_INLINE: dict[str, Any] = {"size": (6.0, 4.0), "dpi": 72}
"""The inline backend's default figure until matplotlib-inline 0.1.4."""
NEW_INLINE: dict[str, Any] = {"size": (6.4, 4.8), "dpi": 100}
"""matplotlib's default figure, which the inline backend draws since."""


def framed_plot(kind: str, data: Any, *, size: tuple[float, float], dpi: int) -> bytes:
    """A line, bar or image plot with a title, axis labels and (line, bars) a legend."""
    figure, axes = plt.subplots(figsize=size, dpi=dpi)
    if kind == "line":
        x = np.linspace(0, 10, 50)
        axes.plot(x, data(x), "o-", markersize=3, label="signal")
    elif kind == "bars":
        axes.bar(range(len(data)), data, label="heights")
    else:
        axes.imshow(np.random.default_rng(data).random((8, 8)))
    axes.set_title(kind)
    axes.set_xlabel("x")
    if kind != "heat map":
        axes.legend(loc="upper right")
    return _png(figure)


def test_the_same_plot_in_the_old_inline_figure_is_equivalent_by_its_axes_frame() -> None:
    """6x4 in at 72 dpi against 6.4x4.8 in at 100: contents of other aspect ratios (1.5 and
    1.33), the same data in the same axes: frame onto frame, labels and legend by the dpi."""
    for kind, data in (("line", np.sin), ("bars", [3.0, 1.0, 4.0, 1.5, 5.0])):
        before = framed_plot(kind, data, **OLD_INLINE)
        after = framed_plot(kind, data, **NEW_INLINE)
        found = compare_outputs(shown(before), shown(after))
        assert found.verdict == "equivalent", (kind, found.notes)
        (reason,) = found.reasons
        assert "the same plot re-rendered: plot score" in reason
        assert "matched by axes frame: frame " in reason
        match = plot_match(before, after)
        assert match is not None
        assert match.framed is not None
        assert match.score >= 0.99
        alike, blocks = match.framed.texts
        assert alike == blocks > 10  # every tick label, the title, the legend
        assert 0.6 < match.framed.text_scale < 0.8  # 72 / 100, nearly


@pytest.mark.parametrize(
    ("kind", "before", "after"),
    [
        ("bars", [3.0, 1.0, 4.0, 1.5, 5.0], [3.0, 1.0, 4.0, 1.5, 5.2]),
        ("bars", [3.0, 1.0, 4.0, 1.5, 5.0], [3.0, 1.0, 4.3, 1.5, 5.0]),
        ("line", np.sin, lambda x: np.sin(x) * 1.1),
        ("line", np.sin, lambda x: np.sin(x + 0.3)),
        ("heat map", 1, 2),
        # The same picture inside the frame, other numbers on the axis: only the tick
        # labels tell them apart.
        ("line", np.sin, lambda x: np.sin(x) * 2),
        ("bars", [3.0, 1.0, 4.0, 1.5, 5.0], [6.0, 2.0, 8.0, 3.0, 10.0]),
    ],
    ids=[
        "last bar 5.2",
        "middle bar 4.3",
        "amplitude 1.1",
        "phase 0.3",
        "other heat map",
        "y twice: tick labels",
        "bars twice: tick labels",
    ],
)
def test_a_plot_of_other_data_in_the_old_inline_figure_stays_different(
    kind: str, before: Any, after: Any
) -> None:
    found = compare_outputs(
        shown(framed_plot(kind, before, **OLD_INLINE)),
        shown(framed_plot(kind, after, **NEW_INLINE)),
    )
    assert found.verdict == "different"
    assert "plot score" in found.notes[0]


def test_a_legend_that_moved_or_a_figure_of_far_other_shape_is_not_the_same_plot() -> None:
    """Matched by the frame only when the frames' aspect ratios agree within 25% (a square
    plot against a wide one: 33%), and a legend where the other side has none is unlike."""
    x = np.linspace(0, 10, 50)

    def legend_at(where: Any, **figure: Any) -> bytes:
        drawn, axes = plt.subplots(figsize=figure["size"], dpi=figure["dpi"])
        axes.plot(x, np.sin(x), label="signal")
        axes.legend(loc=where)
        return _png(drawn)

    moved = plot_match(
        legend_at("upper right", **OLD_INLINE), legend_at("lower left", **NEW_INLINE)
    )
    assert moved is not None
    assert moved.framed is not None
    assert moved.score < 0.99
    square = framed_plot("line", np.sin, size=(4.8, 4.8), dpi=100)
    assert plot_match(square, framed_plot("line", np.sin, **OLD_INLINE)) is None


# -- SVG drawn and judged as a plot ----------------------------------------------------------


def svg_plot(data: Any, *, size: tuple[float, float]) -> str:
    figure, axes = plt.subplots(figsize=size)
    axes.plot([0, 1, 2, 3, 4, 5], data)
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    plt.close(figure)
    return buffer.getvalue()


def svg_shown(text: str) -> list[dict[str, Any]]:
    data = {"image/svg+xml": text, "text/plain": "<Figure>"}
    return [{"output_type": "display_data", "data": data, "metadata": {}}]


def test_an_svg_plot_in_another_figure_shape_is_drawn_and_equivalent() -> None:
    """nbconvert's svg.ipynb: matplotlib 1.x's SVG in the 6x4 in figure against today's in
    6.4x4.8: other ids, style attributes and coordinates; the same picture when drawn."""
    heights = [0, 3, 4, 4, 3, 0]
    before, after = svg_plot(heights, size=(6.0, 4.0)), svg_plot(heights, size=(6.4, 4.8))
    found = compare_outputs(svg_shown(before), svg_shown(after))
    assert found.verdict == "equivalent", found.notes
    (reason,) = found.reasons
    assert reason.startswith("[output 1: image/svg+xml] SVG drawn (resvg): the same plot")
    assert "matched by axes frame" in reason
    again = compare_outputs(svg_shown(before), svg_shown(svg_plot(heights, size=(6.0, 4.0))))
    assert again.verdict in ("same", "equivalent")  # ids and the date differ, not the picture


def test_an_svg_plot_of_other_data_stays_different_and_svg_text_is_never_drawn() -> None:
    before = svg_plot([0, 3, 4, 4, 3, 0], size=(6.0, 4.0))
    other = svg_plot([0, 3, 4, 4.4, 3, 0], size=(6.4, 4.8))
    found = compare_outputs(svg_shown(before), svg_shown(other))
    assert found.verdict == "different"
    assert found.reasons == ()
    # Text elements draw as nothing without the fonts: such an SVG is compared as XML.
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="40">{}</svg>'
    words = svg.format(90, '<text x="5" y="20">{}</text>')
    assert svg_pixels(words.format(42)) is None
    assert compare_outputs(svg_shown(words.format(42)), svg_shown(words.format(43))).verdict == (
        "different"
    )
    # Sizes the drawing cannot take at face value, or too large: not drawn.
    box = svg.format("{}", '<rect width="9" height="9"/>')
    assert svg_pixels(box.format(90)) is not None
    assert svg_pixels(box.format("100%")) is None
    assert svg_pixels(box.format(90_000)) is None
    assert (
        compare_outputs(
            svg_shown(before),
            svg_shown(svg_plot([0, 3, 4, 4, 3, 0], size=(6.4, 4.8))),
            image_tolerance=ImageTolerance(plot_score=None),
        ).verdict
        == "different"
    )  # plots judged by pixels only: SVG as XML only
