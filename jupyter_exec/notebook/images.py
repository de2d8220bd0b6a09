"""Two images compared by their pixels, within a tolerance: the image half of the judge.

A plot re-encoded with another zlib level, or saved as another PNG flavour, is the same
picture in other bytes, so images are decoded (Pillow) and compared pixel by pixel; a
tolerance lets anti-aliasing that changed between library versions pass.

A plot re-rendered by another library version (other fonts, anti-aliasing, line widths,
line colours) differs in many pixels yet shows the same data, so images whose pixels differ
are judged once more as plots (:func:`plot_match`, Pillow and NumPy)::

    both images ─► "ink": pixels off the background (the median colour) by more than 48
                ─► geometry: the share of each side's ink within 3 px of the other's ink
                   (a glyph of another font lies within; a line drawn from other data does not)
                ─► fills: where both have solid ink (ink left after a 5x5 erosion: bars,
                   image cells, not strokes), the share whose colours agree within 48
                   (an image plot of other values has the same geometry, other colours)
                ─► score = the smaller share; at least ``plot_score`` (0.99): equivalent

Sizes a few percent apart (the inline backend's tight bounding box around labels drawn in
another font) are aligned at either end or centred, and the best alignment counts.

A plot drawn at another resolution (the inline backend drew at 72 dpi until
matplotlib-inline 0.1.4, at 100 dpi since) is the same figure at another scale, so sizes
further apart are brought to a common one first (:func:`plot_match`'s scaled path)::

    both images ─► cropped to their content (the box of what is not the border's colour:
                   a tight bounding box pads by a length in inches, which scales with the
                   dpi, not with the figure)
                ─► aspect ratios (width / height) agree within ``ASPECT_TOLERANCE`` (3%)?
                   no: other figures, never equivalent as plots
                ─► the larger crop resized (Lanczos) to the smaller's size, then judged as
                   above, but by edges (steps of more than 48 to the next pixel) instead of
                   ink, and fills within one pixel; the score names both sizes

The aspect ratio is the guard: the same data drawn in a wider or taller figure is another
picture (its slopes change), and a changed bar or line still moves ink by more than
:data:`NEAR_PX` at the common size. Contents of other aspect ratios are matched by their axes
frames (:mod:`jupyter_exec.notebook.frames`).

Plots that none of these match at :data:`PLOT_SCORE` are tried once more in data coordinates
(:mod:`jupyter_exec.notebook.datamap`): the same data on axes whose limits changed
(matplotlib 2.0's data margins), read from the tick labels; the better score counts.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from jupyter_exec.notebook.pixels import (
    INK_LEVEL,
    MAX_SCALE,
    MIN_PLOT_PX,
    NEAR_PX,
    border_colour,
    spread,
)

if TYPE_CHECKING:
    from jupyter_exec.notebook.datamap import Remapped
    from jupyter_exec.notebook.frames import Framed, Layouts

__all__ = [
    "ASPECT_TOLERANCE",
    "PLOT_SCORE",
    "ImageTolerance",
    "PlotMatch",
    "compare_images",
    "plot_match",
    "svg_pixels",
]

PLOT_SCORE = 0.99
"""The default least :class:`PlotMatch` score for two plots to count as the same figure."""


@dataclass(frozen=True)
class ImageTolerance:
    """How different two images may be and still count as the same.

    A pixel differs when any channel (RGBA) differs by more than
    ``pixel_threshold`` (0-255); the images are the same when at most
    ``fraction`` (0-1) of the pixels differ. Images of different sizes always
    differ. The default is exact pixel equality (PNG bytes may still differ).
    """

    fraction: float = 0.0
    pixel_threshold: int = 0
    plot_score: float | None = PLOT_SCORE
    """Images whose pixels differ are still equivalent as plots with at least this
    :func:`plot_match` score (0-1); None: never judged as plots."""

    def __post_init__(self) -> None:
        if self.plot_score is not None and not 0.0 <= self.plot_score <= 1.0:
            raise ValueError(f"plot score must be within 0..1, not {self.plot_score}")
        if not 0.0 <= self.fraction <= 1.0:
            raise ValueError(f"image tolerance must be within 0..1, not {self.fraction}")
        if not 0 <= self.pixel_threshold <= 255:
            raise ValueError(f"pixel threshold must be within 0..255, not {self.pixel_threshold}")


def compare_images(before: bytes, after: bytes, tolerance: ImageTolerance) -> str | None:
    """``None`` if the images count as the same, else why not.

    Uses Pillow when it is installed (decoded pixels: a re-encoded PNG is the
    same image); without it, only identical bytes are the same.
    """
    if before == after:
        return None
    try:
        from PIL import Image, ImageChops
    except ImportError:
        return "image bytes differ (install Pillow to compare pixels)"
    try:
        with Image.open(io.BytesIO(before)) as a_file, Image.open(io.BytesIO(after)) as b_file:
            a = a_file.convert("RGBA")
            b = b_file.convert("RGBA")
    except Exception:  # Pillow raises assorted types for undecodable data
        return "image bytes differ (not decodable as images)"
    if a.size != b.size:
        return f"image size {a.size[0]}x{a.size[1]} -> {b.size[0]}x{b.size[1]}"
    bands = ImageChops.difference(a, b).split()
    worst = bands[0]
    for band in bands[1:]:
        worst = ImageChops.lighter(worst, band)
    histogram = worst.histogram()
    changed = sum(histogram[tolerance.pixel_threshold + 1 :])
    if not changed:
        return None
    share = changed / (a.size[0] * a.size[1])
    if share <= tolerance.fraction:
        return None
    peak = max(i for i, n in enumerate(histogram) if n)
    return (
        f"{changed:,} of {a.size[0] * a.size[1]:,} pixels differ ({share:.2%}; "
        f"largest channel difference {peak})"
    )


# -- plots judged as plots -----------------------------------------------------------------

SOLID_PX = 5
"""Ink that survives an erosion of this size is a fill (a bar, an image cell), not a stroke."""
MAX_PLOT_PIXELS = 16_000_000
"""Larger images are compared by pixels only (judging them as plots costs too much)."""
MAX_SIZE_CHANGE = 0.05
"""Images whose width or height differ by at most this share are aligned as they are; further
apart, they are compared at a common size (:data:`ASPECT_TOLERANCE`)."""
ASPECT_TOLERANCE = 0.03
"""Plots of other sizes are the same figure at another scale only when the aspect ratios of
their content agree within this share (a figure of another shape is another picture)."""


@dataclass(frozen=True)
class PlotMatch:
    """How alike two plots are: the share of ink in place and of fills in the same colour."""

    geometry: float
    """The smaller of the two sides' shares of ink (at a common size: edges) within
    :data:`NEAR_PX` of the other's."""
    fills: float
    """The share of the solid ink both sides have whose colours agree (1.0: no fills)."""
    scaled: tuple[tuple[int, int], tuple[int, int], tuple[int, int]] | None = None
    """When the plots were compared at a common size: the content sizes (width, height) of
    the recorded and replayed image and the size they were compared at; else None."""
    framed: Framed | None = None
    """When the plots were matched by their axes frames (figures of other shapes,
    :mod:`jupyter_exec.notebook.frames`): the frames and the text scale; else None."""
    remapped: Remapped | None = None
    """When the plots were matched in data coordinates (axis limits changed,
    :mod:`jupyter_exec.notebook.datamap`): the change and the labels read; else None."""

    @property
    def score(self) -> float:
        return min(self.geometry, self.fills)

    def describe(self) -> str:
        what = "ink" if self.scaled is None else "edges"
        text = (
            f"plot score {self.score:.4f} ({what} within {NEAR_PX} px: {self.geometry:.2%}, "
            f"fills in the same colour: {self.fills:.2%})"
        )
        if self.scaled is None:
            return text
        (wa, ha), (wb, hb), (w, h) = self.scaled
        if self.remapped is not None:
            (fa, ga), (fb, gb) = self.remapped.frames
            alike, blocks = self.remapped.texts
            x, y = self.remapped.spans
            return (
                f"{text}, matched by data coordinates: axis limits changed (data span x "
                f"{x:.3f}x, y {y:.3f}x, read from {self.remapped.labels} tick labels alike; "
                f"{alike} of {blocks} text blocks alike), frame {fa}x{ga} -> {fb}x{gb}, "
                f"content {wa}x{ha} -> {wb}x{hb}, compared at {w}x{h}"
            )
        if self.framed is not None:
            (fa, ga), (fb, gb) = self.framed.frames
            alike, blocks = self.framed.texts
            return (
                f"{text}, matched by axes frame: frame {fa}x{ga} -> {fb}x{gb}, text scaled "
                f"{self.framed.text_scale:.2f} ({alike} of {blocks} text blocks alike), content "
                f"{wa}x{ha} -> {wb}x{hb}, compared at {w}x{h}"
            )
        return f"{text}, scaled: content {wa}x{ha} -> {wb}x{hb}, compared at {w}x{h}"


def _flat(image: Any) -> Any:
    """An RGB image with transparency composited on white, as a notebook shows it."""
    from PIL import Image

    rgba = image.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


@dataclass(frozen=True)
class _Plot:
    """One image's masks, computed once and placed on a shared canvas per alignment."""

    pixels: Any  # H x W x 3, int16
    ink: Any  # H x W, bool (at a common size: the picture's edges)
    near: Any  # ink grown by NEAR_PX
    solid: Any  # ink eroded by SOLID_PX

    @classmethod
    def of(cls, image: Any, *, outline: bool = False) -> _Plot | None:
        """The masks of ``image``; ``outline``: judge the geometry by the picture's edges.

        At a common size a shape counts by its outline, not its area: a bar whose top moved
        by a few pixels changes a sliver of its area, and the whole of its top edge. An edge
        is a step of more than :data:`INK_LEVEL` to the next pixel; the other side's edges
        count as near from half that step (resampling softens a step into two).
        """
        import numpy as np

        pixels = np.asarray(image, dtype=np.int16)
        background = np.median(pixels[::4, ::4].reshape(-1, 3), axis=0)  # a sample is enough
        ink = np.abs(pixels - background).max(axis=2) > INK_LEVEL
        if not ink.any():
            return None
        solid = spread(ink, SOLID_PX // 2, grow=False)
        if not outline:
            return cls(pixels, ink, spread(ink, NEAR_PX, grow=True), solid)
        step = np.zeros(ink.shape, dtype=np.int16)
        down = np.abs(pixels[1:] - pixels[:-1]).max(axis=2)
        right = np.abs(pixels[:, 1:] - pixels[:, :-1]).max(axis=2)
        step[1:] = np.maximum(step[1:], down)
        step[:-1] = np.maximum(step[:-1], down)
        step[:, 1:] = np.maximum(step[:, 1:], right)
        step[:, :-1] = np.maximum(step[:, :-1], right)
        edges = step > INK_LEVEL
        if not edges.any():
            return None
        return cls(pixels, edges, spread(step > INK_LEVEL // 2, NEAR_PX, grow=True), solid)

    def placed(self, name: str, shape: tuple[int, int], at: tuple[int, int]) -> Any:
        import numpy as np

        value = getattr(self, name)
        canvas = np.zeros(shape + value.shape[2:], dtype=value.dtype)
        y, x = at
        canvas[y : y + value.shape[0], x : x + value.shape[1]] = value
        return canvas


def _offsets(size: int, full: int) -> tuple[int, ...]:
    """Where an image ``size`` wide may sit on a canvas ``full`` wide: at either end, or centred
    (a tight bounding box grew on one side, the other, or both)."""
    gap = full - size
    return tuple(dict.fromkeys((0, gap // 2, gap)))


def _score(
    a: _Plot, b: _Plot, shape: tuple[int, int], at: tuple[Any, Any], *, resampled: bool = False
) -> PlotMatch:
    """The match of ``a`` and ``b`` placed at ``at`` on a canvas of ``shape``; ``resampled``:
    a fill's colour may match the other side's within one pixel (resampling blurs the border
    between two cells of an image plot)."""
    import numpy as np

    ink_a, ink_b = a.placed("ink", shape, at[0]), b.placed("ink", shape, at[1])
    near_a, near_b = a.placed("near", shape, at[0]), b.placed("near", shape, at[1])
    geometry = min(
        float((ink_a & near_b).sum() / ink_a.sum()), float((ink_b & near_a).sum() / ink_b.sum())
    )
    solid = a.placed("solid", shape, at[0]) & b.placed("solid", shape, at[1])
    count = int(solid.sum())
    fills = 1.0
    if count:
        mine, theirs = a.placed("pixels", shape, at[0]), b.placed("pixels", shape, at[1])
        apart = np.abs(mine - theirs).max(axis=2)
        if resampled:
            for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                shifted = np.roll(theirs, (dy, dx), axis=(0, 1))
                apart = np.minimum(apart, np.abs(mine - shifted).max(axis=2))
        fills = 1.0 - float((apart[solid] > INK_LEVEL).sum()) / count
    return PlotMatch(round(geometry, 6), round(fills, 6))


def plot_match(before: bytes, after: bytes) -> PlotMatch | None:
    """How alike two images are as plots (see the module docstring); None when they cannot be
    judged so: not decodable, Pillow or NumPy missing, too small or too large, of other
    aspect ratios (beyond :data:`ASPECT_TOLERANCE`), or no ink on a side.

    Images of slightly other sizes (a tight bounding box around labels in another font) are
    laid on a shared canvas at each end and centred, and the best alignment counts; sizes
    further apart than :data:`MAX_SIZE_CHANGE` are cropped to their content and compared at
    the smaller one's size (:attr:`PlotMatch.scaled` says so).
    """
    try:
        import numpy  # noqa: F401  (the masks are NumPy arrays)
        from PIL import Image
    except ImportError:
        return None
    try:
        with Image.open(io.BytesIO(before)) as a_file, Image.open(io.BytesIO(after)) as b_file:
            a, b = _flat(a_file), _flat(b_file)
    except Exception:  # Pillow raises assorted types for undecodable data
        return None
    if max(a.size[0] * a.size[1], b.size[0] * b.size[1]) > MAX_PLOT_PIXELS:
        return None
    from jupyter_exec.notebook.frames import Layouts

    layouts = Layouts(a, b)  # found once, for the frame match and the data coordinates
    found = _aligned(a, b) if _close_in_size(a.size, b.size) else _scaled(a, b, layouts)
    if found is not None and found.score >= PLOT_SCORE:
        return found
    other = _remapped(a, b, layouts)  # the axis limits may have changed (2.0's data margins)
    if other is not None and (found is None or other.score > found.score):
        return other
    return found


def _close_in_size(a: tuple[int, int], b: tuple[int, int]) -> bool:
    (wa, ha), (wb, hb) = a, b
    return min(wa, wb) >= max(wa, wb) * (1 - MAX_SIZE_CHANGE) and min(ha, hb) >= max(ha, hb) * (
        1 - MAX_SIZE_CHANGE
    )


def _aligned(a: Any, b: Any, *, resampled: bool = False) -> PlotMatch | None:
    """The best score of ``a`` and ``b`` laid on a shared canvas (sizes a few percent apart);
    ``resampled``: one was resized to a common size (outlines, fills within a pixel)."""
    (wa, ha), (wb, hb) = a.size, b.size
    width, height = max(wa, wb), max(ha, hb)
    if min(wa, ha, wb, hb) < MIN_PLOT_PX:
        return None
    plots = _Plot.of(a, outline=resampled), _Plot.of(b, outline=resampled)
    if plots[0] is None or plots[1] is None:
        return None
    best: PlotMatch | None = None
    for ya in _offsets(ha, height):
        for xa in _offsets(wa, width):
            for yb in _offsets(hb, height):
                for xb in _offsets(wb, width):
                    at = ((ya, xa), (yb, xb))
                    found = _score(plots[0], plots[1], (height, width), at, resampled=resampled)
                    if best is None or found.score > best.score:
                        best = found
    return best


def _content(image: Any) -> Any | None:
    """``image`` cropped to what differs from its border's most common colour (None: nothing).

    The border, not the median: an image plot filling most of the picture has its data's
    colour as the median, and its white margin as the border.
    """
    import numpy as np

    pixels = np.asarray(image, dtype=np.int16)
    ink = np.abs(pixels - border_colour(pixels)).max(axis=2) > INK_LEVEL
    rows, columns = np.nonzero(ink)
    if not len(rows):
        return None
    return image.crop(
        (int(columns.min()), int(rows.min()), int(columns.max()) + 1, int(rows.max()) + 1)
    )


def _scaled(a: Any, b: Any, layouts: Layouts) -> PlotMatch | None:
    """``a`` and ``b`` as the same figure at another scale: content of the same aspect ratio,
    the larger resized to the smaller's size (see the module docstring)."""
    from PIL import Image

    first, second = _content(a), _content(b)
    if first is None or second is None:
        return None
    crops = [first, second]
    (wa, ha), (wb, hb) = first.size, second.size
    if min(wa, ha, wb, hb) < MIN_PLOT_PX:
        return None
    if abs((wa / ha) / (wb / hb) - 1.0) > ASPECT_TOLERANCE:
        return _framed(a, b, ((wa, ha), (wb, hb)), layouts)
    if max(wa * ha, wb * hb) > MAX_SCALE**2 * min(wa * ha, wb * hb):
        return None
    small, large = (0, 1) if wa * ha <= wb * hb else (1, 0)
    size = crops[small].size
    crops[large] = crops[large].resize(size, Image.Resampling.LANCZOS)
    found = _aligned(crops[0], crops[1], resampled=True)
    if found is None:
        return None
    return PlotMatch(found.geometry, found.fills, ((wa, ha), (wb, hb), size))


_How = TypeVar("_How")


def _framed(
    a: Any, b: Any, contents: tuple[tuple[int, int], tuple[int, int]], layouts: Layouts
) -> PlotMatch | None:
    """``a`` and ``b``, contents of other aspect ratios, as the same plot in figures of other
    shapes: matched by their axes frames (:mod:`jupyter_exec.notebook.frames`)."""
    from jupyter_exec.notebook.frames import reframed

    through = _laid_out(reframed(a, b, layouts))
    if through is None:
        return None
    match, how, size = through
    geometry = min(match.geometry, round(how.text_share, 6))  # a label unlike is a misplaced stroke
    return PlotMatch(geometry, match.fills, (*contents, size), how)


def _remapped(a: Any, b: Any, layouts: Layouts) -> PlotMatch | None:
    """``a`` and ``b`` as the same data on axes whose limits changed: matched in data
    coordinates read from their tick labels (:mod:`jupyter_exec.notebook.datamap`)."""
    from jupyter_exec.notebook.datamap import remapped

    through = _laid_out(remapped(a, b, layouts))
    if through is None:
        return None
    match, how, size = through
    geometry = min(match.geometry, round(how.text_share, 6), round(1.0 - how.outside, 6))
    return PlotMatch(geometry, match.fills, (*how.contents, size), remapped=how)


def _laid_out(
    found: tuple[Any, Any, _How] | None,
) -> tuple[PlotMatch, _How, tuple[int, int]] | None:
    """What a frame matcher laid on one canvas (``target``, ``laid_out``, how it matched),
    aligned as resized plots are: the alignment, how, and the canvas size."""
    if found is None:
        return None
    target, laid_out, how = found
    match = _aligned(target, laid_out, resampled=True)
    return None if match is None else (match, how, target.size)


# -- SVG drawn, then judged as an image ----------------------------------------------------

MAX_SVG_CHARS = 4_000_000
"""Larger SVG documents are not drawn (compared as XML only)."""
MAX_SVG_PX = 4_000
"""SVG documents wider or taller than this (in pixels at 72 dpi: 1 pt, 1 px) are not drawn."""
_SVG_ROOT_RE = re.compile(r"<svg\b[^>]*>", re.DOTALL)
_SVG_TEXT_RE = re.compile(r"<(?:[\w.-]+:)?(?:text|foreignObject)\b")
_SVG_LENGTH_RE = r"""\b{}\s*=\s*["']\s*([0-9]+(?:\.[0-9]*)?)\s*(px|pt)?\s*["']"""


def svg_pixels(text: str) -> bytes | None:
    """``text``, an SVG document, drawn as a PNG on white by resvg (the ``resvg-py`` package,
    in the ``plot`` extra), or None: resvg-py not installed, not drawable, too large, or of a
    size not given in px or pt (a size relative to a page, or none, draws at no fixed size).

    Drawn at 72 dpi (one point, one pixel: matplotlib's SVG sizes are points) and without a
    resources folder (an ``<image href>`` to a file is not read). A document with text
    elements is not drawn: without the same fonts on both sides (or any) its words would draw
    as nothing, and two other numbers as the same nothing (matplotlib's SVG draws its glyphs
    as paths).
    """
    if len(text) > MAX_SVG_CHARS or "<!ENTITY" in text or _SVG_TEXT_RE.search(text):
        return None
    try:
        import resvg_py
    except ImportError:
        return None
    root = _SVG_ROOT_RE.search(text)
    if root is None:
        return None
    for name in ("width", "height"):
        found = re.search(_SVG_LENGTH_RE.format(name), root.group(0))
        if found is None or not 0 < float(found.group(1)) <= MAX_SVG_PX:
            return None
    try:
        drawn = resvg_py.svg_to_bytes(
            svg_string=text, dpi=72.0, background="white", skip_system_fonts=True
        )
    except (ValueError, RuntimeError):  # resvg_py raises ValueError for what it cannot draw
        return None
    return bytes(drawn)
