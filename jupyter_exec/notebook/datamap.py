"""Two plots whose axis limits changed, matched in data coordinates: the last way the plot
judge (:func:`jupyter_exec.notebook.images.plot_match`) tries when the others score under
:data:`~jupyter_exec.notebook.images.PLOT_SCORE` or refuse.

matplotlib 2.0 changed more than the figure: autoscaled axes got 5% data margins (a line
over 0..1 runs on axes of -0.05..1.05, no longer 0..1, so it no longer touches the frame),
and the classic style's tick labels overhang the frame's corners where 2.0's do not. The
same data then lie elsewhere on a frame of the same shape, and neither the picture at a
common size nor the frame-onto-frame warp (:mod:`jupyter_exec.notebook.frames`) finds
them. What a person reads is the data, on the axes the tick labels number: so the data are
compared after the change of axis limits that the tick labels show::

    each image ─► its axes frame (frames.py: the spines) and its small blocks of ink outside
                  the frame (tick labels, axis labels, title), each on the side of the frame
                  it lies furthest out from
               ─► the tick labels: the row (column) of blocks nearest the frame, below it
                  (left of it; above or right when there is none)
               ─► per axis, the change of limits: a map  q = a·p + b  from a place on the
                  smaller frame (p: its share of the frame's width or height) to the larger
                  (q), fitted through the tick labels the two sides have alike glyph by
                  glyph (LABEL_ALIKE), through the most labels and of those the most alike;
                  bounded to a plausible change of margins (``a`` within MAX_LIMIT_CHANGE of
                  1, ``b`` within MAX_OFFSET of the frame): none, and the rule refuses
               ─► every tick label either side draws where the other side's frame reaches
                  must be one of those pairs, and the other text of each side (title, axis
                  label) must have one alike (frames.TEXT_ALIKE) on the same side at the same
                  share of the frame
               ─► the data: the part of the smaller frame both frames show, less a band
                  along its edges (spines, inward ticks), and the larger image's part that
                  the maps say is the same, resized onto it (Lanczos); judged as at a common
                  size (edges within 3 px, fills within a pixel); data ink that one side
                  shows outside the part both show counts as misplaced
               ─► score = the least of that geometry, the fills, and the share of text
                  blocks alike; at least 0.99: equivalent, "matched by data coordinates"

A changed value still moves the data against the frame that the labels number (another
slope, amplitude or peak is ink out of place), a changed scale changes the labels (``y=2x``
against ``y=x``: the same line, its tick labels ``0.5 1.0 ... 2.0`` against ``0.2 ... 1.0``
pin no map within the bounds), and text that moved, or that one side has and the other
not, is a block unlike. Not matched: an axis whose tick labels changed their format or step
(1.x's ``-1.0 -0.5 ... 1.0`` against 2.0's ``-1.00 -0.75 ... 1.00``): with fewer than two
labels alike an axis has no map, and the rule refuses; a legend inside the frame is judged
as data (it is drawn in points, not in data coordinates, so a legend may keep it apart).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any, Literal

from jupyter_exec.notebook.frames import (
    MAX_FRAME_ASPECT_CHANGE,
    TEXT_ALIKE,
    Layouts,
    _alike,
    _Block,
    _Layout,
    share_alike,
)
from jupyter_exec.notebook.pixels import MAX_SCALE, NEAR_PX

__all__ = ["MAX_LIMIT_CHANGE", "MAX_OFFSET", "AxisMap", "Remapped", "remapped"]

MAX_LIMIT_CHANGE = 0.15
"""An axis's data span may change by this share at most (2.0's margins: 10%, 1/1.1 = 0.91
the other way; a span of another third is another view of the data)."""
MAX_OFFSET = 0.1
"""The smaller frame's start may map this share of the larger frame from its start at most
(a 5% margin: 0.045)."""
LABEL_PX = NEAR_PX + 1
"""A tick label is where the map puts it when its centre is within this many pixels (of the
smaller image) along the axis."""
EDGE_BAND = 0.02
"""The band along the frame's edges left out of the data (spines, ticks drawn inward), as a
share of the smaller frame's longer side, at least :data:`LABEL_PX` pixels."""
LABEL_ALIKE = 0.6
"""Two tick labels are the same number when each glyph correlates with the other's at least
this much (:func:`_label_alike`; the same labels at 72 and 100 dpi: 0.67 and more, at 144
and 200: 0.85 and more; another digit mostly under 0.65, a 6 against an 8 up to 0.69). A
pair alone proves little: a map must be consistent with the most pairs and, of those, the
most alike, and a shift by one tick pairs some digit with another that is not."""
GLYPH_SIZE = (14, 20)
"""Glyphs are compared at this size (width, height): a glyph and its partner stretched alike."""
SIZE_SLACK = 0.2
"""Two labels are compared only when their sizes agree within this share (and 2 px) after
the text scale: another number of glyphs is another label."""

Side = Literal["left", "top", "right", "bottom"]
_ACROSS: tuple[Side, ...] = ("bottom", "top")
"""Sides whose labels run along the x axis; the others along y."""


@dataclass(frozen=True)
class AxisMap:
    """The change of an axis's limits: the smaller frame's share ``p`` lies at the larger
    frame's share ``scale * p + offset``; ``labels``: the tick label pairs that pinned it."""

    scale: float
    offset: float
    labels: int

    def at(self, p: float) -> float:
        return self.scale * p + self.offset

    def back(self, q: float) -> float:
        return (q - self.offset) / self.scale


@dataclass(frozen=True)
class Remapped:
    """How the two plots were matched in data coordinates (see the module docstring)."""

    contents: tuple[tuple[int, int], tuple[int, int]]
    """The content sizes (width, height) of the recorded and the replayed image."""
    frames: tuple[tuple[int, int], tuple[int, int]]
    """Their frame sizes."""
    spans: tuple[float, float]
    """The replayed axes' data span over the recorded ones' (x, y): 1.1, 2.0's margins."""
    labels: int
    """Tick labels alike on both sides that pinned the maps (pairs, both axes)."""
    texts: tuple[int, int]
    """Text blocks with a partner alike where the maps put them, of all text blocks."""
    outside: float
    """The larger share of a side's data ink outside what both frames show."""

    @property
    def text_share(self) -> float:
        return share_alike(self.texts)


@dataclass(frozen=True)
class _Text:
    """A block outside the frame: its side, its place along that side's axis (a share of the
    frame) and its picture."""

    side: Side
    along: float
    block: _Block
    tile: Any  # PIL crop of the block's box
    overhangs: bool
    """It reaches past the frame's end along its axis (a corner's label, which may run into
    the other axis's): only counted when it has a partner."""

    @property
    def size(self) -> tuple[int, int]:
        left, top, right, bottom = self.block.box
        return right - left, bottom - top

    @functools.cached_property
    def glyphs(self) -> list[Any]:
        """Each glyph (:func:`_glyph_runs`) at the word's full height, resized to
        :data:`GLYPH_SIZE`: its grey levels less their mean, over their norm (so that two
        glyphs' correlation is one dot product)."""
        import numpy as np
        from PIL import Image

        grey = self.tile.convert("L")
        found = []
        for start, end in _glyph_runs(self):
            glyph = grey.crop((start, 0, end, grey.height)).resize(
                GLYPH_SIZE, Image.Resampling.LANCZOS
            )
            values = np.asarray(glyph, dtype=np.float64)
            values = values - values.mean()
            norm = float(np.sqrt((values * values).sum()))
            found.append(values / norm if norm else values)
        return found

    @functools.cached_property
    def shifted(self) -> list[Any]:
        """Each of :attr:`glyphs` shifted by up to a pixel each way: 9 flat vectors a glyph."""
        import numpy as np

        return [
            np.stack(
                [
                    np.roll(glyph, (dy, dx), axis=(0, 1)).ravel()
                    for dy in (-1, 0, 1)
                    for dx in (-1, 0, 1)
                ]
            )
            for glyph in self.glyphs
        ]


def _texts_of(layout: _Layout) -> list[_Text]:
    """``layout``'s blocks outside its frame joined into words (:func:`_words`), each on the
    side it lies furthest out from (a tick label overhanging a corner belongs to its axis)."""
    fl, ft, fr, fb = layout.frame
    found: list[_Text] = []
    outside = []
    for block in layout.blocks:
        cx, cy = block.centre
        if not (fl <= cx < fr and ft <= cy < fb):
            outside.append(block)
    for block in _words(outside):
        cx, cy = block.centre
        out: dict[Side, float] = {
            "left": fl - cx,
            "top": ft - cy,
            "right": cx - fr,
            "bottom": cy - fb,
        }
        side = max(out, key=lambda s: out[s])
        along = (cx - fl) / (fr - fl) if side in _ACROSS else (cy - ft) / (fb - ft)
        left, top, right, bottom = block.box
        overhangs = left < fl or right > fr if side in _ACROSS else top < ft or bottom > fb
        found.append(_Text(side, along, block, layout.image.crop(block.box), overhangs))
    return found


def _words(blocks: list[_Block]) -> list[_Block]:
    """``blocks`` joined into words: blocks side by side (overlapping over half the lower
    one's height) less than half the higher one's height apart (glyphs drawn at a high dpi
    or in a large font stand apart, and ``0.5`` is then two or three blocks)."""
    parent = list(range(len(blocks)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in itertools.combinations(range(len(blocks)), 2):
        (al, at, ar, ab), (bl, bt, br, bb) = blocks[i].box, blocks[j].box
        overlap = min(ab, bb) - max(at, bt)
        gap = max(al, bl) - min(ar, br)
        if overlap >= min(ab - at, bb - bt) / 2 and gap <= max(ab - at, bb - bt) / 2:
            parent[find(j)] = find(i)
    groups: dict[int, list[_Block]] = {}
    for i, block in enumerate(blocks):
        groups.setdefault(find(i), []).append(block)
    return [_union(members) for members in groups.values()]


def _union(members: list[_Block]) -> _Block:
    """One block of ``members``: their box, their ink."""
    import numpy as np

    left = min(m.box[0] for m in members)
    top = min(m.box[1] for m in members)
    right = max(m.box[2] for m in members)
    bottom = max(m.box[3] for m in members)
    mask = np.zeros((bottom - top, right - left), dtype=bool)
    for m in members:
        ml, mt, mr, mb = m.box
        mask[mt - top : mb - top, ml - left : mr - left] |= m.mask
    return _Block((left, top, right, bottom), mask)


def _tick_row(texts: list[_Text], side: Side) -> list[_Text]:
    """The blocks on ``side`` in one row (column) facing the frame, the row of the most
    (nearest the frame of those): its tick labels, aligned on the edge facing the frame (a
    label that ran into the other axis's at the corner is wider, and not one of them)."""
    mine = [t for t in texts if t.side == side]
    if not mine:
        return []
    edge = {"bottom": 1, "top": 3, "left": 2, "right": 0}[side]  # the box edge facing the frame
    facing = [t.block.box[edge] for t in mine]
    heights = sorted(t.size[1] if side in _ACROSS else t.size[0] for t in mine)
    reach = max(3.0, heights[len(heights) // 2] / 4)
    outward = 1 if side in ("bottom", "right") else -1

    def row(at: int) -> list[_Text]:
        return [t for t, f in zip(mine, facing, strict=True) if abs(f - at) <= reach]

    best = max(facing, key=lambda at: (len(row(at)), -outward * at))
    return row(best)


def _text_scale(small: list[_Text], large: list[_Text]) -> float | None:
    """The ratio of the two sides' text sizes: the median heights of their tick labels
    (digits are all one height; the ratio of the dpis times that of the font sizes)."""
    import statistics

    def height(texts: list[_Text]) -> float | None:
        found = [t.size[1] for t in texts if t.side in _ACROSS] or [
            t.size[0] for t in texts if t.side not in _ACROSS
        ]
        return statistics.median(found) if found else None

    a, b = height(small), height(large)
    if a is None or b is None:
        return None
    return a / b


def _sized(mine: _Text, theirs: _Text, scale: float) -> bool:
    return all(
        abs(other * scale - have) <= 2 + SIZE_SLACK * have
        for have, other in zip(mine.size, theirs.size, strict=True)
    )


def _sized_alike(mine: _Text, theirs: _Text, scale: float) -> bool:
    """Two texts that are not tick labels (a title, an axis label) alike as words."""
    return _sized(mine, theirs, scale) and _alike(mine.tile, theirs.tile) >= TEXT_ALIKE


def _glyph_runs(text: _Text) -> list[tuple[int, int]]:
    """The columns of ``text``'s glyphs: runs of columns with ink."""
    columns = [bool(c) for c in text.block.mask.any(axis=0)]
    runs: list[tuple[int, int]] = []
    start = None
    for x, inked in enumerate([*columns, False]):
        if inked and start is None:
            start = x
        elif not inked and start is not None:
            runs.append((start, x))
            start = None
    return runs


def _label_alike(mine: _Text, theirs: _Text, scale: float) -> float:
    """How alike two tick labels are, glyph by glyph: the least correlation of their glyphs'
    grey levels (:attr:`_Text.glyphs`, ``theirs`` shifted by up to a pixel); 0 when the
    sizes of the labels or of their glyphs, or their numbers of glyphs, differ.

    By glyph, not by word: ``0.6`` and ``0.8`` correlate as words as well as ``0.6`` and
    ``0.6`` drawn at two dpis (0.8-0.9: the ``0.`` they share), as last glyphs they do not.
    """
    if not _sized(mine, theirs, scale):
        return 0.0
    runs_a, runs_b = _glyph_runs(mine), _glyph_runs(theirs)
    if len(runs_a) != len(runs_b):
        return 0.0
    for (a0, a1), (b0, b1) in zip(runs_a, runs_b, strict=True):
        if abs((b1 - b0) * scale - (a1 - a0)) > 2 + SIZE_SLACK * (a1 - a0):
            return 0.0
    worst = 1.0
    for glyph, shifted in zip(mine.glyphs, theirs.shifted, strict=True):
        worst = min(worst, float((shifted @ glyph.ravel()).max()))
        if worst < LABEL_ALIKE:
            break
    return max(worst, 0.0)


def _fit(
    small: list[_Text], large: list[_Text], scale: float, length: float
) -> tuple[AxisMap, list[tuple[int, int]]] | None:
    """The map of one axis through the most tick labels alike (``length``: the smaller
    frame's length along the axis, in pixels), with the pairs that fit it; None: under two
    pairs, or no map within the bounds."""
    import numpy as np

    reach = MAX_OFFSET + MAX_LIMIT_CHANGE  # how far any map within the bounds moves a label
    alike = {
        (i, j): _label_alike(mine, theirs, scale)
        for i, mine in enumerate(small)
        for j, theirs in enumerate(large)
        if abs(mine.along - theirs.along) <= reach
    }
    pairs = [pair for pair, value in alike.items() if value >= LABEL_ALIKE]
    best: tuple[int, float, AxisMap, list[tuple[int, int]]] | None = None
    for (i1, j1), (i2, j2) in itertools.combinations(pairs, 2):
        dp = small[i2].along - small[i1].along
        if i1 == i2 or j1 == j2 or abs(dp) * length < 2 * LABEL_PX:
            continue
        a = (large[j2].along - large[j1].along) / dp
        found = _within(AxisMap(a, large[j1].along - a * small[i1].along, 0))
        if found is None:
            continue
        fitting = _fitting(found, small, large, pairs, length)
        likeness = sum(alike[pair] for pair in fitting)
        if best is None or (len(fitting), likeness) > (best[0], best[1]):
            best = (len(fitting), likeness, found, fitting)
    if best is None or best[0] < 2:
        return None
    fitting = best[3]
    p = np.array([small[i].along for i, _ in fitting])
    q = np.array([large[j].along for _, j in fitting])
    a, b = np.polyfit(p, q, 1)
    refit = _within(AxisMap(float(a), float(b), len(fitting)))
    if refit is None:
        return None
    return refit, _fitting(refit, small, large, pairs, length)


def _within(found: AxisMap) -> AxisMap | None:
    if not 1 / (1 + MAX_LIMIT_CHANGE) <= found.scale <= 1 + MAX_LIMIT_CHANGE:
        return None
    return found if abs(found.offset) <= MAX_OFFSET else None


def _fitting(
    found: AxisMap,
    small: list[_Text],
    large: list[_Text],
    pairs: list[tuple[int, int]],
    length: float,
) -> list[tuple[int, int]]:
    """The pairs ``found`` puts within :data:`LABEL_PX`, one partner each (nearest first)."""
    near = []
    for i, j in pairs:
        off = abs(found.at(small[i].along) - large[j].along) / found.scale * length
        if off <= LABEL_PX:
            near.append((off, i, j))
    taken: list[tuple[int, int]] = []
    used_i: set[int] = set()
    used_j: set[int] = set()
    for _, i, j in sorted(near):
        if i not in used_i and j not in used_j:
            taken.append((i, j))
            used_i.add(i)
            used_j.add(j)
    return taken


def _required(text: _Text, at: float, length: float, scale: float) -> bool:
    """Whether the other side must draw tick label ``text`` too: it lands ``at`` pixels
    along the other frame (``length`` long) further in than half its own extent (``scale``:
    the other side's text size over its own) and :data:`LABEL_PX`, and it does not overhang
    its own frame's end (a label at a frame's corner may run into the other axis's there).
    """
    extent = (text.size[0] if text.side in _ACROSS else text.size[1]) * scale / 2 + LABEL_PX
    return not text.overhangs and extent <= at <= length - extent


def _span(small: _Layout, large: _Layout, maps: tuple[AxisMap, AxisMap]) -> tuple[int, ...]:
    """The part of ``small``'s frame that ``large``'s frame shows too, in ``small``'s
    content pixels (left, top, right, bottom), rounded inward."""
    import math

    fl, ft, fr, fb = small.frame
    x0, x1 = max(0.0, maps[0].back(0.0)), min(1.0, maps[0].back(1.0))
    y0, y1 = max(0.0, maps[1].back(0.0)), min(1.0, maps[1].back(1.0))
    width, height = fr - fl, fb - ft
    return (
        math.ceil(fl + x0 * width),
        math.ceil(ft + y0 * height),
        math.floor(fl + x1 * width),
        math.floor(ft + y1 * height),
    )


def _to_large(
    small: _Layout, large: _Layout, maps: tuple[AxisMap, AxisMap], box: tuple[float, ...]
) -> tuple[float, float, float, float]:
    """``box`` (``small``'s content pixels) where the maps put it in ``large``'s."""
    fl, ft, fr, fb = small.frame
    gl, gt, gr, gb = large.frame
    x = [gl + maps[0].at((v - fl) / (fr - fl)) * (gr - gl) for v in (box[0], box[2])]
    y = [gt + maps[1].at((v - ft) / (fb - ft)) * (gb - gt) for v in (box[1], box[3])]
    return x[0], y[0], x[1], y[1]


def _outside(layout: _Layout, common: tuple[float, ...], band: float) -> tuple[int, int]:
    """``layout``'s data ink (inside its frame, less ``band`` along the edges), and how much
    of it lies outside ``common`` grown by ``band``."""
    import numpy as np

    fl, ft, fr, fb = layout.frame
    b = int(np.ceil(band))
    inner = layout.ink[ft + b : fb - b, fl + b : fr - b]
    total = int(inner.sum())
    keep = np.zeros(layout.ink.shape, dtype=bool)
    x0, y0 = max(int(common[0] - band), 0), max(int(common[1] - band), 0)
    keep[y0 : int(np.ceil(common[3] + band)), x0 : int(np.ceil(common[2] + band))] = True
    return total, total - int((inner & keep[ft + b : fb - b, fl + b : fr - b]).sum())


def _per_side(layout: _Layout, texts: list[_Text]) -> list[_Text]:
    """The blocks of each side that are not tick labels as one (a title, an axis label: its
    words set in points, its place on the frame by a share of it)."""
    sides: dict[Side, list[_Text]] = {}
    for text in texts:
        sides.setdefault(text.side, []).append(text)
    fl, ft, fr, fb = layout.frame
    found = []
    for side, members in sides.items():
        block = _union([t.block for t in members])
        cx, cy = block.centre
        along = (cx - fl) / (fr - fl) if side in _ACROSS else (cy - ft) / (fb - ft)
        overhangs = any(t.overhangs for t in members)
        found.append(_Text(side, along, block, layout.image.crop(block.box), overhangs))
    return found


def _others_alike(
    small: list[_Text], large: list[_Text], scale: float, lengths: tuple[float, float]
) -> tuple[int, int]:
    """Of the texts that are not tick labels (:func:`_per_side`), how many have one alike on
    the same side at the same place along the frame (within :data:`LABEL_PX`), of how many
    (one that overhangs the frame's end counts only when it has)."""
    alike = total = 0
    partnered: set[int] = set()
    for text in small:
        length = lengths[0] if text.side in _ACROSS else lengths[1]
        partner = next(
            (
                j
                for j, other in enumerate(large)
                if j not in partnered
                and other.side == text.side
                and abs(other.along - text.along) * length <= LABEL_PX
                and _sized_alike(text, other, scale)
            ),
            None,
        )
        if partner is None:
            total += not text.overhangs
        else:
            partnered.add(partner)
            alike, total = alike + 2, total + 2
    total += sum(not t.overhangs for j, t in enumerate(large) if j not in partnered)
    return alike, total


def remapped(a: Any, b: Any, layouts: Layouts | None = None) -> tuple[Any, Any, Remapped] | None:
    """``a`` and ``b`` (flattened RGB images) matched in data coordinates: the part of the
    smaller frame that both show, the larger image's same part resized onto it, and how;
    None when the rule does not apply (no frames, frames of other shapes or too far apart
    in size, an axis without two tick labels alike, or a change of limits beyond the
    bounds, see the module docstring); ``layouts``: theirs, if found already."""
    from PIL import Image

    first, second = (layouts or Layouts(a, b)).get()
    if first is None or second is None:
        return None
    aspects = sorted(w / h for w, h in (first.frame_size, second.frame_size))
    if aspects[1] / aspects[0] - 1.0 > MAX_FRAME_ASPECT_CHANGE:
        return None
    area = [w * h for w, h in (first.frame_size, second.frame_size)]
    if max(area) > MAX_SCALE**2 * min(area):
        return None
    flipped = area[0] > area[1]
    small, large = (second, first) if flipped else (first, second)
    texts_s, texts_l = _texts_of(small), _texts_of(large)
    scale = _text_scale(texts_s, texts_l)
    if scale is None or not 1 / MAX_SCALE <= scale <= MAX_SCALE:
        return None
    (ws, hs), _ = small.frame_size, large.frame_size
    maps: list[AxisMap] = []
    ticks: dict[Side, list[tuple[int, int]]] = {}
    rows: dict[Side, tuple[list[_Text], list[_Text]]] = {}
    axis_sides: tuple[tuple[Side, Side], tuple[Side, Side]] = (("bottom", "top"), ("left", "right"))
    for sides, length in zip(axis_sides, (ws, hs), strict=True):
        fitted = None
        for side in sides:
            row_s, row_l = _tick_row(texts_s, side), _tick_row(texts_l, side)
            fitted = _fit(row_s, row_l, scale, length)
            if fitted is not None:
                rows[side] = (row_s, row_l)
                ticks[side] = fitted[1]
                break
        if fitted is None:
            return None
        maps.append(fitted[0])
    axes = (maps[0], maps[1])
    # every tick label drawn where the other frame reaches is one of the pairs
    alike = total = 0
    tick_ids: set[int] = set()
    for side, (row_s, row_l) in rows.items():
        axis = axes[0] if side in _ACROSS else axes[1]
        length_s = ws if side in _ACROSS else hs
        length_l = large.frame_size[0] if side in _ACROSS else large.frame_size[1]
        paired_s = {i for i, _ in ticks[side]}
        paired_l = {j for _, j in ticks[side]}
        tick_ids.update(id(text) for text in (*row_s, *row_l))
        for i, text in enumerate(row_s):
            if i in paired_s:
                alike, total = alike + 1, total + 1
            elif _required(text, axis.at(text.along) * length_l, length_l, 1 / scale):
                total += 1
        for j, text in enumerate(row_l):
            if j in paired_l:
                alike, total = alike + 1, total + 1
            elif _required(text, axis.back(text.along) * length_s, length_s, scale):
                total += 1
    others = _others_alike(
        _per_side(small, [t for t in texts_s if id(t) not in tick_ids]),
        _per_side(large, [t for t in texts_l if id(t) not in tick_ids]),
        scale,
        (ws, hs),
    )
    alike, total = alike + others[0], total + others[1]
    # the data: the part both frames show, less a band along its edges
    band = max(float(LABEL_PX), EDGE_BAND * max(ws, hs))
    common = _span(small, large, axes)
    inner = (common[0] + band, common[1] + band, common[2] - band, common[3] - band)
    size = (round(inner[2] - inner[0]), round(inner[3] - inner[1]))
    if min(size) < 2 * LABEL_PX:
        return None
    inner = (inner[0], inner[1], inner[0] + size[0], inner[1] + size[1])
    target = small.image.crop(tuple(round(v) for v in inner))
    laid = large.image.resize(
        size, Image.Resampling.LANCZOS, box=_to_large(small, large, axes, inner)
    )
    ratio = (large.frame_size[0] / ws + large.frame_size[1] / hs) / 2
    outside = 0.0
    for layout, box, reach in (
        (small, tuple(float(v) for v in common), band),
        (large, _to_large(small, large, axes, tuple(float(v) for v in common)), band * ratio),
    ):
        ink, off = _outside(layout, box, reach)
        outside = max(outside, off / ink if ink else 0.0)
    spans = (1 / axes[0].scale, 1 / axes[1].scale)
    if flipped:  # the replayed image's span over the recorded one's
        spans = (axes[0].scale, axes[1].scale)
    labels = sum(len(pairs) for pairs in ticks.values())
    how = Remapped(
        (first.size, second.size),
        (first.frame_size, second.frame_size),
        (round(spans[0], 4), round(spans[1], 4)),
        labels,
        (alike, total),
        round(outside, 6),
    )
    return target, laid, how
