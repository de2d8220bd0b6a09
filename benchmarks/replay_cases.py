"""Replay against nbclient: the per-cell cost of re-running a notebook *and* checking it.

nbclient executes a notebook; ``jupyter_exec.notebook.replay`` executes it, records
the replay as a notebook (files for rich outputs, an atomic save per cell)
and compares every cell with its record. Both run the same notebook in the
same process, alternating, so machine drift hits both alike.

Per cell is the steady state, without kernel start and stop (whose noise is
larger than a cell's cost): the time between the first and the last cell's
completion hook (our ``on_cell``, nbclient's ``on_cell_executed``), divided by
the cells in between. Totals (with kernel start) are reported as well.

``python -m benchmarks.replay_cases [--quick]``
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from benchmarks.core import Config, Row, case
from jupyter_exec.notebook.replay import replay

__all__ = ["replay_overhead"]

RowTuple = tuple[str, float, float, str]

_CELLS: dict[str, tuple[str, Callable[[int], str], str]] = {
    "trivial": ("", lambda i: f"x{i} = {i} * 2\nprint(x{i})", "an assignment and a print"),
    "rich": (
        "from IPython.display import HTML, display\nfrom PIL import Image",
        lambda i: (
            f"print('cell {i}')\n"
            f"display(HTML('<b>{i}</b>'))\n"
            f"Image.new('RGB', (64, 48), ({i % 256}, 90, 160))"
        ),
        "a print, an HTML display and a 64x48 PNG+JPEG image",
    ),
    "meaning": (
        "from IPython.display import SVG, HTML, JSON, display",
        lambda i: (
            f"print('loss', {i} / 7)\n"
            f'display(SVG(\'<svg width="{i + 1}" height="10"><rect x="1" y="2"/></svg>\'))\n'
            f'display(HTML(\'<table class="dataframe"><tr><th>x</th></tr>'
            f"<tr><td>{i / 3}</td></tr></table>'))\n"
            f"JSON({{'cell': {i}, 'ratio': {i / 9}}})"
        ),
        "a print with a float, an SVG, a DataFrame-like table and JSON, each recorded in "
        "other bytes of the same meaning (SVG attributes reordered, table numbers off by "
        "1e-12, JSON keys reordered), so every cell is judged by the MIME rules (--rtol 1e-9)",
    ),
}


def _reword(nb: nbformat.NotebookNode) -> None:
    """The record in other bytes of the same meaning: what the MIME rules must see through."""
    for cell in nb.cells:
        for output in cell.get("outputs", ()):
            data = output.get("data", {})
            if "image/svg+xml" in data:
                svg = "".join(data["image/svg+xml"])
                data["image/svg+xml"] = svg.replace(' height="10"', "").replace(
                    "<svg ", '<svg height="10" '
                )
            if "text/html" in data:
                html = "".join(data["text/html"])
                start = html.index("<td>") + 4
                end = html.index("</td>")
                data["text/html"] = f"{html[:start]}{float(html[start:end]) + 1e-12!r}{html[end:]}"
            if "application/json" in data:
                data["application/json"] = dict(reversed(list(data["application/json"].items())))


def _notebook(kind: str, cells: int) -> nbformat.NotebookNode:
    setup, make, _ = _CELLS[kind]
    sources = ([setup] if setup else []) + [make(i) for i in range(cells)]
    nb: nbformat.NotebookNode = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    return nb


Timing = tuple[float, float]
"""(total seconds, seconds per cell in the steady state)."""


def _per_cell(marks: list[float]) -> float:
    return (marks[-1] - marks[0]) / (len(marks) - 1)


def _nbclient_run(nb: nbformat.NotebookNode, cwd: Path) -> Timing:
    marks: list[float] = []
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
        on_cell_executed=lambda **_: marks.append(time.perf_counter()),
    )
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start, _per_cell(marks)


def _ours_run(path: Path, cwd: Path) -> Timing:
    marks: list[float] = []
    start = time.perf_counter()
    report = replay(
        path,
        work_dir=cwd,
        output=cwd / "replayed.ipynb",
        timeout=600,
        rtol=1e-9,
        on_cell=lambda _: marks.append(time.perf_counter()),
    )
    elapsed = time.perf_counter() - start
    if not report.reproduced:  # a fast wrong answer is no result
        raise RuntimeError(f"benchmark notebook did not reproduce: {report.summary()}")
    if path.stem.startswith("meaning") and report.counts["equivalent"] != len(marks) - 1:
        raise RuntimeError(f"the MIME rules were not what judged the cells: {report.summary()}")
    return elapsed, _per_cell(marks)


def _measure(kind: str, cells: int, repeats: int, root: Path) -> tuple[list[Timing], list[Timing]]:
    recorded = _notebook(kind, cells)
    _nbclient_run(recorded, root)  # the record to compare against (and a warm-up)
    if kind == "meaning":
        _reword(recorded)
    # The notebook alone in its folder: a replay copies its folder's inputs into the work dir,
    # so the runs' scratch folders must not lie beside it (each would copy the ones before).
    path = root / f"{kind}-{cells}" / f"{kind}-{cells}.ipynb"
    path.parent.mkdir()
    nbformat.write(recorded, path)
    ours: list[Timing] = []
    theirs: list[Timing] = []
    for i in range(repeats):
        print(f"replay bench: {kind} x{cells}, repeat {i + 1}/{repeats}", file=sys.stderr)
        scratch = Path(tempfile.mkdtemp(dir=root, prefix="run-"))
        first_ours = i % 2 == 0
        for which in ("ours", "nbclient") if first_ours else ("nbclient", "ours"):
            if which == "ours":
                ours.append(_ours_run(path, scratch))
            else:
                theirs.append(_nbclient_run(nbformat.read(path, as_version=4), scratch))
    return ours, theirs


def replay_overhead(quick: bool = False) -> list[RowTuple]:
    """Rows ``(case, ours_seconds, nbclient_seconds, notes)``: per cell and total, per notebook."""
    cells, repeats = (20, 2) if quick else (100, 5)
    med = statistics.median
    rows: list[RowTuple] = []
    with tempfile.TemporaryDirectory(prefix="jx-replay-bench-") as tmp:
        for kind, (_, _, what) in _CELLS.items():
            ours, theirs = _measure(kind, cells, repeats, Path(tmp))
            rows.append(
                (
                    f"replay {kind} cells: per cell (median)",
                    med(t[1] for t in ours),
                    med(t[1] for t in theirs),
                    f"n={repeats} runs of {cells} cells, each {what}; steady state, "
                    "no kernel start; ours also records, saves output files and compares",
                )
            )
            rows.append(
                (
                    f"replay {kind} cells: {cells}-cell notebook total (median)",
                    med(t[0] for t in ours),
                    med(t[0] for t in theirs),
                    f"n={repeats}; incl. reading, kernel start and shutdown",
                )
            )
    return rows


if __name__ == "__main__":
    for row in replay_overhead(quick="--quick" in sys.argv):
        name, ours, theirs, notes = row
        print(f"{name:48} ours {ours * 1000:8.1f} ms  nbclient {theirs * 1000:8.1f} ms  {notes}")


@case("replay")
def replay_case(cfg: Config) -> list[Row]:
    """Replay of a notebook vs nbclient executing the same notebook (per cell and in total)."""
    rows = []
    for name, ours, theirs, notes in replay_overhead(quick=cfg.quick):
        per_cell = "per cell" in name
        scale, unit = (1000.0, "ms") if per_cell else (1.0, "s")
        rows.append(Row(name, ours * scale, theirs * scale, unit, f"floor = nbclient; {notes}"))
    return rows


# -- the corpus: real notebooks, the same ones the replay test judges ------------------------


def _corpus_notebooks(
    root: Path, limit: int | None, *, plots: bool = False
) -> list[tuple[str, Path]]:
    """The corpus of ``tests/notebook/test_replay_corpus.py`` (its sources, cache and pins:
    one mechanism), less the notebooks that cannot start or are meant to run into a limit;
    ``plots``: only those that draw with matplotlib (:func:`_draws_plots`)."""
    import importlib.util

    test = Path(__file__).resolve().parent.parent / "tests/notebook/test_replay_corpus.py"
    spec = importlib.util.spec_from_file_location("_replay_corpus", test)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {test}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    found: list[tuple[str, Path]] = []
    for source in module.SOURCES:
        for name, path in module._extract(source, root / source.name).items():
            why = module.NOT_REPLAYABLE.get(name)
            if isinstance(why, tuple) or name in module.SHORT_TIMEOUT:
                continue
            if plots and not _draws_plots(path):
                continue
            found.append((name, path))
    return found[:limit]


def _draws_plots(path: Path) -> bool:
    """A notebook whose code names matplotlib (``import matplotlib``, ``%matplotlib``,
    ``%pylab``, ``.plot(``) and whose record holds an image: where a replay pays for what a
    plotting library brings into the kernel."""
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(str(c.source) for c in nb.cells if c.cell_type == "code")
    images = any(
        mime in output.get("data", {})
        for cell in nb.cells
        for output in cell.get("outputs", ())
        for mime in ("image/png", "image/svg+xml")
    )
    return images and any(word in code for word in ("matplotlib", "pylab", ".plot("))


def _fresh_copy(path: Path, into: Path) -> Path:
    """The notebook and its folder's other files in a new folder (what each run starts from)."""
    import shutil

    into.mkdir(parents=True)
    for sibling in path.parent.iterdir():
        if sibling.is_file():
            shutil.copy(sibling, into / sibling.name)
    return into / path.name


def _corpus_times(path: Path, scratch: Path, first_ours: bool) -> tuple[float, float]:
    """(ours, nbclient) seconds for one notebook, each from a fresh copy, kernel start included."""
    times: dict[str, float] = {}
    for which in ("ours", "nbclient") if first_ours else ("nbclient", "ours"):
        copy = _fresh_copy(path, scratch / which)
        start = time.perf_counter()
        if which == "ours":
            replay(copy, timeout=20)
        else:
            nb = nbformat.read(copy, as_version=4)
            client = NotebookClient(
                nb,
                timeout=20,
                kernel_name="python3",
                allow_errors=True,
                resources={"metadata": {"path": str(copy.parent)}},
            )
            # Autokill.ipynb: nbclient stops there; the replay reports and goes on
            with contextlib.suppress(DeadKernelError, CellTimeoutError):
                client.execute()
        times[which] = time.perf_counter() - start
    return times["ours"], times["nbclient"]


def corpus_overhead(quick: bool = False) -> list[RowTuple]:
    """Rows: the summed time to run the corpus notebooks, replay (run, record, judge) against
    nbclient (run), each notebook alternating which goes first."""
    with tempfile.TemporaryDirectory(prefix="jx-replay-corpus-") as tmp:
        root = Path(tmp)
        notebooks = _corpus_notebooks(root / "corpus", 12 if quick else None)
        ours: list[float] = []
        theirs: list[float] = []
        for i, (name, path) in enumerate(notebooks):
            print(f"replay corpus bench: {i + 1}/{len(notebooks)} {name}", file=sys.stderr)
            a, b = _corpus_times(path, root / f"run{i}", first_ours=i % 2 == 0)
            ours.append(a)
            theirs.append(b)
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    return [
        (
            f"replay corpus: {len(notebooks)} real notebooks, summed",
            sum(ours),
            sum(theirs),
            "the replay test's corpus (nbclient, papermill, nbval, nbconvert, nbformat, "
            "jupytext, nbstripout, pytest-notebook), less those that cannot start or sleep "
            "into a limit; each notebook from a fresh copy, kernel start included; ours also "
            "records and judges every cell",
        ),
        (
            "replay corpus: per notebook, median of ours/nbclient",
            statistics.median(ratios),
            1.0,
            f"n={len(ratios)}; the ratio of the two times per notebook",
        ),
    ]


def plots_overhead(quick: bool = False) -> list[RowTuple]:
    """Rows: the corpus notebooks that draw with matplotlib, replay against nbclient, each
    notebook run ``repeats`` times alternating which goes first (summed, and the median
    per-notebook ratio)."""
    repeats = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="jx-replay-plots-") as tmp:
        root = Path(tmp)
        notebooks = _corpus_notebooks(root / "corpus", None, plots=True)
        ours: dict[str, list[float]] = {}
        theirs: dict[str, list[float]] = {}
        for r in range(repeats):
            for i, (name, path) in enumerate(notebooks):
                print(f"replay plots bench: {r + 1}/{repeats} {name}", file=sys.stderr)
                a, b = _corpus_times(path, root / f"run{r}-{i}", first_ours=(i + r) % 2 == 0)
                ours.setdefault(name, []).append(a)
                theirs.setdefault(name, []).append(b)
    med = statistics.median
    ratios = [med(ours[n]) / med(theirs[n]) for n in ours]
    return [
        (
            f"replay plots: {len(notebooks)} corpus notebooks that plot, summed medians",
            sum(med(t) for t in ours.values()),
            sum(med(t) for t in theirs.values()),
            f"n={repeats} runs of each; the corpus notebooks whose code names matplotlib and "
            "whose record holds an image; each from a fresh copy, kernel start included, "
            "alternating which goes first; ours also records and judges every cell",
        ),
        (
            "replay plots: per notebook, median of ours/nbclient",
            med(ratios),
            1.0,
            f"n={len(ratios)}; the ratio of the two median times per notebook",
        ),
    ]


@case("replay-plots")
def replay_plots_case(cfg: Config) -> list[Row]:
    """Replay of the corpus notebooks that plot vs nbclient executing them."""
    rows = []
    for name, ours, theirs, notes in plots_overhead(quick=cfg.quick):
        unit = "x" if "ratio" in notes else "s"
        rows.append(Row(name, ours, theirs, unit, f"floor = nbclient; {notes}"))
    return rows


@case("replay-corpus")
def replay_corpus_case(cfg: Config) -> list[Row]:
    """Replay of the corpus's real notebooks vs nbclient executing them (summed, per notebook)."""
    rows = []
    for name, ours, theirs, notes in corpus_overhead(quick=cfg.quick):
        unit = "x" if "ratio" in notes else "s"
        rows.append(Row(name, ours, theirs, unit, f"floor = nbclient; {notes}"))
    return rows
