"""The verdict a replay hands back, and how it reads: per-cell results, the report, progress.

Kept apart from the driver (:mod:`jupyter_exec.notebook.replay`) because this is plain data and
text: the CLI, the server extension and ``on_cell`` callbacks read a
:class:`ReplayReport` / :class:`CellResult` without needing the session machinery that
produced them, and the words a verdict is shown with (``_SHOWN``) live in one place for the
Markdown report and the progress line alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from jupyter_exec.notebook.compare import Masked  # at run time: the API docs resolve it

__all__ = ["CellResult", "CellStatus", "ReplayReport"]

CellStatus = Literal[
    "same",
    "equivalent",
    "different",
    "nondeterministic",
    "error_now",
    "error_before",
    "not_run",
    "skipped",
]
"""A cell's verdict: outputs match / mean the same (``reasons`` say why) / differ / differ
between two replays too (``--runs 2``: not blamed on the record) / fails only now / failed only
in the record / had no outputs in the record (never run there) / not run (non-code, empty, or
past ``until``)."""

_BAD: frozenset[str] = frozenset({"different", "error_now", "error_before"})
_SHOWN = {
    "same": "same",
    "equivalent": "equivalent",
    "different": "DIFFERENT",
    "nondeterministic": "nondeterministic",
    "error_now": "ERROR NOW",
    "error_before": "ERROR BEFORE",
    "not_run": "not run in the record",
    "skipped": "skipped",
}


@dataclass(frozen=True)
class CellResult:
    """The verdict on one cell of the replayed notebook."""

    index: int
    """0-based position in the notebook (markdown cells count)."""
    cell_type: str
    status: CellStatus
    source: str
    cell_id: str | None = None
    execution_count_before: int | None = None
    execution_count_now: int | None = None
    diff: str = ""
    """Unified diff of the normalised text outputs, ``recorded`` -> ``replayed``."""
    notes: tuple[str, ...] = ()
    """What else to know: image differences, why a cell was skipped, a lost kernel."""
    error_before: str | None = None
    error_now: str | None = None
    duration: float | None = None
    reasons: tuple[str, ...] = ()
    """Why an ``equivalent`` cell counts as the same, e.g. SVG attribute order."""
    masks: tuple[str, ...] = ()
    """The normalisation rules (masks) that changed this cell's text before comparing."""
    masked: tuple[Masked, ...] = ()
    """What each of those masks hid, in the record and in the replay (the rule's name and
    the texts), so a ``same`` a mask made can be checked by a person."""
    recorded: tuple[Mapping[str, Any], ...] = field(default=(), repr=False, compare=False)
    """The recorded outputs (for the HTML report; not in :meth:`to_dict`)."""
    replayed: tuple[Mapping[str, Any], ...] = field(default=(), repr=False, compare=False)
    """The replayed outputs, as judged (for the HTML report and ``--runs``)."""

    @property
    def number(self) -> int:
        """1-based position in the notebook, as the report names cells."""
        return self.index + 1

    @property
    def ok(self) -> bool:
        return self.status not in _BAD

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "cell_id": self.cell_id,
            "cell_type": self.cell_type,
            "status": self.status,
            "source": self.source,
            "execution_count_before": self.execution_count_before,
            "execution_count_now": self.execution_count_now,
            "diff": self.diff,
            "notes": list(self.notes),
            "error_before": self.error_before,
            "error_now": self.error_now,
            "duration": self.duration,
            "reasons": list(self.reasons),
            "masks": list(self.masks),
            "masked": [m.to_dict() for m in self.masked],
        }


@dataclass(frozen=True)
class ReplayReport:
    """What a replay found; ``reproduced`` is the one-word answer."""

    notebook: Path
    cells: tuple[CellResult, ...]
    output: Path | None = None
    """The notebook the replay was recorded to."""
    work_dir: Path | None = None
    until: int | None = None
    rules: tuple[str, ...] = ()
    """Names of the normalisation rules that were applied."""
    warnings: tuple[str, ...] = ()
    started: str = ""
    duration: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Facts about the source notebook, e.g. papermill's parameters, and the environments."""
    environment: tuple[str, ...] = ()
    """How the replay's environment differs from the recorded one, one sentence each."""
    runs: int = 1
    """How many times the notebook was replayed (2: nondeterministic cells were looked for)."""

    @property
    def reproduced(self) -> bool:
        """True when no replayed cell differs from the record or fails on one side only."""
        return all(c.ok for c in self.cells)

    @property
    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(_SHOWN, 0)
        for cell in self.cells:
            out[cell.status] += 1
        return out

    @property
    def problems(self) -> list[CellResult]:
        """The cells that make the replay not reproduced, in notebook order."""
        return [c for c in self.cells if not c.ok]

    def summary(self) -> str:
        counts = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in self.counts.items() if n)
        verdict = "reproduced" if self.reproduced else "NOT reproduced"
        return f"{verdict}: {counts or 'no cells'} ({self.duration:.1f} s)"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the server extension's replay response)."""
        return {
            "notebook": str(self.notebook),
            "output": None if self.output is None else str(self.output),
            "work_dir": None if self.work_dir is None else str(self.work_dir),
            "reproduced": self.reproduced,
            "counts": self.counts,
            "until": self.until,
            "rules": list(self.rules),
            "warnings": list(self.warnings),
            "started": self.started,
            "duration": self.duration,
            "extra": dict(self.extra),
            "environment_differences": list(self.environment),
            "runs": self.runs,
            "cells": [c.to_dict() for c in self.cells],
        }

    def to_markdown(self) -> str:
        """A readable report: a table of every cell, then the diff of each problem."""
        lines = [
            f"# Replay of `{self.notebook.name}`",
            "",
            f"**{self.summary()}**",
            "",
            f"- notebook: `{self.notebook}`",
        ]
        if self.output is not None:
            lines.append(f"- replayed notebook: `{self.output}`")
        if self.until is not None:
            lines.append(f"- replayed the first {self.until} code cell(s) only")
        lines.append(f"- normalisation rules: {', '.join(self.rules) or 'none'}")
        lines.extend(f"- environment: {line}" for line in self.environment)
        lines.extend(f"- warning: {w}" for w in self.warnings)
        lines += ["", "| cell | In (record → now) | status | first line |", "|---|---|---|---|"]
        for c in self.cells:
            counts = f"{_count(c.execution_count_before)} → {_count(c.execution_count_now)}"
            first = _first_line(c.source).replace("|", "\\|")
            lines.append(f"| {c.number} | {counts} | {_SHOWN[c.status]} | `{first}` |")
        for c in self.problems:
            lines += ["", f"## Cell {c.number}: {_SHOWN[c.status].lower()}", ""]
            lines += ["```python", c.source.rstrip(), "```"]
            if c.error_before:
                lines.append(f"- error in the record: `{c.error_before}`")
            if c.error_now:
                lines.append(f"- error now: `{c.error_now}`")
            lines.extend(f"- {note}" for note in c.notes)
            if c.masks:
                lines.append(f"- masks applied: {', '.join(c.masks)}")
            lines.extend(f"- mask {m.describe()}" for m in c.masked)
            if c.diff:
                lines += ["", "```diff", c.diff, "```"]
        hidden = [(c, m) for c in self.cells if c.ok for m in c.masked if m.recorded != m.replayed]
        if hidden:
            lines += ["", "## What the masks hid", ""]
            lines += ["| cell | status | rule | recorded | replayed |", "|---|---|---|---|---|"]
            for c, m in hidden:
                cells = (", ".join(f"`{t}`" for t in side) for side in (m.recorded, m.replayed))
                recorded, replayed = (t.replace("|", "\\|") for t in cells)
                lines.append(f"| {c.number} | {c.status} | {m.rule} | {recorded} | {replayed} |")
        return "\n".join(lines) + "\n"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _first_line(source: str, width: int = 60) -> str:
    line = next((ln for ln in source.splitlines() if ln.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


# -- progress --------------------------------------------------------------------------


class _Progress:
    """``[3/12] cell 5 ... same`` per cell on a stream; on a terminal, shown while running."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self.stream = stream
        self.total = total
        self.done = 0
        self.live = bool(getattr(stream, "isatty", lambda: False)())

    def _head(self, number: int) -> str:
        width = len(str(self.total))
        return f"[{self.done + 1:>{width}}/{self.total}] cell {number} ..."

    def start(self, number: int) -> None:
        if self.live:
            self.stream.write(self._head(number))
            self.stream.flush()

    def finish(self, result: CellResult) -> None:
        line = f"{self._head(result.number)} {_SHOWN[result.status]}"
        if result.reasons:
            line += f" ({'; '.join(result.reasons)})"
        if result.error_now:
            line += f" ({result.error_now.splitlines()[0][:100]})"
        self.stream.write(("\r" if self.live else "") + line + "\n")
        self.stream.flush()
        self.done += 1

    def revise(self, result: CellResult) -> None:
        """A verdict changed after a later cell changed what the cell shows."""
        self.stream.write(
            f"cell {result.number}: {_SHOWN[result.status]} on what it shows at the end "
            "(a later cell updated its display)\n"
        )
        self.stream.flush()
