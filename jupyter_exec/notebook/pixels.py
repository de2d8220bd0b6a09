"""Pixel primitives the plot judge (:mod:`jupyter_exec.notebook.images`) and its match by
axes frame (:mod:`jupyter_exec.notebook.frames`) share: what counts as ink, how near a
re-rendered stroke may land, the background's colour, and growing or eroding a mask.

Their own module so the two judges each import them, and neither the other, to get them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["INK_LEVEL", "MAX_SCALE", "MIN_PLOT_PX", "NEAR_PX", "border_colour", "spread"]

INK_LEVEL = 48
"""A pixel is ink when a channel differs from the background by more than this (0-255)."""
NEAR_PX = 3
"""Ink within this many pixels of the other side's ink is the same stroke, re-rendered."""
MIN_PLOT_PX = 32
"""Images smaller than this on a side are icons, not plots: compared by pixels only."""
MAX_SCALE = 4.0
"""Images whose content differs in size by more than this factor are not compared as plots
(a thumbnail against a poster: too little is left of the larger at the common size)."""


def spread(mask: Any, reach: int, *, grow: bool) -> Any:
    """``mask`` grown (a square max filter) or eroded (min) by ``reach`` pixels each way.

    Separable shifts of a boolean array: a few milliseconds where Pillow's rank filter
    takes a tenth of a second on a plot.
    """
    out = mask.copy()
    for axis in (0, 1):
        step = out.copy()
        for d in range(1, reach + 1):
            ahead = [slice(None)] * 2
            behind = [slice(None)] * 2
            ahead[axis], behind[axis] = slice(d, None), slice(None, -d)
            if grow:
                step[tuple(ahead)] |= out[tuple(behind)]
                step[tuple(behind)] |= out[tuple(ahead)]
            else:
                step[tuple(ahead)] &= out[tuple(behind)]
                step[tuple(behind)] &= out[tuple(ahead)]
        out = step
    return out


def border_colour(pixels: Any) -> Any:
    """The most common colour of the border of ``pixels`` (H x W x 3): a picture's background.

    Counted over the colours packed into one integer each (``np.unique`` over rows sorts
    the border's rows lexically: a tenth of a second on a large plot, this a millisecond).
    """
    import numpy as np

    border = np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]]).astype(np.int32)
    packed = (border[:, 0] << 16) | (border[:, 1] << 8) | border[:, 2]
    colours, counts = np.unique(packed, return_counts=True)
    best = int(colours[counts.argmax()])
    return np.array([(best >> 16) & 255, (best >> 8) & 255, best & 255], dtype=np.int16)
