"""Known repr changes of NumPy, pandas and matplotlib, bridged when the versions differ.

A notebook recorded with NumPy 1.26 shows ``9`` where NumPy 2 shows ``np.int64(9)``: the
same value in another library's words. When the record names a package version
(``metadata.jupyter_exec.environment.packages``, see :mod:`jupyter_exec.notebook.envdiff`)
and the replay's kernel has a version on the other side of a known change, the text of the
side in the newer version is rewritten into the older words before the two are compared
again; a cell that then matches is ``equivalent``, with the entry's name as the reason::

    record: numpy 1.26.4 ─┐                       ┌─ the newer side's text rewritten
    here:   numpy 2.4.6  ─┴─► numpy-scalar-repr ──┤   np.int64(9) ─► 9
                              is active            └─ compared again: equal ─► equivalent

One entry per change (:class:`ReprBridge`), naming the package and the version that changed
it; with the same versions on both sides, or none recorded, no entry is active. An entry
rewrites forms, never values, within one line, so the values still have to match:
``np.int64(9)`` against ``10`` stays different. A rewrite that keeps every value is applied to
both sides (a record may show the newer form too); the figure's, which drops the size and the
count of Axes, only to the side in the newer version. Pure functions, no I/O.

A notebook from elsewhere (nbclient's, a project's documentation) names no versions at all.
Its own words are then the evidence: no version prints ``9`` and ``np.int64(9)`` for the same
code, so :func:`unrecorded_bridges` turns on every entry whose new form the replay's version
prints, the record taken as the side before the change, and the reason says so:
``numpy-scalar-repr (numpy not recorded, 2.4.6 here)``. The rewrites are the same, so the
values still have to match.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "BRIDGES",
    "NOT_RECORDED",
    "ActiveBridge",
    "ReprBridge",
    "active_bridges",
    "bridge_lines",
    "unrecorded_bridges",
]

NOT_RECORDED = "not recorded"
"""The recorded version of a notebook that names none (:func:`unrecorded_bridges`)."""

Rewrite = tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]


@dataclass(frozen=True)
class ReprBridge:
    """One known repr change: the package, the first version with the new form, the rewrites.

    ``newer`` rewrites the text of the side in the newer version into the older words;
    ``older`` rewrites only a name the older version used (``Int64Index(`` is now ``Index(``),
    never a value. ``since`` None: the form changed somewhere across the package's versions
    (no single release to name), so any version difference turns the entry on.
    """

    name: str
    package: str
    since: str | None
    newer: tuple[Rewrite, ...]
    example: str
    older: tuple[Rewrite, ...] = ()

    def bridges(self, recorded: str, here: str) -> bool:
        """Whether ``recorded`` and ``here`` lie on the two sides of this change."""
        old, new = _release(recorded), _release(here)
        if old is None or new is None or old == new:
            return False
        if self.since is None:
            return True
        boundary = _release(self.since) or ()
        return (old < boundary) != (new < boundary)

    def newer_side(self, recorded: str, here: str) -> str:
        """``recorded`` or ``here``: the side whose text shows the new form."""
        old, new = _release(recorded) or (), _release(here) or ()
        return "recorded" if old > new else "here"

    def apply(self, line: str, newer: bool) -> str:
        """``line`` in the older version's words (``newer``: it is the newer side's)."""
        for pattern, replacement in self.newer if newer else self.older:
            line = pattern.sub(replacement, line)
        return line


_RELEASE_RE = re.compile(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def _release(version: str) -> tuple[int, ...] | None:
    """``(2, 4, 6)`` from ``2.4.6`` / ``2.4.6rc1``; None for a version that is not one."""
    found = _RELEASE_RE.match(version.strip())
    if found is None:
        return None
    return tuple(int(part) for part in found.groups() if part is not None)


# -- the entries -------------------------------------------------------------------------

_NP_NUMBER = (
    r"(?:u?int(?:8|16|32|64)|intp|uintp|float(?:16|32|64|96|128)|longdouble|"
    r"longlong|ulonglong|half|single|double)"
)
_NP_COMPLEX = r"(?:complex(?:64|128|192|256)|clongdouble|csingle|cdouble)"


def _plain_complex(match: re.Match[str]) -> str:
    inner = match.group(1)
    return inner if inner.startswith("(") else f"({inner})"


def _unquoted_number(match: re.Match[str]) -> str:
    """``np.longdouble('1.5')`` is the number ``1.5``: NumPy quotes it to keep every digit."""
    return match.group(1)


_NUMPY_SCALARS: tuple[Rewrite, ...] = (
    (re.compile(rf"\bnp\.{_NP_NUMBER}\('([-+]?[\w.]+)'\)"), _unquoted_number),
    (re.compile(rf"\bnp\.{_NP_NUMBER}\(([-+]?[\w.+-]+)\)"), r"\1"),
    (re.compile(rf"\bnp\.{_NP_COMPLEX}\(([^()\n]+|\([^()\n]*\))\)"), _plain_complex),
    (re.compile(r"\bnp\.(?:str_|bytes_)\(((?:'[^'\n]*'|\"[^\"\n]*\"|b'[^'\n]*'))\)"), r"\1"),
    (re.compile(r"\bnp\.(True|False)_\b"), r"\1"),
)
_NUMPY_SCALAR = ReprBridge(
    "numpy-scalar-repr",
    "numpy",
    "2.0",
    _NUMPY_SCALARS,
    "np.int64(9) -> 9, np.float64(1.5) -> 1.5, np.True_ -> True (NumPy 2's scalar repr)",
    older=_NUMPY_SCALARS,  # a form, never a value: read the same way on either side
)

_VOID: tuple[Rewrite, ...] = (
    (
        re.compile(
            r"\bnp\.void\((\((?:[^()\n]|\([^()\n]*\))*\)), dtype="
            r"(?:\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]|\{[^{}\n]*\}|'[^'\n]*')\)"
        ),
        r"\1",
    ),
)
_NUMPY_VOID = ReprBridge(
    "numpy-void-repr",
    "numpy",
    "2.0",
    _VOID,
    "np.void((1, 2.0), dtype=[('a', '<i8'), ('b', '<f8')]) -> (1, 2.0) (NumPy 2's void repr)",
    older=_VOID,
)

_PANDAS_INDEX = ReprBridge(
    "pandas-index-repr",
    "pandas",
    "2.0",
    (),  # the newer side's plain Index( is the common word
    "Int64Index([1, 2], dtype='int64') -> Index([1, 2], dtype='int64') (pandas 2 dropped "
    "Int64Index, UInt64Index and Float64Index)",
    older=((re.compile(r"\b(?:Int64|UInt64|Float64)Index\("), "Index("),),
)

_INLINE_SIZE: tuple[Rewrite, ...] = (
    (re.compile(r"<Figure size 432x288 with (\d+) Axes>"), r"<Figure size 640x480 with \1 Axes>"),
)
_MPL_INLINE_FIGURE = ReprBridge(
    "matplotlib-inline-default-figure",
    "matplotlib-inline",
    "0.1.4",
    (),
    "<Figure size 432x288 with 1 Axes> -> <Figure size 640x480 with 1 Axes> (the inline "
    "backend's default figure was 6x4 in at 72 dpi until matplotlib-inline 0.1.4, matplotlib's "
    "6.4x4.8 in at 100 dpi since)",
    older=_INLINE_SIZE,  # only the one pair of defaults: any other size stays a value
)

_MPL_FIGURE = ReprBridge(
    "matplotlib-figure-repr",
    "matplotlib",
    "2.2",
    (
        (
            re.compile(r"<Figure size \d+(?:\.\d+)?x\d+(?:\.\d+)? with \d+ Axes>"),
            "<matplotlib.figure.Figure at 0x<addr>>",
        ),
    ),
    "<Figure size 640x480 with 1 Axes> -> <matplotlib.figure.Figure at 0x...> "
    "(matplotlib 2.2 gave Figure a repr)",
)

_CONTAINER: tuple[Rewrite, ...] = (
    (re.compile(r"<BarContainer object of (\d+) artists>"), r"<a list of \1 Patch objects>"),
)
_MPL_CONTAINER = ReprBridge(
    "matplotlib-hist-container-repr",
    "matplotlib",
    "3.3",
    _CONTAINER,
    "<BarContainer object of 10 artists> -> <a list of 10 Patch objects> "
    "(hist returns its BarContainer, no longer a silent_list of patches)",
    older=_CONTAINER,  # the count is kept: either side may show the newer form
)

_MPL_AXES = ReprBridge(
    "matplotlib-axes-repr",
    "matplotlib",
    "3.7",
    ((re.compile(r"<Axes: [^<>\n]*>"), "<matplotlib.axes._subplots.AxesSubplot at 0x<addr>>"),),
    "<Axes: xlabel='x'> -> <matplotlib.axes._subplots.AxesSubplot at 0x...> (matplotlib 3.7 "
    "folded AxesSubplot into Axes and gave it a repr with its title and labels, which the older "
    "side never showed)",
)

_OBJECT_AT: tuple[Rewrite, ...] = (
    (re.compile(r"<((?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*) object at (0x[\w<>]+)>"), r"<\1 at \2>"),
)
_DEFAULT_REPR = ReprBridge(
    "object-repr-form",
    "matplotlib",
    None,
    _OBJECT_AT,
    "[<matplotlib.lines.Line2D object at 0x...>] -> [<matplotlib.lines.Line2D at 0x...>] "
    "(Python's default repr against IPython's pretty form of an artist: either side)",
    older=_OBJECT_AT,
)

_DISPLAY_OBJECT: tuple[Rewrite, ...] = (
    (re.compile(r"<(IPython\.(?:core|lib)\.display\.[A-Za-z_]\w*) at 0x[\w<>]+>"), r"<\1 object>"),
)
_IPYTHON_DISPLAY = ReprBridge(
    "ipython-display-repr",
    "ipython",
    None,
    _DISPLAY_OBJECT,
    "<IPython.core.display.HTML at 0x...> -> <IPython.core.display.HTML object> (IPython's "
    "display objects got a repr without their address)",
    older=_DISPLAY_OBJECT,  # the class is kept; the address was never a value
)

_BACKEND_NAME: tuple[Rewrite, ...] = (
    (re.compile(r"\bmodule://(?:ipykernel\.pylab|matplotlib_inline)\.backend_inline\b"), "inline"),
)
_MPL_INLINE = ReprBridge(
    "matplotlib-inline-backend-name",
    "matplotlib",
    None,
    _BACKEND_NAME,
    "module://ipykernel.pylab.backend_inline -> inline (the inline backend's module moved to "
    "matplotlib_inline, then matplotlib named it 'inline')",
    older=_BACKEND_NAME,  # one backend under three names
)

BRIDGES: tuple[ReprBridge, ...] = (
    _NUMPY_SCALAR,
    _NUMPY_VOID,
    _PANDAS_INDEX,
    _MPL_INLINE_FIGURE,
    _MPL_FIGURE,
    _MPL_CONTAINER,
    _MPL_AXES,
    _DEFAULT_REPR,
    _IPYTHON_DISPLAY,
    _MPL_INLINE,
)
"""Every known repr change, in the order they are applied (see docs/howto/replay.md)."""


@dataclass(frozen=True)
class ActiveBridge:
    """An entry turned on for one replay, with the versions it bridges and the newer side."""

    bridge: ReprBridge
    recorded: str
    here: str

    @property
    def reason(self) -> str:
        """``numpy-scalar-repr (numpy 1.26.4 recorded, 2.4.6 here)``: a cell's reason."""
        if self.recorded == NOT_RECORDED:
            return f"{self.bridge.name} ({self.bridge.package} {NOT_RECORDED}, {self.here} here)"
        return (
            f"{self.bridge.name} ({self.bridge.package} {self.recorded} recorded, {self.here} here)"
        )

    @property
    def newer(self) -> str:
        return self.bridge.newer_side(self.recorded, self.here)

    def rewrite(self, line: str, side: str) -> str:
        """``line`` of ``side`` (``recorded`` / ``here``) in the older version's words."""
        return self.bridge.apply(line, newer=side == self.newer)


def active_bridges(
    recorded: Mapping[str, object] | None, here: Mapping[str, object] | None
) -> tuple[ActiveBridge, ...]:
    """The entries the two environments' package versions turn on (none without versions).

    ``recorded`` / ``here`` are the ``environment`` records of
    :mod:`jupyter_exec.notebook.envdiff` (``{"packages": {"numpy": "1.26.4"}}``).
    """
    if not recorded or not here:
        return ()
    before, now = recorded.get("packages"), here.get("packages")
    if not isinstance(before, Mapping) or not isinstance(now, Mapping):
        return ()
    out: list[ActiveBridge] = []
    for bridge in BRIDGES:
        old, new = before.get(bridge.package), now.get(bridge.package)
        if isinstance(old, str) and isinstance(new, str) and bridge.bridges(old, new):
            out.append(ActiveBridge(bridge, old, new))
    return tuple(out)


def unrecorded_bridges(here: Mapping[str, object] | None) -> tuple[ActiveBridge, ...]:
    """The entries on for a notebook that records no versions: every one whose package the
    replay's kernel has at or past its change (``here``: :func:`active_bridges`'s shape).

    The record is taken as the side before the change (its recorded version is
    :data:`NOT_RECORDED`), so an entry that rewrites only the newer side's words (the
    figure's) rewrites the replay's; a record that shows the new form as well still matches
    only where its values do.
    """
    now = (here or {}).get("packages")
    if not isinstance(now, Mapping):
        return ()
    out: list[ActiveBridge] = []
    for bridge in BRIDGES:
        version = now.get(bridge.package)
        release = _release(version) if isinstance(version, str) else None
        if release is None or not isinstance(version, str):
            continue
        if bridge.since is None or release >= (_release(bridge.since) or ()):
            out.append(ActiveBridge(bridge, NOT_RECORDED, version))
    return tuple(out)


def bridge_lines(
    recorded: Sequence[str], replayed: Sequence[str], active: Sequence[ActiveBridge]
) -> tuple[list[str], list[str], tuple[str, ...]]:
    """Both sides' lines with the active entries applied, and the reasons of those that
    rewrote a line where the two sides differed. Sides of other lengths are returned as they
    are: a rewrite keeps lines.

    Only lines that still differ are rewritten: a pair already equal is the same value in the
    same words, and a rewrite of one side only (the figure's) must not make it differ. So
    entries chain: the inline figure's old default size becomes the new one on the record's
    side, and the figure entry then leaves the now equal pair alone."""
    old, new = list(recorded), list(replayed)
    if len(old) != len(new):
        return old, new, ()
    reasons: list[str] = []
    for entry in active:
        a = [o if o == n else entry.rewrite(o, "recorded") for o, n in zip(old, new, strict=True)]
        b = [n if o == n else entry.rewrite(n, "here") for o, n in zip(old, new, strict=True)]
        if any(a[i] != old[i] or b[i] != new[i] for i in range(len(old))):
            reasons.append(entry.reason)
        old, new = a, b
    return old, new, tuple(reasons)
