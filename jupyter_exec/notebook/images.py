"""Two images compared by their pixels, within a tolerance: the image half of the judge.

A plot re-encoded with another zlib level, or saved as another PNG flavour, is the same
picture in other bytes, so images are decoded (Pillow) and compared pixel by pixel; a
tolerance lets anti-aliasing that changed between library versions pass.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

__all__ = ["ImageTolerance", "compare_images"]


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

    def __post_init__(self) -> None:
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
