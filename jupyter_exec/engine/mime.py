"""MIME types and nbformat's multi-line strings, in one place.

Every module that saves, renders, compares or hands outputs to a model asks
here: which types are binary (base64 in a notebook), which are images a model
can look at, what file extension a type is saved under, and how nbformat's
"a string or a list of lines" values become one string.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "BINARY",
    "EXTENSIONS",
    "IMAGES",
    "MODEL_IMAGES",
    "SPLIT_NON_TEXT",
    "extension",
    "is_json",
    "is_split",
    "joined",
    "text_of",
]

EXTENSIONS: dict[str, str] = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/svg+xml": ".svg",
    "application/pdf": ".pdf",
    "text/html": ".html",
    "text/markdown": ".md",
    "text/latex": ".tex",
    "application/json": ".json",
    "application/javascript": ".js",
}
"""The types saved as files, and their extensions (vendor JSON is handled by :func:`extension`)."""

BINARY = frozenset({"image/png", "image/jpeg", "image/gif", "application/pdf"})
"""Types a notebook holds as base64 text."""

IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp"})
"""Raster image types (compared by pixels, not bytes)."""

MODEL_IMAGES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")
"""Image types worth showing a multimodal model, in order of preference."""

SPLIT_NON_TEXT = frozenset({"application/javascript", "image/svg+xml"})
"""Non-``text/`` types nbformat stores as a list of lines."""


def extension(mime: str) -> str | None:
    """File extension for a type we save, or ``None`` for those kept inline.

    Vendor JSON formats keep their vendor in the name, e.g.
    ``application/vnd.plotly.v1+json`` -> ``.plotly.json``; Jupyter's own
    vendor types (widgets) mean nothing outside a live front end and are skipped.
    """
    if mime in EXTENSIONS:
        return EXTENSIONS[mime]
    if mime.startswith("application/vnd.") and mime.endswith("+json"):
        vendor = mime[len("application/vnd.") : -len("+json")].split(".")[0]
        if vendor == "jupyter" or not vendor.replace("-", "").isalnum():
            return None
        return f".{vendor}.json"
    return None


def is_json(mime: str) -> bool:
    """Whether a bundle holds ``mime`` as a JSON value rather than text."""
    return mime == "application/json" or mime.endswith("+json")


def is_split(mime: str) -> bool:
    """Whether nbformat stores ``mime`` as a list of lines (text formats; never base64 or JSON)."""
    return mime.startswith("text/") or mime in SPLIT_NON_TEXT


def joined(value: Any) -> Any:
    """nbformat allows multi-line strings as lists of lines: one string for those, else as is."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return value


def text_of(value: Any) -> str:
    """A bundle value as one string: joined lines, a string as is, anything else as JSON text."""
    value = joined(value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
