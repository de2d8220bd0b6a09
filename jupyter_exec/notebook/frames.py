"""Two plots in figures of other shapes, matched by their axes frame: the frame half of the
plot judge (:func:`jupyter_exec.notebook.images.plot_match` calls it when the aspect ratios of
the two contents disagree).

The inline backend's default figure was 6x4 in at 72 dpi until matplotlib-inline 0.1.4,
matplotlib's is 6.4x4.8 in at 100 dpi: the same plot, recorded in the old figure and replayed
in the new one, has another aspect ratio, so it is not the same picture at another scale. It is
the same plot in another layout: what is drawn in data coordinates (lines, bars, image cells)
follows the axes frame, and what is drawn in points (tick labels, legend entries, markers,
titles) follows the dpi. So the larger image is laid out again as the smaller one's::

    each image ─► ink (off its border's colour), its content box, and its axes frame: the
                  outermost rows and columns whose longest run of ink spans half the content
                  (the spines; an image plot's edges)
               ─► frames of aspect ratios within MAX_FRAME_ASPECT_CHANGE (25%: the old
                  default's 1.53 against the new one's 1.34), margins empty on both or neither
               ─► the text scale: the ratio of the two left + bottom margins (tick labels and
                  axis labels are drawn in points)
               ─► the larger one's small blocks of ink (glyphs joined into words, legend
                  entries, markers: each under a quarter of the frame on both sides) lifted off
               ─► the rest warped piecewise, frame onto frame and each margin onto its margin
               ─► each block resized by the text scale and put back where it belongs: outside
                  the frame where its centre maps to; inside, there or at the same distance in
                  points from the nearest frame corner (a legend), whichever lands on the
                  other side's ink
               ─► judged against the smaller image as a resampled plot (edges within 3 px,
                  fills within a pixel), and the text blocks once more, closely: each block put
                  back against what the smaller image shows there (grey levels correlated,
                  :data:`TEXT_ALIKE`), each of the smaller image's blocks covered by one put
                  back; the share of blocks alike counts as geometry: score at least 0.99,
                  equivalent

A changed value still moves a line or a bar inside the frame (judged after the warp, by
edges), and a changed tick label is another glyph where the other side has one (a label
within 3 px of the other's counts as in place for the edges, so the text is judged apart).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from jupyter_exec.notebook.pixels import (
    INK_LEVEL,
    MAX_SCALE,
    MIN_PLOT_PX,
    NEAR_PX,
    border_colour,
    spread,
)

__all__ = ["MAX_FRAME_ASPECT_CHANGE", "Framed", "Layouts", "reframed"]

MAX_FRAME_ASPECT_CHANGE = 0.25
"""Axes frames whose aspect ratios (width / height; the larger over the smaller) differ by more
than this share are other plots (a square plot against a wide one: 33%), never matched by their
frames (the old inline figure's against matplotlib's: 14%)."""
FRAME_SPAN = 0.5
"""A row (column) is a spine when its longest run of ink spans this share of the content."""
BLOCK_SHARE = 0.25
"""Blocks of ink under this share of the frame's width and height are text or markers."""
EMPTY_MARGIN_PX = 3
"""A margin this thin is empty; one side's empty margin against the other's full one
(``MARGIN_PX`` or more: a title, an axis label) is another layout."""
MARGIN_PX = 8
TEXT_ALIKE = 0.8
"""Two text blocks (glyphs at two resolutions, one resized to the other) are the same text when
their grey levels correlate by at least this much (the same labels: 0.81-0.99, most above
0.93; a block over blank: 0)."""
COVERED = 0.95
"""A block of the smaller image is matched when blocks put back cover this share of its ink."""
SHIFT_PX = 2
"""Text blocks are compared shifted by up to this much each way (and covered this far)."""
MIN_TEXT_INK = 12
"""A block of fewer pixels of ink (a decimal point) only needs ink where it is put back."""


@dataclass(frozen=True)
class Framed:
    """The two axes frames matched and the text scale (the larger image's text resized by it)."""

    frames: tuple[tuple[int, int], tuple[int, int]]
    """The frame sizes (width, height) of the recorded and the replayed image."""
    text_scale: float
    texts: tuple[int, int]
    """Text blocks with a partner alike on the other side, of all text blocks (both sides)."""

    @property
    def text_share(self) -> float:
        return share_alike(self.texts)


def share_alike(texts: tuple[int, int]) -> float:
    """Of ``(alike, total)`` text blocks, the share alike (1.0: no text to compare)."""
    alike, total = texts
    return alike / total if total else 1.0


@dataclass(frozen=True)
class _Layout:
    """An image cropped to its content, with its ink and its axes frame in content coordinates."""

    image: Any  # the content crop (PIL RGB)
    ink: Any  # H x W bool
    background: tuple[int, int, int]
    frame: tuple[int, int, int, int]  # left, top, right, bottom (exclusive)

    @property
    def size(self) -> tuple[int, int]:
        return int(self.ink.shape[1]), int(self.ink.shape[0])

    @property
    def frame_size(self) -> tuple[int, int]:
        left, top, right, bottom = self.frame
        return right - left, bottom - top

    def xs(self) -> list[int]:
        """The breakpoints of the piecewise warp across: content edge, frame, content edge."""
        return [0, self.frame[0], self.frame[2], self.size[0]]

    def ys(self) -> list[int]:
        return [0, self.frame[1], self.frame[3], self.size[1]]

    @functools.cached_property
    def blocks(self) -> list[_Block]:
        """Its small blocks of ink (:func:`_blocks`), found once."""
        return _blocks(self)


class Layouts:
    """Two images' layouts, found once for each rule that reads them (this frame match and
    the match in data coordinates, :mod:`jupyter_exec.notebook.datamap`)."""

    def __init__(self, a: Any, b: Any) -> None:
        self._images = (a, b)
        self._found: tuple[_Layout | None, _Layout | None] | None = None

    def get(self) -> tuple[_Layout | None, _Layout | None]:
        if self._found is None:
            self._found = (_layout(self._images[0]), _layout(self._images[1]))
        return self._found


def _runs(mask: Any) -> tuple[Any, Any, Any]:
    """The runs of True in each row of ``mask``: (rows, starts, ends), ends exclusive, in
    row-major order."""
    import numpy as np

    padded = np.zeros((mask.shape[0], mask.shape[1] + 2), dtype=np.int8)
    padded[:, 1:-1] = mask
    step = np.diff(padded, axis=1)
    rows, starts = np.nonzero(step == 1)
    _, ends = np.nonzero(step == -1)
    return rows, starts, ends


def _longest(mask: Any) -> Any:
    """The longest run of True in each row of ``mask``."""
    import numpy as np

    rows, starts, ends = _runs(mask)
    best = np.zeros(mask.shape[0], dtype=np.int64)
    np.maximum.at(best, rows, ends - starts)
    return best


def _layout(image: Any) -> _Layout | None:
    """``image``'s content, ink and axes frame (None: no ink, or no frame of a plot's size)."""
    import numpy as np

    pixels = np.asarray(image, dtype=np.int16)
    background = border_colour(pixels)
    ink = np.abs(pixels - background).max(axis=2) > INK_LEVEL
    rows, columns = np.nonzero(ink)
    if not len(rows):
        return None
    y0, y1, x0, x1 = (
        int(rows.min()),
        int(rows.max()) + 1,
        int(columns.min()),
        int(columns.max()) + 1,
    )
    ink = ink[y0:y1, x0:x1]
    spines_across = np.nonzero(_longest(ink) >= FRAME_SPAN * ink.shape[1])[0]
    spines_down = np.nonzero(_longest(ink.T) >= FRAME_SPAN * ink.shape[0])[0]
    if not len(spines_across) or not len(spines_down):
        return None
    frame = (
        int(spines_down.min()),
        int(spines_across.min()),
        int(spines_down.max()) + 1,
        int(spines_across.max()) + 1,
    )
    if min(frame[2] - frame[0], frame[3] - frame[1]) < MIN_PLOT_PX:
        return None
    shade = (int(background[0]), int(background[1]), int(background[2]))
    return _Layout(image.crop((x0, y0, x1, y1)), ink, shade, frame)


def _margins(layout: _Layout) -> tuple[int, int, int, int]:
    left, top, right, bottom = layout.frame
    width, height = layout.size
    return left, top, width - right, height - bottom


@dataclass(frozen=True)
class _Block:
    """A small block of ink (a word, a legend entry, a marker) in content coordinates."""

    box: tuple[int, int, int, int]  # left, top, right, bottom (exclusive)
    mask: Any  # its own ink within the box

    @property
    def centre(self) -> tuple[float, float]:
        left, top, right, bottom = self.box
        return (left + right) / 2, (top + bottom) / 2


def _blocks(layout: _Layout) -> list[_Block]:
    """The small blocks of ``layout``'s ink: components of the ink grown by one pixel (the
    glyphs of a word join), each under :data:`BLOCK_SHARE` of the frame on both sides.

    Components by runs: each row's runs of ink joined with the touching runs of the row
    above (a union-find over a few thousand runs, not over pixels).
    """
    import numpy as np

    grown = spread(layout.ink, 1, grow=True)
    rows, starts, ends = _runs(grown)
    parent = list(range(len(rows)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first = np.searchsorted(rows, np.arange(grown.shape[0] + 1))
    for row in range(1, grown.shape[0]):
        above, here = range(first[row - 1], first[row]), range(first[row], first[row + 1])
        i = above.start
        for j in here:
            while i < above.stop and ends[i] < starts[j]:  # ends before this run (diagonal: =)
                i += 1
            k = i
            while k < above.stop and starts[k] <= ends[j]:
                a, b = find(k), find(j)
                if a != b:
                    parent[b] = a
                k += 1
    members: dict[int, list[int]] = {}
    for i in range(len(rows)):
        members.setdefault(find(i), []).append(i)
    width, height = layout.frame_size
    found: list[_Block] = []
    for runs in members.values():
        top, bottom = int(rows[runs[0]]), int(rows[runs[-1]]) + 1
        left, right = int(starts[runs].min()), int(ends[runs].max())
        if right - left >= width * BLOCK_SHARE or bottom - top >= height * BLOCK_SHARE:
            continue
        mask = np.zeros((bottom - top, right - left), dtype=bool)
        for i in runs:
            mask[rows[i] - top, starts[i] - left : ends[i] - left] = True
        mask &= layout.ink[top:bottom, left:right]
        if mask.any():
            found.append(_Block((left, top, right, bottom), mask))
    return found


def _mapper(large: _Layout, small: _Layout, scale: float) -> Any:
    """Where a point of ``large``'s content lands in ``small``'s: inside the frame by the
    frames (data coordinates), outside it at ``scale`` times its distance from the frame's
    nearest edge (tick labels, axis labels and titles keep their distance in points)."""

    def one(value: float, edges: tuple[int, int], to: tuple[int, int]) -> float:
        (low, high), (new_low, new_high) = edges, to
        if value < low:
            return new_low - (low - value) * scale
        if value > high:
            return new_high + (value - high) * scale
        return new_low + (value - low) * (new_high - new_low) / max(high - low, 1)

    fl, ft, fr, fb = large.frame
    sl, st, sr, sb = small.frame

    def to_small(x: float, y: float) -> tuple[float, float]:
        return one(x, (fl, fr), (sl, sr)), one(y, (ft, fb), (st, sb))

    return to_small


def _warped(large: _Layout, small: _Layout, blocks: list[_Block]) -> Any:
    """``large`` without its blocks, warped piecewise onto ``small``'s layout."""
    import numpy as np
    from PIL import Image

    pixels = np.array(large.image, dtype=np.uint8)
    lifted = np.zeros(large.ink.shape, dtype=bool)
    for block in blocks:
        left, top, right, bottom = block.box
        lifted[top:bottom, left:right] |= block.mask
    pixels[spread(lifted, 1, grow=True)] = large.background
    source = Image.fromarray(pixels)
    canvas = Image.new("RGB", small.size, large.background)
    xl, xs, yl, ys = large.xs(), small.xs(), large.ys(), small.ys()
    for i in range(3):
        for j in range(3):
            target = (xs[i + 1] - xs[i], ys[j + 1] - ys[j])
            if min(target) <= 0 or xl[i + 1] <= xl[i] or yl[j + 1] <= yl[j]:
                continue
            tile = source.crop((xl[i], yl[j], xl[i + 1], yl[j + 1]))
            canvas.paste(tile.resize(target, Image.Resampling.LANCZOS), (xs[i], ys[j]))
    return canvas


def _put_back(
    canvas: Any, large: _Layout, small: _Layout, blocks: list[_Block], scale: float
) -> list[tuple[tuple[int, int, int, int], Any, int]]:
    """Each block of ``large`` resized by ``scale`` and pasted on ``canvas`` (``small``'s
    layout) where it belongs (see the module docstring)."""
    import numpy as np
    from PIL import Image

    near = spread(small.ink, NEAR_PX, grow=True)
    placed: list[tuple[tuple[int, int, int, int], Any, int]] = []
    to_small = _mapper(large, small, scale)
    fl, ft, fr, fb = large.frame
    sl, st, sr, sb = small.frame
    for block in blocks:
        left, top, right, bottom = block.box
        size = (max(1, round((right - left) * scale)), max(1, round((bottom - top) * scale)))
        mask = Image.fromarray(spread(block.mask, 1, grow=True).astype(np.uint8) * 255)
        mask = mask.resize(size, Image.Resampling.BILINEAR)
        tile = large.image.crop(block.box).resize(size, Image.Resampling.LANCZOS)
        cx, cy = block.centre
        places = [to_small(cx, cy)]
        if fl <= cx < fr and ft <= cy < fb:  # inside: a legend keeps its place in points
            right_side, lower = cx >= (fl + fr) / 2, cy >= (ft + fb) / 2
            corner_l = (fr if right_side else fl, fb if lower else ft)
            corner_s = (sr if right_side else sl, sb if lower else st)
            places.append(
                (corner_s[0] + (cx - corner_l[0]) * scale, corner_s[1] + (cy - corner_l[1]) * scale)
            )
        shape = np.asarray(mask) > 127
        best: tuple[int, int] | None = None
        landed = -1
        for px, py in places:
            x, y = round(px - size[0] / 2), round(py - size[1] / 2)
            window = near[max(y, 0) : y + size[1], max(x, 0) : x + size[0]]
            part = shape[max(-y, 0) : max(-y, 0) + window.shape[0], max(-x, 0) :][
                :, : window.shape[1]
            ]
            hits = int((window & part).sum()) if window.size else 0
            if hits > landed:
                best, landed = (x, y), hits
        if best is not None:
            canvas.paste(tile, best, mask)
            box = (best[0], best[1], best[0] + size[0], best[1] + size[1])
            placed.append((box, tile, int(block.mask.sum())))
    return placed


def _alike(mine: Any, theirs: Any) -> float:
    """How alike two blocks of text are: the best correlation of their grey levels, softened
    by a one-pixel blur, ``theirs`` resized to ``mine``'s size and shifted by up to
    :data:`SHIFT_PX` each way (glyphs drawn at two resolutions land on other sub-pixel
    positions)."""
    import numpy as np
    from PIL import Image, ImageFilter

    def grey(image: Any) -> Any:
        pad = SHIFT_PX + 1
        padded = Image.new("L", (image.width + 2 * pad, image.height + 2 * pad), 255)
        padded.paste(image.convert("L"), (pad, pad))
        return np.asarray(padded.filter(ImageFilter.GaussianBlur(1)), dtype=np.float64)

    a = grey(mine)
    b = grey(theirs.resize(mine.size, Image.Resampling.LANCZOS))
    a = a - a.mean()
    a_norm = float((a * a).sum())
    best = 0.0
    for dy in range(-SHIFT_PX, SHIFT_PX + 1):
        for dx in range(-SHIFT_PX, SHIFT_PX + 1):
            c = np.roll(b, (dy, dx), axis=(0, 1))  # (the margin rolls round: blank on blank)
            c = c - c.mean()
            norm = float(np.sqrt(a_norm * float((c * c).sum())))
            if norm:
                best = max(best, float((a * c).sum()) / norm)
    return best


def _texts(
    small: _Layout, placed: list[tuple[tuple[int, int, int, int], Any, int]]
) -> tuple[int, int]:
    """How many text blocks are alike on the other side, of how many (both sides' blocks).

    A block put back is alike when the smaller image shows the same where it was put
    (:func:`_alike` at least :data:`TEXT_ALIKE`; a block of fewer than :data:`MIN_TEXT_INK`
    pixels, a decimal point, only needs ink there); a block of the smaller image is alike when
    the blocks put back cover it (a label one side draws wider, or not at all, is not).
    Blocks are compared by place, not paired one to one: glyphs a pixel apart at one
    resolution join into a word, at the other they stay apart.
    """
    import numpy as np

    width, height = small.size
    covered = np.zeros(small.ink.shape, dtype=bool)
    alike = 0
    for (left, top, right, bottom), tile, ink in placed:
        reach = SHIFT_PX
        covered[max(top - reach, 0) : bottom + reach, max(left - reach, 0) : right + reach] = True
        box = (max(left, 0), max(top, 0), min(right, width), min(bottom, height))
        if box[2] - box[0] < right - left - 1 or box[3] - box[1] < bottom - top - 1:
            continue  # put back off the canvas: nothing there to be alike
        if ink < MIN_TEXT_INK:
            near = small.ink[max(top - 1, 0) : bottom + 1, max(left - 1, 0) : right + 1]
            alike += int(near.any())
        elif _alike(small.image.crop(box), tile) >= TEXT_ALIKE:
            alike += 1
    mine = small.blocks
    for block in mine:
        left, top, right, bottom = block.box
        inside = covered[top:bottom, left:right][block.mask].sum()
        if inside >= COVERED * block.mask.sum():
            alike += 1
    return alike, len(placed) + len(mine)


def _aspect(size: tuple[int, int]) -> float:
    return size[0] / size[1]


def reframed(a: Any, b: Any, layouts: Layouts | None = None) -> tuple[Any, Any, Framed] | None:
    """``a`` and ``b`` (flattened RGB images) brought to one layout by their axes frames, or
    None when they cannot be (no frame, frames of other shapes, another layout of margins, too
    far apart in size): the smaller one's content, the larger one laid out as it, and how;
    ``layouts``: theirs, if found already."""

    first, second = (layouts or Layouts(a, b)).get()
    if first is None or second is None:
        return None
    aspects = sorted((_aspect(first.frame_size), _aspect(second.frame_size)))
    if aspects[1] / aspects[0] - 1.0 > MAX_FRAME_ASPECT_CHANGE:
        return None
    area = [w * h for w, h in (first.frame_size, second.frame_size)]
    if max(area) > MAX_SCALE**2 * min(area):
        return None
    small, large = (first, second) if area[0] <= area[1] else (second, first)
    for mine, theirs in zip(_margins(small), _margins(large), strict=True):
        if min(mine, theirs) < EMPTY_MARGIN_PX and max(mine, theirs) >= MARGIN_PX:
            return None
    ms, ml = _margins(small), _margins(large)
    text = ms[0] + ms[3], ml[0] + ml[3]
    if min(text) < MARGIN_PX:
        return None
    scale = text[0] / text[1]
    if not 1 / MAX_SCALE <= scale <= 1.0:
        return None
    blocks = large.blocks
    canvas = _warped(large, small, blocks)
    placed = _put_back(canvas, large, small, blocks, scale)
    sizes = (first.frame_size, second.frame_size)
    return small.image, canvas, Framed(sizes, round(scale, 4), _texts(small, placed))
