"""Outputs compared by what they mean, per MIME type: pure functions, standard library only.

Two runs can show the same thing in other bytes: an older IPython wrote an
SVG's attributes in another order, pandas rounds the last digit of a float
differently, a JSON document came back with its keys reordered. The text
comparison (:mod:`jupyter_exec.notebook.compare`) calls those different; the
rules here say why they are *equivalent*::

    image/svg+xml, */xml ─► C14N 2.0 (attributes sorted, comments and
                            whitespace-only text dropped), one tag per line
    text/html            ─► html.parser tokens: attributes sorted, text with
                            whitespace collapsed, comments dropped; a
                            pandas DataFrame table becomes its cell values,
                            one row per line (pandas' scoped style dropped)
    numbers in text      ─► equal within a relative tolerance (tables: always,
                            text: with --rtol)

Each canonicaliser returns ``None`` when its input does not parse (the text is
then compared as text), and never fetches anything: expat resolves no external
entities, and oversized documents are left as text.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from html.parser import HTMLParser

__all__ = [
    "HTML_RULE",
    "SVG_RULE",
    "TABLE_RULE",
    "XML_RULE",
    "canonical_html",
    "canonical_xml",
    "lines_close",
]

MAX_PARSED_CHARS = 4 << 20
"""Documents longer than this are compared as text (parsing them costs more than it tells)."""

XML_RULE = "XML canonical form (attribute order, whitespace, comments)"
SVG_RULE = "SVG canonical form (attribute order, whitespace, comments)"
HTML_RULE = "HTML canonical form (attribute order, whitespace, comments)"
TABLE_RULE = "DataFrame HTML by cell values"

_TAG_GAP_RE = re.compile(r">(?=<)")


def canonical_xml(text: str) -> list[str] | None:
    """An XML (or SVG) document in C14N 2.0 form, split one tag per line; None if not XML."""
    if len(text) > MAX_PARSED_CHARS or "<!ENTITY" in text:  # entities: no expansion games
        return None
    try:
        canon = ET.canonicalize(text.strip(), strip_text=True)
    except (ET.ParseError, ValueError):
        return None
    # Whitespace inside a line is collapsed by the caller, after its masks ran.
    return _TAG_GAP_RE.sub(">\n", canon).splitlines()


def _soft_space(text: str) -> str:
    """Text with its whitespace kept as it is, but for the ends.

    The caller masks volatile tokens first (:func:`jupyter_exec.notebook.compare.normalize`),
    then collapses every run of whitespace to one space: a mask never reaches across a line
    break or a column gap, so ``std 0.87`` above ``min -1.9`` keeps its value.
    """
    return text.strip()


class _Tokens(HTMLParser):
    """Canonical tokens of an HTML fragment; cell values of the DataFrame tables in it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tokens: list[str] = []
        self.rows: list[str] = []
        self.tables = 0
        self._depth = 0  # open <table> elements inside a DataFrame table
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._style = 0  # inside pandas' <style scoped>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        pairs = sorted((k, _soft_space(v or "")) for k, v in attrs)
        if tag == "style" and any(k == "scoped" for k, _ in pairs):
            self._style += 1
            return
        if tag == "table" and (self._depth or "dataframe" in dict(pairs).get("class", "")):
            self._depth += 1
            self.tables += 1 if self._depth == 1 else 0
        if self._depth:
            if tag == "tr":
                self._row = []
            elif tag in ("td", "th"):
                self._cell = []
            return
        shown = " ".join(f'{k}="{v}"' for k, v in pairs)
        self.tokens.append(f"<{tag}{' ' + shown if shown else ''}>")

    def handle_endtag(self, tag: str) -> None:
        if self._style and tag == "style":
            self._style -= 1
            return
        if self._depth:
            if tag in ("td", "th") and self._cell is not None and self._row is not None:
                self._row.append(_soft_space("".join(self._cell)))
                self._cell = None
            elif tag == "tr" and self._row is not None:
                self.rows.append("| " + " | ".join(self._row) + " |")
                self._row = None
            elif tag == "table":
                self._depth -= 1
                if not self._depth:
                    self.tokens.append("<DataFrame table>")
            return
        self.tokens.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if self._style:
            return
        if self._cell is not None:
            self._cell.append(data)
            return
        if self._depth:
            return
        text = _soft_space(data)
        if text:
            self.tokens.append(text)


def canonical_html(text: str) -> tuple[list[str], bool] | None:
    """An HTML fragment's canonical tokens, and whether it held a DataFrame table.

    With a table, the lines are its rows (``| a | b |``) followed by the tokens
    around it, so a numeric tolerance applies to the values. None when too large.
    """
    if len(text) > MAX_PARSED_CHARS:
        return None
    parser = _Tokens()
    try:
        parser.feed(text)
        parser.close()
    except (AssertionError, ValueError):  # html.parser's own complaints
        return None
    if parser.tables:
        return parser.rows + parser.tokens, True
    return parser.tokens, False


_NUMBER_RE = re.compile(r"([-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")


def _number(text: str) -> float | None:
    try:
        return float(text.replace("_", ""))
    except ValueError:
        return None


def _line_close(a: str, b: str, rtol: float, atol: float) -> bool:
    if a == b:
        return True
    left, right = _NUMBER_RE.split(a), _NUMBER_RE.split(b)
    if len(left) != len(right):
        return False
    for i, (x, y) in enumerate(zip(left, right, strict=True)):
        if x == y:
            continue
        if i % 2 == 0:  # text between numbers must match exactly
            return False
        fx, fy = _number(x), _number(y)
        if fx is None or fy is None or not math.isclose(fx, fy, rel_tol=rtol, abs_tol=atol):
            return False
    return True


def lines_close(a: Sequence[str], b: Sequence[str], rtol: float, atol: float = 0.0) -> bool:
    """Whether two line lists differ only in numbers that agree within ``rtol`` (or ``atol``)."""
    return len(a) == len(b) and all(
        _line_close(x, y, rtol, atol) for x, y in zip(a, b, strict=True)
    )
