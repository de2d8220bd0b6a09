"""Plots whose axis limits changed, matched in data coordinates (notebook/datamap.py).

matplotlib 1.x's classic style (axes fitted to the data, tick labels overhanging the frame's
corners, 6x4 in at 72 dpi in the old inline figure) against 2.0's (5% data margins, 6.4x4.8
in at 100 dpi): the figures are drawn here by matplotlib in both styles, the same data and
other data, and judged. The same data are equivalent by the rule "matched by data
coordinates"; other data, another scale the tick labels tell, a moved legend, or axes much
wider stay different.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from typing import Any, cast

import matplotlib
import numpy as np
import pytest

from jupyter_exec.notebook.compare import compare_outputs
from jupyter_exec.notebook.datamap import remapped
from jupyter_exec.notebook.frames import _layout
from jupyter_exec.notebook.images import PLOT_SCORE, _flat, plot_match

matplotlib.use("agg")
import matplotlib.pyplot as plt
from PIL import Image

Curve = Callable[[Any], Any]

CLASSIC: dict[str, Any] = {"style": "classic", "size": (6.0, 4.0), "dpi": 72}
"""matplotlib 1.x's look in the inline backend's old figure."""
DEFAULT: dict[str, Any] = {"style": "default", "size": (6.4, 4.8), "dpi": 100}
"""matplotlib 2.0 and later, in its own figure."""
RETINA = ({**CLASSIC, "dpi": 144}, {**DEFAULT, "dpi": 200})
"""The same at twice the resolution (the corpus's record: ``figure_formats = {'retina'}``)."""

UNIT = np.linspace(0, 1, 50)
TEN = np.linspace(0, 10, 50)


def peak(centre: float, height: float = 1.0) -> Curve:
    return lambda x: height * np.exp(-((x - centre) ** 2))


def drawn(
    y: Curve,
    *,
    style: str,
    size: tuple[float, float],
    dpi: int,
    x: Any = UNIT,
    titled: bool = False,
    legend: str | None = None,
    xlim: tuple[float, float] | None = None,
) -> bytes:
    """``y`` over ``x`` in ``style``, saved as the inline backend does (a tight box)."""
    with plt.style.context(style):
        figure, axes = plt.subplots(figsize=size, dpi=dpi)
        axes.plot(x, y(x), label="signal")
        if titled:
            axes.set_title("signal")
            axes.set_xlabel("time")
        if legend is not None:
            axes.legend(loc=cast(Any, legend))
        if xlim is not None:
            axes.set_xlim(*xlim)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", bbox_inches="tight")
        plt.close(figure)
        return buffer.getvalue()


def shown(png: bytes) -> list[dict[str, Any]]:
    data = {"image/png": base64.b64encode(png).decode(), "text/plain": "<Figure>"}
    return [{"output_type": "display_data", "data": data, "metadata": {}}]


@pytest.mark.parametrize(
    ("y", "x", "options", "figures"),
    [
        (lambda x: 1 - x, UNIT, {}, (CLASSIC, DEFAULT)),
        (lambda x: 1 - x, UNIT, {}, RETINA),
        (peak(5.0), TEN, {}, (CLASSIC, DEFAULT)),
        (lambda x: 1 - x, UNIT, {"titled": True}, (CLASSIC, DEFAULT)),
    ],
    ids=["line (the corpus's plot)", "line, retina", "a peak", "with a title and a label"],
)
def test_the_same_data_in_the_classic_style_and_2_0_s_are_equivalent_by_data_coordinates(
    y: Curve, x: Any, options: dict[str, Any], figures: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    before = drawn(y, x=x, **options, **figures[0])
    after = drawn(y, x=x, **options, **figures[1])
    found = compare_outputs(shown(before), shown(after))
    assert found.verdict == "equivalent", found.notes
    (reason,) = found.reasons
    assert "the same plot re-rendered: plot score" in reason
    assert "matched by data coordinates: axis limits changed" in reason
    match = plot_match(before, after)
    assert match is not None
    assert match.remapped is not None
    assert match.score >= PLOT_SCORE
    assert f"{match.score:.4f}" in reason
    # 2.0's 5% margins on each side: the replay's axes span 1.1 times the record's data
    for span in match.remapped.spans:
        assert 1.05 < span < 1.12
    alike, blocks = match.remapped.texts
    assert alike == blocks >= 20  # the tick labels of both axes, both sides
    assert match.remapped.labels >= 8


@pytest.mark.parametrize(
    ("before", "after", "x", "options"),
    [
        (lambda x: 1 - x, lambda x: 1 - 0.9 * x, UNIT, {}),
        (peak(5.0), peak(5.1), TEN, {}),
        (peak(5.0), peak(5.3), TEN, {}),
        (peak(5.0), peak(5.0, 0.9), TEN, {}),
        (lambda x: 1 - x, lambda x: (1 - x) ** 2, UNIT, {}),
        # The same line on the frame, other numbers on the axis: only the tick labels tell.
        (lambda x: x, lambda x: 2 * x, UNIT, {}),
        # Labels a tick apart (0.2 where the other says 0.0): a map shifted by one tick
        # would lay the lines on each other, the glyphs keep it out.
        (lambda x: x, lambda x: x + 0.2, UNIT, {}),
        (lambda x: 1 - x, lambda x: 1 - x, UNIT, {"legends": ("upper right", "lower left")}),
        # The same data on axes a third wider: another view, beyond a change of margins.
        (lambda x: 1 - x, lambda x: 1 - x, UNIT, {"xlims": (None, (-0.15, 1.2))}),
    ],
    ids=[
        "another slope",
        "peak moved 0.1",
        "peak moved 0.3",
        "amplitude 0.9",
        "another function",
        "y=2x: tick labels",
        "y=x+0.2: tick labels a tick apart",
        "a moved legend",
        "axes a third wider",
    ],
)
def test_other_data_in_the_classic_style_and_2_0_s_stay_different(
    before: Curve, after: Curve, x: Any, options: dict[str, Any]
) -> None:
    legends = options.get("legends", (None, None))
    xlims = options.get("xlims", (None, None))
    old = drawn(before, x=x, legend=legends[0], xlim=xlims[0], **CLASSIC)
    new = drawn(after, x=x, legend=legends[1], xlim=xlims[1], **DEFAULT)
    found = compare_outputs(shown(old), shown(new))
    assert found.verdict == "different"
    assert found.reasons == ()
    match = plot_match(old, new)
    assert match is None or match.score < PLOT_SCORE


def test_the_scale_the_tick_labels_tell_is_what_keeps_y_2x_apart() -> None:
    """``y=2x`` against ``y=x``: the two lines lie on their frames alike (the same picture
    inside the frame), so only the tick labels can tell them apart, and they pin no map."""
    old, new = drawn(lambda x: x, **CLASSIC), drawn(lambda x: 2 * x, **DEFAULT)
    twin = drawn(lambda x: x, **DEFAULT)
    images = [_flat(Image.open(io.BytesIO(png))) for png in (old, new, twin)]
    assert remapped(images[0], images[2]) is not None  # y=x in both styles: matched
    assert remapped(images[0], images[1]) is None  # y=2x: no map through its labels
    frames = [_layout(image) for image in images[1:]]
    inside = []
    for found in frames:
        assert found is not None
        inside.append(np.asarray(found.image.crop(found.frame), dtype=np.int16))
    assert inside[0].shape == inside[1].shape
    apart = np.abs(inside[0] - inside[1]).max(axis=2) > 48
    assert apart.mean() < 0.001  # the same picture inside the frame, pixel for pixel


def test_a_changed_curve_is_judged_through_the_map_with_its_score() -> None:
    """A peak moved by a hundredth of the axis is matched by the labels (the map found) and
    kept apart by the data: a score under 0.99 that names the rule."""
    old, new = drawn(peak(5.0), x=TEN, **CLASSIC), drawn(peak(5.1), x=TEN, **DEFAULT)
    match = plot_match(old, new)
    assert match is not None
    assert match.remapped is not None
    assert match.score < PLOT_SCORE
    alike, blocks = match.remapped.texts
    assert alike == blocks  # every tick label alike: the data decide
    found = compare_outputs(shown(old), shown(new))
    assert "matched by data coordinates" in found.notes[0]
