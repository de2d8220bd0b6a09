"""``jupyter-exec checkpoints``: the durable checkpoints in a work dir, listed and checked.

Checkpoints are written by sessions (``session.checkpoint()``, or automatically
with ``checkpoint_every``) into ``<work dir>/.<session>_checkpoints/<name>/``.
``list`` reads their manifests (no file is unpickled, no link followed);
``verify`` checks one whole (this host's MAC over its manifest, every file's
sha256), as a restore would. Restoring is ``session.restore(path)``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_exec.boundary.trust import TRUST_CLI_FLAG, origin_words
from jupyter_exec.cli.commands import Command
from jupyter_exec.cli.exits import EXIT_OK, EXIT_STATUS_HELP

if TYPE_CHECKING:
    from jupyter_exec.state.checkpoints import Checkpoint

__all__ = ["CHECKPOINTS_COMMAND", "sessions_in"]

PREFIX, SUFFIX = ".", "_checkpoints"
"""Around a session's name in its checkpoints folder (``naming.checkpoints_folder``)."""

DESCRIPTION = f"""\
Sessions write checkpoints (session.checkpoint(), or automatically every
checkpoint_every seconds) into <work dir>/.<session>_checkpoints/<name>/. 'list' reads
their manifests (nothing is unpickled, no link followed); 'verify' checks one whole
(this host's MAC over its manifest and every file's sha256), as a restore would.
A checkpoint is signed with a key this host keeps (see the state how-to); one
written by a Docker kernel loads into a kernel on this host only with
jupyter-exec run --restore ... {TRUST_CLI_FLAG}."""

EPILOG = f"""\
examples:
  jupyter-exec checkpoints list analysis          every session's checkpoints in a work dir
  jupyter-exec checkpoints list analysis --json   the same as JSON, one object per checkpoint
  jupyter-exec checkpoints verify analysis/.main_checkpoints/loaded
                                                  check one whole before moving it

Restore one into a session (on this machine, or another that shares its checkpoint
key, with the same Python and library versions) with session.restore("<path>"), or
start a run from it with jupyter-exec run FILE --restore <path or name>; see the
state how-to.

{EXIT_STATUS_HELP}"""


def _checkpoints_arguments(parser: argparse.ArgumentParser) -> None:
    """The actions of ``jupyter-exec checkpoints``: ``list`` and ``verify``."""
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    LIST_COMMAND.register(actions)
    VERIFY_COMMAND.register(actions)


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``jupyter-exec checkpoints list``."""
    parser.add_argument("work_dir", type=Path, metavar="WORK_DIR")
    parser.add_argument("--session", help="only this session's checkpoints")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _verify_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``jupyter-exec checkpoints verify``."""
    parser.add_argument("path", type=Path, metavar="CHECKPOINT")


def sessions_in(work_dir: Path, only: str | None) -> list[str]:
    """The sessions with a checkpoints folder in ``work_dir`` (``only``: just that one)."""
    if only is not None:
        return [only]
    try:
        names = sorted(os.listdir(work_dir))
    except OSError as exc:
        from jupyter_exec.exceptions import WorkDirError

        raise WorkDirError(f"cannot read the work dir {work_dir}: {exc.strerror}") from None
    return [
        n[len(PREFIX) : -len(SUFFIX)]
        for n in names
        if n.startswith(PREFIX) and n.endswith(SUFFIX) and len(n) > len(PREFIX + SUFFIX)
    ]


def _summary(checkpoint: Checkpoint) -> dict[str, object]:
    return {
        "session": checkpoint.session,
        "name": checkpoint.name,
        "path": str(checkpoint.path),
        "cell_index": checkpoint.cell_index,
        "created": checkpoint.created.isoformat(),
        "automatic": checkpoint.automatic,
        "size": checkpoint.size,
        "names": list(checkpoint.names),
        "skipped": dict(checkpoint.skipped),
        "origin": dict(checkpoint.origin),
        "python": checkpoint.environment.get("python"),
        "libraries": dict(checkpoint.environment.get("libraries") or {}),
    }


def cmd_list(args: argparse.Namespace) -> int:
    from jupyter_exec.state.checkpoints import on_disk

    found = [c for s in sessions_in(args.work_dir, args.session) for c in on_disk(args.work_dir, s)]
    if args.json:
        json.dump([_summary(c) for c in found], sys.stdout, indent=2)
        print()
        return EXIT_OK
    if not found:
        print(f"no checkpoints in {args.work_dir}")
        return EXIT_OK
    print(
        f"{'session':16} {'checkpoint':16} {'cell':>5} {'size':>10}  {'origin':7}  "
        "created (UTC)        names"
    )
    for c in found:
        names = f"{len(c.names)} stored"
        if c.skipped:
            names += f", skipped: {', '.join(c.skipped)}"
        print(
            f"{c.session:16} {c.name:16} {c.cell_index + 1:>5} {_size(c.size):>10}  "
            f"{c.origin.get('backend', '?'):7}  {c.created:%Y-%m-%d %H:%M:%S}  {names}"
        )
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from jupyter_exec.state.checkpoints import Checkpoint

    checkpoint = Checkpoint.load(args.path)  # CheckpointError: exits with its status
    env = checkpoint.environment
    libraries = ", ".join(f"{k} {v}" for k, v in sorted((env.get("libraries") or {}).items()))
    print(
        f"{checkpoint.path}: whole ({len(checkpoint.names)} names, {_size(checkpoint.size)}) "
        f"and signed by this host; written by {origin_words(checkpoint.origin)}; "
        f"Python {env.get('python')}; {libraries or 'no third-party libraries'}"
    )
    for name, reason in checkpoint.skipped.items():
        print(f"  not stored: {name}: {reason}")
    return EXIT_OK


def _size(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000  # type: ignore[assignment]
    return str(size)


LIST_COMMAND = Command(
    "list",
    help="the checkpoints of every session in WORK_DIR",
    arguments=_list_arguments,
    run=cmd_list,
)

VERIFY_COMMAND = Command(
    "verify",
    help="check one checkpoint folder whole (manifest and every file's sha256)",
    arguments=_verify_arguments,
    run=cmd_verify,
)

CHECKPOINTS_COMMAND = Command(
    "checkpoints",
    help="list and check the durable checkpoints in a work dir",
    description=DESCRIPTION,
    epilog=EPILOG,
    arguments=_checkpoints_arguments,
)
