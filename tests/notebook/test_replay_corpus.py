"""The notebooks of nbclient's and papermill's own test folders, replayed and judged.

They come from the package index at test time (``pip download --no-binary :all:``, the
sdists hold the test folders), cached under ``$JUPYTER_EXEC_TEST_CACHE`` (default
``~/.cache/jupyter-exec/test-sdists``), never copied into this tree: nbclient at the
installed version, ``tests/files/*.ipynb`` (23), and papermill ``PAPERMILL``,
``papermill/tests/notebooks/**/*.ipynb`` (24, two in gcs/ and s3/ folders): 47.

Every notebook is replayed in one kernel of its own, and every verdict that is not
``same`` / ``equivalent`` / ``not_run`` / ``skipped`` must be in :data:`NOT_REPLAYABLE`
with its reason (the table in docs/howto/replay.md). A new "different" fails the test:
either the judge is wrong (a person would call the cells the same) or the table is.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

import pytest

from jupyter_exec.exceptions import JupyterExecError
from jupyter_exec.notebook.replay import replay

PAPERMILL = "2.7.0"
NBCLIENT = metadata.version("nbclient")
TIMEOUT = 20.0

NOT_REPLAYABLE: dict[str, dict[int, tuple[str, str]] | tuple[str, str]] = {
    # notebook: {cell number: (verdict, why)}, or (error type, why) when it cannot start
    "Interrupt.ipynb": {1: ("different", "meant to be interrupted: nbclient's interrupt fixture")},
    "keyboard_interrupt.ipynb": {
        1: ("different", "meant to be interrupted: papermill's KeyboardInterrupt fixture")
    },
    "JupyterWidgets.ipynb": {
        1: ("error_now", "needs ipywidgets, which is not installed here"),
        2: ("error_now", "follows from cell 1 (no widget made)"),
    },
    "Output.ipynb": ("NotebookError", "not a valid notebook: a stream output has no name"),
    "broken.ipynb": {1: ("error_now", "meant to fail: Python 2 syntax, outputs written by hand")},
    "broken1.ipynb": {4: ("different", "meant to fail: its outputs were written by hand")},
    "broken2.ipynb": {1: ("different", "meant to fail: its outputs were written by hand")},
    "gcs-simple_notebook.ipynb": {
        10: ("error_now", "sleeps 10 s: papermill's timeout fixture (replayed with a 5 s limit)")
    },
    "notimplemented_translator.ipynb": ("NotebookError", "an R notebook; no R kernel here"),
    "test_autosave.ipynb": {
        1: ("different", "its recorded output is not this code's (a papermill fixture)")
    },
    "test_logging.ipynb": {3: ("error_now", "needs ggplot, a package long gone from the index")},
}
"""Every notebook of the 47 that does not replay clean, and why (no other is excluded)."""

SHORT_TIMEOUT = {"Interrupt.ipynb": 3.0, "keyboard_interrupt.ipynb": 3.0}
SHORT_TIMEOUT["gcs-simple_notebook.ipynb"] = 5.0
"""Notebooks meant to run into a limit, replayed with a short one to keep the test quick."""


def _cache() -> Path:
    import os

    root = os.environ.get("JUPYTER_EXEC_TEST_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "jupyter-exec"
    return base / "test-sdists"


def _sdist(name: str, version: str) -> Path:
    cache = _cache()
    found = cache / f"{name}-{version}.tar.gz"
    if not found.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "--disable-pip-version-check", "-q", "-d", str(cache), f"{name}=={version}"],
            check=True,
            timeout=300,
        )  # fmt: skip
    assert found.exists(), f"pip download did not leave {found.name} in {cache}"
    return found


def _extract(sdist: Path, inside: str, into: Path) -> list[Path]:
    """The notebooks under ``inside`` (and their folders' other files, e.g. python.png)."""
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.isfile() and inside in m.name]
        archive.extractall(into, members=members, filter="data")
    return sorted(p for p in into.rglob("*.ipynb"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("corpus")
    nbclient = _extract(_sdist("nbclient", NBCLIENT), "/tests/files/", root / "nbclient")
    papermill = _extract(
        _sdist("papermill", PAPERMILL), "/papermill/tests/notebooks/", root / "papermill"
    )
    assert (len(nbclient), len(papermill)) == (23, 24)
    return nbclient + papermill


def test_the_corpus_is_the_47_notebooks_and_every_exception_is_one_of_them(
    corpus: list[Path],
) -> None:
    assert len(corpus) == 47
    assert set(NOT_REPLAYABLE) <= {p.name for p in corpus}


@pytest.mark.parametrize("number", range(47))
def test_each_notebook_replays_clean_or_is_listed_with_a_reason(
    corpus: list[Path], number: int
) -> None:
    """One notebook per case (the corpus in its sorted order), so the 47 kernels spread
    over the test workers instead of running one after another in one test."""
    path = corpus[number]
    work = path.parent / f"replay-{path.stem.replace(' ', '_')}"
    work.mkdir()
    for sibling in path.parent.iterdir():  # the files a notebook reads (python.png)
        if sibling.is_file() and sibling.suffix != ".ipynb":
            shutil.copy(sibling, work / sibling.name)
    shutil.copy(path, work / path.name)
    found: dict[int, str] | str | None
    try:
        report = replay(work / path.name, timeout=SHORT_TIMEOUT.get(path.name, TIMEOUT))
    except JupyterExecError as exc:
        found = type(exc).__name__
    else:
        found = {c.number: c.status for c in report.cells if not c.ok} or None
        if path.name == "SVG.ipynb":  # the case the issue measured: attributes reordered
            (svg,) = [c for c in report.cells if c.status == "equivalent"]
            assert svg.reasons == ("SVG canonical form (attribute order, whitespace, comments)",)
    why = NOT_REPLAYABLE.get(path.name)
    expected: dict[int, str] | str | None = None
    if isinstance(why, tuple):
        expected = why[0]
    elif why is not None:
        expected = {n: verdict for n, (verdict, _) in why.items()}
    assert found == expected, path.name
