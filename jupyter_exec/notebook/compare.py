"""Do two runs of a cell show the same thing? Pure functions, no kernel, no I/O.

A notebook's outputs are noisy in ways that say nothing about whether a result
was reproduced: a stream split over several outputs by one tool and merged by
another, an ``execute_result`` that another front end saved as
``display_data``, a PNG re-encoded with another zlib level, a memory address or
a wall time. So both sides are first reduced to a canonical form, and only
differences that survive it count::

    outputs ─► canonical text lines   streams merged per name (\\r applied),
               (+ normalisation rules) rich outputs by mime type (HTML
                                       whitespace collapsed, JSON key-sorted),
                                       errors as "ename: evalue"
            ─► images, decoded        compared by pixels (Pillow) or bytes
                                       (:mod:`jupyter_exec.notebook.images`)
    text differs? ─► by meaning       SVG/XML/HTML parsed and canonicalised,
                                       DataFrame tables by values, JSON numbers
                                       by value, numbers in text within ``rtol``
                                       (:mod:`jupyter_exec.notebook.meaning`):
                                       the same meaning makes it *equivalent*,
                                       with the rules that made it so as reasons

The masks (normalisation rules) that changed either side are reported too, with the texts
each hid (:class:`Masked`). A mask hides one token: a match that reaches across a line break
or a column gap is left as it is, so ``std 0.87`` above ``min -1.9`` is never read as the
duration "0.87 min"; and a cell is the same only when its masks line up one for one.
Tracebacks are not compared (they name cell numbers and file paths); the
error's name and value are.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import difflib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from jupyter_exec.engine.mime import IMAGES, is_json
from jupyter_exec.engine.outputs import overwrite_line, strip_ansi
from jupyter_exec.notebook.images import ImageTolerance, compare_images, plot_match, svg_pixels
from jupyter_exec.notebook.meaning import (
    HTML_RULE,
    SVG_RULE,
    TABLE_RULE,
    XML_RULE,
    canonical_html,
    canonical_xml,
    lines_close,
)
from jupyter_exec.notebook.reprs import ActiveBridge, bridge_lines

__all__ = [
    "DEFAULT_RULES",
    "TABLE_RTOL",
    "Comparison",
    "ImageTolerance",
    "Masked",
    "Rule",
    "compare_outputs",
    "normalize",
    "parse_rule",
]


@dataclass(frozen=True)
class Rule:
    """A normalisation rule: every match of ``pattern`` is replaced by ``replacement``."""

    name: str
    pattern: re.Pattern[str]
    replacement: str
    example: str = ""

    def apply(self, text: str) -> str:
        """``text`` with this rule's one-token matches masked (see :func:`normalize`)."""
        return self.pattern.sub(_masker(self, None), text)


Hit = tuple[str, str]
"""One masked token: (the rule's name, the text it hid)."""

_MORE_THAN_A_TOKEN = re.compile(r"[\n\r\t\v\f]| {2}")
"""A mask never reaches across a line break or a column gap (a tab, two spaces): what lies
beyond is another value (``std 0.87`` above ``min -1.9`` in a printed ``describe()``)."""


def _masker(rule: Rule, hits: list[Hit] | None) -> Callable[[re.Match[str]], str]:
    """The replacement function of ``rule``: one token masked, and noted in ``hits``."""

    def mask(match: re.Match[str]) -> str:
        found = match.group(0)
        if not found or _MORE_THAN_A_TOKEN.search(found):
            return found
        if hits is not None:
            hits.append((rule.name, found))
        return match.expand(rule.replacement)

    return mask


@dataclass(frozen=True)
class Masked:
    """What one mask hid in a cell, on each side: the rule's name and the texts it replaced.

    So a ``same`` that a mask made same can be read back: ``duration`` hid ``1.2 s`` in the
    record and ``0.9 s`` in the replay. At most :data:`MAX_MASKED_SHOWN` texts per side are
    kept, each cut to :data:`MAX_MASKED_CHARS` characters.
    """

    rule: str
    recorded: tuple[str, ...] = ()
    replayed: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "recorded": list(self.recorded), "replayed": list(self.replayed)}

    def describe(self) -> str:
        """``duration hid '1.2 s' (recorded) / '0.9 s' (replayed)``."""

        def shown(texts: tuple[str, ...]) -> str:
            return ", ".join(repr(t) for t in texts) or "nothing"

        return (
            f"{self.rule} hid {shown(self.recorded)} (recorded) / {shown(self.replayed)} (replayed)"
        )


MAX_MASKED_SHOWN = 5
MAX_MASKED_CHARS = 80


def _masked(rules: Sequence[Rule], old: Sequence[Hit], new: Sequence[Hit]) -> tuple[Masked, ...]:
    def texts(hits: Sequence[Hit], name: str) -> tuple[str, ...]:
        found = dict.fromkeys(
            t if len(t) <= MAX_MASKED_CHARS else t[: MAX_MASKED_CHARS - 1] + "…"
            for n, t in hits
            if n == name
        )
        return tuple(found)[:MAX_MASKED_SHOWN]

    names = {n for n, _ in old} | {n for n, _ in new}
    return tuple(
        Masked(r.name, texts(old, r.name), texts(new, r.name)) for r in rules if r.name in names
    )


def _rule(name: str, pattern: str, replacement: str, example: str, flags: int = 0) -> Rule:
    return Rule(name, re.compile(pattern, flags), replacement, example)


_DURATION_UNITS = r"(?:ns|[µμu]s|ms|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?)"

DEFAULT_RULES: tuple[Rule, ...] = (
    _rule(
        "ipykernel-file",
        r"ipykernel_\d+[/\\]\d+\.py",
        "ipykernel_<pid>/<cell>.py",
        "/tmp/ipykernel_4711/3391.py:2: UserWarning -> /tmp/ipykernel_<pid>/<cell>.py:2: ...",
    ),
    _rule(
        "uuid",
        r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
        "<uuid>",
        "run 3f2b9c1e-0c4e-4d3b-9a37-1f0e2d9c9d1a -> run <uuid>",
        re.IGNORECASE,
    ),
    _rule(
        "widget-id",
        r'("model_id": ")[0-9a-f]{32}"',
        r'\1<id>"',
        '{"model_id": "9f1c...(32 hex)"} -> {"model_id": "<id>"} (ipywidgets)',
    ),
    _rule(
        "styler-id",
        r"\bT_[0-9a-f]{5}(?=[_\W])",
        "T_<id>",
        '<table id="T_8a3f1_"> -> <table id="T_<id>_"> (pandas Styler)',
    ),
    _rule(
        "address",
        r"(?<=\bat )0x[0-9a-f]{8,16}\b",
        "0x<addr>",
        "<Foo object at 0x7f3a2c1d0e80> -> <Foo object at 0x<addr>>",
        re.IGNORECASE,
    ),
    _rule(
        "tempfile",
        r"(?<=[/\\])tmp[a-z0-9_]{8}\b",
        "tmp<random>",
        "/tmp/tmpk2j4_x9q/data.csv -> /tmp/tmp<random>/data.csv",
    ),
    _rule(
        "datetime",
        r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b",
        "<datetime>",
        "2024-05-01 12:03:44.123+00:00 (or a date alone) -> <datetime>",
    ),
    _rule(
        "datetime-repr",
        r"datetime\.(?:datetime|date|time)\([\d, ]*\)",
        "<datetime>",
        "datetime.datetime(2024, 5, 1, 12, 3) -> <datetime>",
    ),
    _rule(
        "clock-time",
        r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b",
        "<time>",
        "Mon May  1 12:03:44 2024 -> Mon May  1 <time> 2024",
    ),
    _rule(
        "tqdm",
        r"(?:\d+(?:\.\d+)?[ ]?(?:[kMG]?(?:it|B)/s|s/it)|\?it/s)"
        r"|\[\d+:\d{2}(?::\d{2})?<(?:\d+:\d{2}(?::\d{2})?|\?)",
        "<rate>",
        "100%|####| 50/50 [00:01<00:00, 41.3it/s] -> 100%|####| 50/50 <rate>, <rate>]",
    ),
    _rule(
        "timeit-loops",
        r"\b[\d,]+ loops? each\b",
        "<n> loops each",
        "(mean ± std. dev. of 7 runs, 1,000 loops each) -> (... 7 runs, <n> loops each)",
    ),
    _rule(
        "duration",
        rf"\b\d+(?:\.\d+)?(?:e[-+]?\d+)?[ ]?{_DURATION_UNITS}(?![\w/])",
        "<duration>",
        "Wall time: 1.23 s / took 15ms / 3.2 µs ± 41 ns -> Wall time: <duration> / ...",
    ),
)
"""The volatile-output rules applied by default, in order (see the README's table)."""


def parse_rule(text: str, name: str | None = None) -> Rule:
    """A user rule from ``REGEX`` (matches become ``<normalized>``) or ``REGEX=>REPLACEMENT``.

    Raises ``ValueError`` with the regex error when ``REGEX`` does not compile.
    """
    pattern, sep, replacement = text.partition("=>")
    if not pattern:
        raise ValueError(f"empty normalisation rule {text!r}")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid normalisation regex {pattern!r}: {exc}") from None
    return Rule(name or f"user:{pattern}", compiled, replacement if sep else "<normalized>")


def normalize(
    text: str,
    rules: Iterable[Rule],
    used: set[str] | None = None,
    hits: list[Hit] | None = None,
) -> str:
    """``text`` with ANSI codes removed and every rule applied in order.

    A rule masks one token at a time: a match that reaches across a line break or a
    column gap (a tab, two spaces) is left as it is, whatever the rule's pattern
    (a user's too), so a mask never hides the value beside its token. ``used``
    collects the names of the rules that masked something (the masks a report lists
    per cell), ``hits`` each masked token, in order.
    """
    text = strip_ansi(text)
    for rule in rules:
        if used is None and hits is None:
            text = rule.pattern.sub(_masker(rule, None), text)
            continue
        found: list[Hit] = []
        text = rule.pattern.sub(_masker(rule, found), text)
        if found and used is not None:
            used.add(rule.name)
        if hits is not None:
            hits.extend(found)
    return text


@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing a cell's recorded outputs with its replayed ones."""

    same: bool
    diff: str = ""
    """A unified diff of the canonical text (``---`` recorded, ``+++`` replayed), shortened."""
    notes: tuple[str, ...] = field(default=())
    """Differences a text diff cannot show, e.g. how much two images differ."""
    reasons: tuple[str, ...] = field(default=())
    """Why outputs that differ as text mean the same (set only then), e.g. SVG attribute order."""
    masks: tuple[str, ...] = field(default=())
    """The normalisation rules (masks) that changed the text of either side."""
    masked: tuple[Masked, ...] = field(default=())
    """What each of those masks hid, on each side (:class:`Masked`)."""

    @property
    def verdict(self) -> Literal["same", "equivalent", "different"]:
        """``same`` as text, ``equivalent`` by meaning (see :attr:`reasons`), else ``different``."""
        if self.same:
            return "same"
        return "equivalent" if self.reasons else "different"


# -- canonical form ------------------------------------------------------------------

_SKIPPED_MIMES = frozenset({"application/vnd.jupyter.widget-state+json"})
_HTML_GAP_RE = re.compile(r">\s*<")
_SPACE_RE = re.compile(r"\s+")


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _terminal_text(text: str) -> str:
    """Stream text as a terminal shows it: ``\\r`` and ``\\b`` applied, line by line."""
    if "\r" not in text and "\b" not in text:
        return text
    return "\n".join(overwrite_line(line) for line in text.split("\n"))


TEXT, TABLE, JSON = "text", "table", "json"
"""How a block's numbers may differ by meaning: with --rtol / the table tolerance / not at all."""


@dataclass
class _Block:
    head: str
    lines: list[str]
    kind: str = TEXT
    rule: str | None = None
    """The meaning rule that canonicalised it (meaning mode only)."""


def _xml_mime(mime: str) -> bool:
    return mime == "image/svg+xml" or mime.endswith(("/xml", "+xml"))


def _render_value(
    mime: str,
    value: Any,
    rules: Sequence[Rule],
    used: set[str] | None,
    meaning: bool,
    hits: list[Hit] | None = None,
) -> _Block:
    kind, rule = TEXT, None
    if is_json(mime):
        if isinstance(value, str):
            with contextlib.suppress(ValueError):  # not JSON after all: compare the text
                value = json.loads(value)
        text = json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False, default=str)
        kind, rule = JSON, "JSON by value"
        return _Block("", normalize(text, rules, used, hits).splitlines(), kind, rule)
    text = _text(value)
    canon: list[str] | None = None
    if meaning and _xml_mime(mime) and (canon := canonical_xml(text)) is not None:
        rule = SVG_RULE if mime == "image/svg+xml" else XML_RULE
    elif meaning and mime == "text/html" and (tokens := canonical_html(text)) is not None:
        canon, table = tokens
        kind, rule = (TABLE, TABLE_RULE) if table else (TEXT, HTML_RULE)
    if canon is not None:
        # The canonical forms keep their line breaks until the masks ran (a mask never
        # crosses one); only then is all whitespace one space.
        lines = [_SPACE_RE.sub(" ", normalize(line, rules, used, hits)) for line in canon]
        return _Block("", lines, kind, rule)
    text = normalize(text, rules, used, hits)
    if mime in ("text/html", "image/svg+xml"):
        # Whitespace between tags is layout; one tag per line makes the diff readable.
        text = _HTML_GAP_RE.sub(">\n<", _SPACE_RE.sub(" ", text.strip()))
    return _Block("", text.splitlines(), kind, rule)


@dataclass
class _Canonical:
    blocks: list[_Block]
    images: list[tuple[str, str, bytes]]  # (label, mime, payload)
    drawings: dict[str, str] = field(default_factory=dict)  # label: SVG text

    @property
    def lines(self) -> list[str]:
        out: list[str] = []
        for block in self.blocks:
            out.append(block.head)
            out.extend(block.lines)
        return out


def canonical(
    outputs: Iterable[Mapping[str, Any]],
    rules: Sequence[Rule],
    *,
    used: set[str] | None = None,
    meaning: bool = False,
    hits: list[Hit] | None = None,
) -> _Canonical:
    """The comparable form of a cell's outputs (see the module docstring).

    ``meaning`` canonicalises SVG/XML/HTML by their parsed form
    (:mod:`jupyter_exec.notebook.meaning`); ``used`` collects the masks applied,
    ``hits`` what each masked.
    """
    streams: dict[str, list[str]] = {}
    rich: list[_Block] = []
    images: list[tuple[str, str, bytes]] = []
    drawings: dict[str, str] = {}
    errors: list[_Block] = []
    number = 0
    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream":
            streams.setdefault(str(output.get("name", "stdout")), []).append(
                _text(output.get("text", ""))
            )
        elif kind in ("execute_result", "display_data"):
            number += 1
            data = output.get("data") or {}
            for mime in sorted(data):
                if mime in _SKIPPED_MIMES:
                    continue
                label = f"[output {number}: {mime}]"
                if mime in IMAGES:
                    rich.append(_Block(f"{label} <image>", []))
                    images.append((label, mime, _decode(data[mime])))
                else:
                    block = _render_value(mime, data[mime], rules, used, meaning, hits)
                    block.head = label
                    rich.append(block)
                    if mime == "image/svg+xml":
                        drawings[label] = _text(data[mime])
        elif kind == "error":
            ename, evalue = str(output.get("ename", "")), str(output.get("evalue", ""))
            errors.append(
                _Block("[error]", normalize(f"{ename}: {evalue}", rules, used, hits).splitlines())
            )
    blocks = [
        _Block(
            f"[{name}]",
            normalize(_terminal_text("".join(streams[name])), rules, used, hits).splitlines(),
        )
        for name in sorted(streams)
    ]
    return _Canonical(blocks + rich + errors, images, drawings)


def _decode(value: Any) -> bytes:
    text = _text(value)
    try:
        return base64.b64decode(text)
    except (binascii.Error, ValueError):
        return text.encode()


# -- comparing -----------------------------------------------------------------------

MAX_DIFF_LINES = 40
MAX_DIFF_LINE_CHARS = 200


def _short_diff(before: list[str], after: list[str]) -> str:
    lines = list(difflib.unified_diff(before, after, "recorded", "replayed", n=1, lineterm=""))
    shown = [
        line if len(line) <= MAX_DIFF_LINE_CHARS else line[:MAX_DIFF_LINE_CHARS] + "…"
        for line in lines[:MAX_DIFF_LINES]
    ]
    if len(lines) > MAX_DIFF_LINES:
        shown.append(f"... ({len(lines) - MAX_DIFF_LINES} more diff lines)")
    return "\n".join(shown)


_BY_VALUE = "numbers equal by value (2. and 2.0)"
SVG_DRAWN = "SVG drawn (resvg)"
TABLE_RTOL = 1e-6
"""Relative tolerance for the numbers of a DataFrame table (it shows about 6 digits anyway)."""


def _drawn(before: str, after: str, tolerance: ImageTolerance) -> str | None:
    """Why two SVG documents that differ as XML show the same picture, or None: both drawn
    (:func:`jupyter_exec.notebook.images.svg_pixels`) and judged as images, then as plots."""
    if tolerance.plot_score is None:
        return None
    old, new = svg_pixels(before), svg_pixels(after)
    if old is None or new is None:
        return None
    if compare_images(old, new, tolerance) is None:
        return f"{SVG_DRAWN}: the same pixels"
    match = plot_match(old, new)
    if match is None or match.score < tolerance.plot_score:
        return None
    return f"{SVG_DRAWN}: the same plot re-rendered: {match.describe()}"


def _equivalent(
    old: _Canonical,
    new: _Canonical,
    meant: tuple[_Canonical, _Canonical],
    rtol: float,
    bridges: Sequence[ActiveBridge] = (),
    images: ImageTolerance | None = None,
) -> tuple[str, ...]:
    """Why two canonical forms that differ as text mean the same; empty when they do not.

    A text block that still differs is tried once more through the ``bridges`` (the known
    repr changes between the two environments, :mod:`jupyter_exec.notebook.reprs`); an SVG
    block, drawn and judged as a plot (:func:`_drawn`, with the ``images`` tolerance).
    """
    before, after = meant
    if [b.head for b in before.blocks] != [b.head for b in after.blocks] or len(
        before.blocks
    ) != len(old.blocks):
        return ()
    reasons: list[str] = []
    for plain_a, plain_b, a, b in zip(
        old.blocks, new.blocks, before.blocks, after.blocks, strict=True
    ):
        if plain_a.lines == plain_b.lines:
            continue
        rule = a.rule if a.rule == b.rule else None
        if a.lines == b.lines and rule is not None:
            reasons.append(rule)
            continue
        drawings = old.drawings.get(a.head), new.drawings.get(b.head)
        if images is not None and drawings[0] is not None and drawings[1] is not None:
            drawn = _drawn(drawings[0], drawings[1], images)
            if drawn is None:
                return ()
            reasons.append(f"{a.head} {drawn}")
            continue
        tolerance = {TABLE: max(rtol, TABLE_RTOL), JSON: 0.0}.get(a.kind, rtol)
        atol = 1e-12 if tolerance else 0
        if a.kind != b.kind:
            return ()
        if not lines_close(a.lines, b.lines, tolerance, atol):
            if a.kind != TEXT or not bridges:
                return ()
            x, y, bridged = bridge_lines(a.lines, b.lines, bridges)
            if not bridged or not lines_close(x, y, tolerance, atol):
                return ()
            reasons.extend(bridged)
            if x != y:  # 2. against 2.0: the same number in other digits
                reasons.append(f"numbers within rtol={tolerance:g}" if tolerance else _BY_VALUE)
            continue
        if a.kind == TABLE:
            reasons.append(f"{TABLE_RULE} (within rtol={tolerance:g})")
        elif a.kind == JSON:
            reasons.append("JSON by value (number formatting)")
        else:
            reasons.append(f"numbers within rtol={tolerance:g}")
    return tuple(dict.fromkeys(reasons)) or ("canonical form",)


def _compare_images(
    old: _Canonical, new: _Canonical, tolerance: ImageTolerance
) -> tuple[list[str], tuple[str, ...]]:
    """How the images of both sides differ (notes), and which differ only as re-rendered
    plots do (reasons, with their score: :func:`jupyter_exec.notebook.images.plot_match`)."""
    notes: list[str] = []
    plots: list[str] = []
    old_images = {(label, mime): data for label, mime, data in old.images}
    for label, mime, data in new.images:
        if (label, mime) not in old_images:
            continue
        why = compare_images(old_images[(label, mime)], data, tolerance)
        if why is None:
            continue
        least = tolerance.plot_score
        match = None if least is None else plot_match(old_images[(label, mime)], data)
        if match is not None and least is not None and match.score >= least:
            plots.append(f"{label} the same plot re-rendered: {match.describe()}")
        else:
            notes.append(f"{label} {why}" + ("" if match is None else f"; {match.describe()}"))
    return notes, tuple(plots)


def compare_outputs(
    before: Iterable[Mapping[str, Any]],
    after: Iterable[Mapping[str, Any]],
    rules: Sequence[Rule] = DEFAULT_RULES,
    image_tolerance: ImageTolerance | None = None,
    rtol: float = 0.0,
    bridges: Sequence[ActiveBridge] = (),
) -> Comparison:
    """Compare a cell's recorded outputs with its replayed ones (nbformat output dicts).

    Outputs that differ as text but mean the same (:mod:`jupyter_exec.notebook.meaning`;
    numbers in text within ``rtol``; a library's repr change that one of ``bridges``
    names, :func:`jupyter_exec.notebook.reprs.active_bridges`) are not
    :attr:`Comparison.same` but carry the :attr:`Comparison.reasons` that make them
    equivalent.
    """
    if rtol < 0:
        raise ValueError(f"rtol must be >= 0, not {rtol}")
    tolerance = image_tolerance or ImageTolerance()
    before, after = list(before), list(after)
    used: set[str] = set()
    old_hits: list[Hit] = []
    new_hits: list[Hit] = []
    old = canonical(before, rules, used=used, hits=old_hits)
    new = canonical(after, rules, used=used, hits=new_hits)
    notes, plots = _compare_images(old, new, tolerance)
    masks = tuple(r.name for r in rules if r.name in used)
    masked = _masked(rules, old_hits, new_hits)
    if old.lines == new.lines:
        # Same only when nothing but masked tokens differ: the masks line up one for one
        # (a literal "<duration>" in one output is not the other's masked "1.2 s").
        if [n for n, _ in old_hits] != [n for n, _ in new_hits]:
            notes.append("the masks do not line up: " + "; ".join(m.describe() for m in masked))
        return Comparison(
            same=not notes and not plots,
            notes=tuple(notes),
            reasons=() if notes else plots,
            masks=masks,
            masked=masked,
        )
    meant = (
        canonical(before, rules, used=used, meaning=True, hits=old_hits),
        canonical(after, rules, used=used, meaning=True, hits=new_hits),
    )
    reasons = () if notes else _equivalent(old, new, meant, rtol, bridges, tolerance)
    if reasons:
        reasons = (*reasons, *plots)
    masks = tuple(r.name for r in rules if r.name in used)
    return Comparison(
        same=False,
        diff=_short_diff(old.lines, new.lines),
        notes=tuple(notes),
        reasons=reasons,
        masks=masks,
        masked=_masked(rules, old_hits, new_hits),
    )
