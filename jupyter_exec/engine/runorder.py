"""The order in which a notebook's cells ran, and who ran each, kept in the cells' metadata.

A notebook that one writer fills from top to bottom ran in the order it
reads. A shared one does not: a person may insert a cell at the top of the
agent's notebook and run it last, and the cells then sit in the order they
were placed, not run. Replaying such a file from the top fails. So every cell
a session records, and every cell a person runs on the session's kernel,
carries its place in the run order::

    cell.metadata.jupyter_exec.run = {"seq": 3, "by": "person"}
    cell.metadata.jupyter_exec.run = {"seq": 4, "by": "agent", "session": "agent"}

``seq`` counts runs in one notebook from 1, whoever ran the cell. Replay and
resume follow it (:func:`run_order`): the cells that carry a ``seq`` run in
its order, in the positions such cells occupy; every other cell (markdown,
a cell nobody was seen running, a notebook from elsewhere) keeps its place.
A notebook without any ``seq`` therefore runs top to bottom, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "PersonRun",
    "Runner",
    "match_runs",
    "max_seq",
    "run_order",
    "run_stamp",
    "seq_of",
]

Runner = Literal["agent", "person"]


def run_stamp(seq: int, by: Runner, session: str | None = None) -> dict[str, Any]:
    """The ``jupyter_exec.run`` entry of a cell that ran ``seq``-th, run by ``by``."""
    stamp: dict[str, Any] = {"seq": seq, "by": by}
    if session is not None:
        stamp["session"] = session
    return stamp


def seq_of(cell: Mapping[str, Any]) -> int | None:
    """The cell's place in the run order, if it has a valid one (a positive int)."""
    metadata = cell.get("metadata")
    ours = metadata.get("jupyter_exec") if isinstance(metadata, Mapping) else None
    run = ours.get("run") if isinstance(ours, Mapping) else None
    seq = run.get("seq") if isinstance(run, Mapping) else None
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        return None
    return seq


def max_seq(cells: Sequence[Mapping[str, Any]]) -> int:
    """The highest ``seq`` among ``cells`` (0: none), so a new run numbers on from it."""
    return max((s for c in cells if (s := seq_of(c)) is not None), default=0)


def run_order(cells: Sequence[Mapping[str, Any]]) -> list[int]:
    """The positions of ``cells`` in the order they ran.

    Cells with a ``seq`` are sorted by it (ties keep their placed order) and
    put back in the slots such cells hold; the others stay where they are.
    """
    slots = [i for i, c in enumerate(cells) if seq_of(c) is not None]
    ordered = sorted(slots, key=lambda i: (seq_of(cells[i]), i))
    order = list(range(len(cells)))
    for slot, index in zip(slots, ordered, strict=True):
        order[slot] = index
    return order


@dataclass(frozen=True)
class PersonRun:
    """An execute request on a session's kernel that the session itself did not send.

    Seen on the kernel's IOPub: its code (``execute_input``), the execution
    count the kernel gave it, whether it raised, and the Jupyter user named in
    its header (empty when the client sent none).
    """

    code: str
    execution_count: int | None
    ok: bool
    user: str = ""


def _source(cell: Mapping[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def match_runs(
    cells: Sequence[Mapping[str, Any]],
    runs: Sequence[tuple[int, PersonRun]],
    skip: Set[str] = frozenset(),
) -> dict[int, dict[str, Any]]:
    """Which of ``cells`` a person ran: cell position -> its ``jupyter_exec.run`` entry.

    The kernel does not say which cell a request came from, only its code and
    execution count; so each run (``(seq, run)``) goes to the first code cell
    with that source, preferring one that shows the run's execution count.
    Cells whose id is in ``skip`` (the agent's) are not candidates. A cell run
    several times takes the place of its first run that did not fail (a cell
    run again unchanged keeps its place), or of its last run if all failed.
    """
    claimed: dict[int, list[tuple[int, PersonRun]]] = {}
    for seq, run in runs:
        candidates = [
            i
            for i, c in enumerate(cells)
            if c.get("cell_type") == "code" and c.get("id") not in skip and _source(c) == run.code
        ]
        exact = [i for i in candidates if cells[i].get("execution_count") == run.execution_count]
        if candidates:
            claimed.setdefault((exact or candidates)[0], []).append((seq, run))
    stamps: dict[int, dict[str, Any]] = {}
    for index, ran in claimed.items():
        good = [(seq, run) for seq, run in ran if run.ok]
        seq, run = min(good, key=lambda r: r[0]) if good else max(ran, key=lambda r: r[0])
        stamp = run_stamp(seq, "person")
        if run.user:
            stamp["user"] = run.user
        stamps[index] = stamp
    return stamps
