"""``jupyter-exec run --resume NOTEBOOK [FILE]``: carry on a recorded session where it stopped.

The resume itself is :meth:`jupyter_exec.Session.resume` (the notebook's state
rebuilt in a fresh kernel, then the notebook becomes the live record, so new
cells are appended to it, numbering on). This module checks the flag before
any kernel starts, so a missing, mistyped or damaged notebook costs no kernel
start and ends the run with one line and exit status 2, and it says after the
start what came back.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.exceptions import InvalidArgument, NotebookError

if TYPE_CHECKING:
    from jupyter_exec.sync import Session

__all__ = ["add_resume", "check_resumable", "resume_session", "resumed_line"]


def add_resume(parser: argparse.ArgumentParser) -> None:
    """``--resume NOTEBOOK``: the recorded session a run carries on."""
    group = parser.add_argument_group("carry on a recorded session")
    group.add_argument(
        "--resume",
        metavar="NOTEBOOK",
        help="rebuild the state of the session that recorded NOTEBOOK (its code cells re-run "
        "in a fresh kernel, nothing written), then run FILE's cells in it, appended to the "
        "same notebook; without FILE, only the state comes back (a check that it still "
        "does). Work dir and name default to the notebook's folder and stem, so output "
        "files go on in <name>_files. A missing or damaged notebook stops before any "
        "kernel starts (exit 2)",
    )


def check_resumable(spec: str) -> Path:
    """The notebook ``spec`` names, read whole once; our :class:`NotebookError` if it is not one.

    Checked before a kernel starts: the resume reads it again when it runs.
    """
    from jupyter_exec.engine.recorder import read_notebook

    if not spec.strip():
        raise InvalidArgument("--resume is empty: give the notebook a session recorded")
    path = Path(spec).expanduser()
    if path.suffix != ".ipynb":
        raise NotebookError(f"--resume {spec}: a session's record is a .ipynb notebook")
    if not path.is_file():
        raise NotebookError(
            f"--resume {spec}: no such notebook (a session records <work dir>/<name>.ipynb)"
        )
    read_notebook(path)  # missing, not UTF-8, not JSON, not a notebook: said here
    return path


def resume_session(notebook: Path, kwargs: dict[str, Any]) -> Session:
    """An unstarted session that resumes ``notebook`` with the run's session options."""
    from jupyter_exec.sync import Session

    options = {k: v for k, v in kwargs.items() if k not in ("work_dir", "name", "overwrite")}
    return Session.resume(
        notebook,
        work_dir=kwargs.get("work_dir"),
        name=kwargs.get("name"),
        start=False,
        **options,
    )


def resumed_line(session: Session, quiet: bool) -> None:
    """One line on stderr: how many recorded cells rebuilt the state, and which failed."""
    if quiet:
        return
    rerun = session.resumed
    failed = [str(n) for n, e in zip(session.resumed_cells, rerun, strict=True) if not e.ok]
    line = f"resumed {session.notebook_path}: {len(rerun)} recorded cell(s) re-run"
    if failed:
        line += f"; failed again: cell(s) {', '.join(failed)} (their state may be missing)"
    print(line, file=sys.stderr, flush=True)
