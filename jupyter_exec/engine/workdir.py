"""Where a session records: its work dir and its notebook's path, checked before a kernel starts.

A starting session makes its work dir if need be (a temporary one when none
is given) and notes every folder it made, so a start that fails can remove
them again; the notebook's path is refused when it would clobber a notebook
by accident or resume one that is not there. Kept apart from the recording
because these run once, before there is anything to record, and their
errors are the caller's (a bad path), not the disk's during a cell.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

from jupyter_exec.boundary.naming import default_session_name, notebook_name
from jupyter_exec.exceptions import NotebookError, WorkDirError
from jupyter_exec.options import SessionOptions

__all__ = [
    "prepare_notebook_path",
    "prepare_paths",
    "prepare_work_dir",
    "remove_made",
]

log = logging.getLogger("jupyter_exec")


def prepare_paths(
    options: SessionOptions, made: list[Path], *, resume: bool
) -> tuple[Path, str, Path | None]:
    """A starting session's work dir (made if need be; ``made`` lists what was), its name
    and its notebook's path (None when recording is off)."""
    work_dir = prepare_work_dir(options.work_dir, made)
    name = options.name or default_session_name(work_dir)
    notebook = prepare_notebook_path(
        options.notebook, work_dir, name, resume=resume, overwrite=options.overwrite
    )
    return work_dir, name, notebook


def prepare_work_dir(given: Path | None, made: list[Path]) -> Path:
    """The work dir, created if missing (a fresh temporary one for ``None``).

    Every folder this call created is appended to ``made``, so a start that
    fails can remove them again (:func:`remove_made`).
    """
    if given is None:
        path = Path(tempfile.mkdtemp(prefix="jupyter-exec-"))
        made.append(path)
        log.warning("jupyter-exec: work dir %s (temporary, kept after the session)", path)
        return path
    path = given.expanduser().absolute()
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkDirError(f"cannot create the work dir {path}: {exc.strerror}") from exc
    made.extend(reversed(missing))
    if not path.is_dir():
        raise WorkDirError(f"the work dir {path} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise WorkDirError(f"the work dir {path} is not writable by this user")
    return path


def remove_made(made: list[Path], *, temporary: bool) -> None:
    """Undo :func:`prepare_work_dir`: a temporary dir goes whole, other folders only if empty."""
    for path in reversed(made):
        if temporary:
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.rmdir()


def prepare_notebook_path(
    given: Path | Literal[False] | None,
    work_dir: Path,
    name: str,
    *,
    resume: bool,
    overwrite: bool,
) -> Path | None:
    """Where the notebook goes (``None``: not recording), refusing to clobber one by accident."""
    if given is False:
        return None
    path = (work_dir / notebook_name(name) if given is None else given).expanduser().absolute()
    if path.suffix != ".ipynb":
        raise NotebookError(f"the notebook path {path} must end in .ipynb")
    if resume:
        if not path.is_file():
            raise NotebookError(f"cannot resume: no notebook at {path}")
        return path
    if path.exists() and not overwrite:
        raise NotebookError(
            f"{path} already exists; pass overwrite=True to replace it, "
            "or choose another notebook path or session name"
        )
    if not path.parent.is_dir():
        raise NotebookError(f"the folder of the notebook {path} does not exist")
    return path
