"""``jupyter-exec run --restore CHECKPOINT``: start a run from a checkpoint's state.

The restore itself is :meth:`jupyter_exec.Session.restore` (checked whole, the
environment compared, recorded in the notebook); this module turns the flag
into a checkpoint folder before any kernel starts, so a missing one costs no
kernel start, and restores it after the start and before the file's first
cell, so a damaged or foreign checkpoint ends the run (one line, exit status
2) with none of the file run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_exec.boundary.naming import checkpoints_folder
from jupyter_exec.boundary.trust import TRUST_CLI_FLAG
from jupyter_exec.cli.checkpoints import sessions_in
from jupyter_exec.exceptions import CheckpointError, InvalidArgument

if TYPE_CHECKING:
    from jupyter_exec.sync import Session

__all__ = ["add_restore", "find_checkpoint", "restore_into"]


def add_restore(parser: argparse.ArgumentParser) -> None:
    """``--restore`` and ``--force-restore``: the state a run starts from."""
    group = parser.add_argument_group("start from a checkpoint")
    group.add_argument(
        "--restore",
        metavar="CHECKPOINT",
        help="load this checkpoint into the kernel before the first cell: a checkpoint's "
        "folder, or the name of one in --work-dir (session.checkpoint(name) or an automatic "
        "auto-<k>); a damaged one, or one from another environment, stops the run before "
        "any cell (exit 2)",
    )
    group.add_argument(
        "--force-restore",
        action="store_true",
        help="load a --restore checkpoint taken in another environment (other Python or "
        "library versions) anyway, at your risk (restore(..., force=True))",
    )
    group.add_argument(
        TRUST_CLI_FLAG,
        dest="trust_checkpoint_origin",
        action="store_true",
        help="load a --restore checkpoint that a Docker (or remote) kernel wrote into a kernel "
        "on this host: loading unpickles what that kernel wrote, code included, so only for a "
        "container whose code you trust (restore(..., trust_origin=True)); a Docker kernel "
        "loads one without it",
    )


def _is_path(text: str) -> bool:
    return "/" in text or os.sep in text or text in (".", "..")


def find_checkpoint(spec: str, work_dir: Path | None, session: str) -> Path:
    """The folder ``spec`` names: a path, or a checkpoint's name in ``work_dir``.

    A name is looked up among the checkpoints of every session in the work dir,
    ``session``'s own first; a name two other sessions both have is refused with
    their paths, to be given instead. Only the folder is found here: whether it
    is whole is for the restore to check.
    """
    if not spec:
        raise InvalidArgument("--restore is empty: give a checkpoint's folder or name")
    if _is_path(spec):
        folder = Path(spec).expanduser()
        if not folder.is_dir():
            raise InvalidArgument(f"--restore {spec}: no such checkpoint folder")
        return folder
    if work_dir is not None and work_dir.is_dir():
        own = work_dir / checkpoints_folder(session) / spec
        if own.is_dir():
            return own
        found = [
            work_dir / checkpoints_folder(other) / spec
            for other in sessions_in(work_dir, None)
            if (work_dir / checkpoints_folder(other) / spec).is_dir()
        ]
        if len(found) == 1:
            return found[0]
        if found:
            paths = ", ".join(str(f) for f in found)
            raise InvalidArgument(
                f"--restore {spec}: sessions in {work_dir} have checkpoints of that name: "
                f"{paths}; give one of these folders"
            )
    if Path(spec).is_dir():  # a folder in the current directory, named without a slash
        return Path(spec)
    where = f"in {work_dir}" if work_dir is not None else "without --work-dir"
    raise InvalidArgument(
        f"--restore {spec}: no checkpoint of that name {where}; give its folder "
        "(jupyter-exec checkpoints list WORK_DIR shows them)"
    )


def restore_into(
    session: Session, folder: Path, *, force: bool, quiet: bool, trust_origin: bool = False
) -> None:
    """Load ``folder`` into ``session`` (a :class:`CheckpointError` when it is refused)."""
    from jupyter_exec.state.checkpoints import read_checkpoint

    session.restore(folder, force=force, trust_origin=trust_origin)
    if quiet:
        return
    try:
        made = read_checkpoint(folder.absolute().parent, folder.name, verify=False)
    except CheckpointError:  # loaded, then changed on disk: the notebook says what came back
        print(f"restored {folder}", file=sys.stderr)
        return
    line = f"restored checkpoint {made.name!r} from {folder}: {len(made.names)} name(s)"
    if made.skipped:
        line += f"; not stored then: {', '.join(made.skipped)}"
    print(line, file=sys.stderr, flush=True)
