"""Exit statuses of ``jupyter-exec``: one table from our error types to codes, one place to print.

Every subcommand returns its own status for its own outcome (0 done, 1 a cell
failed or a replay differs); everything that goes wrong around it is one of
our exceptions and ends here, printed as one line (the message says what to
fix) and mapped to a documented code. A foreign exception is a bug: it is
reported as one and shown with its traceback only under ``-v``.
"""

from __future__ import annotations

import sys
import traceback
from typing import TextIO

from jupyter_exec.exceptions import (
    CheckpointError,
    ExecutionError,
    ExecutionTimeout,
    InvalidArgument,
    JupyterExecError,
    NotebookError,
    SessionConflict,
    WorkDirError,
)
from jupyter_exec.models import TIMEOUT_EXIT_CODE

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_STATUS_HELP",
    "EXIT_TIMEOUT",
    "EXIT_TROUBLE",
    "EXIT_USAGE",
    "exit_status",
    "report",
    "signal_status",
]

EXIT_OK = 0
EXIT_FAILED = 1
"""The user's code failed (a cell raised), or a replay did not reproduce."""
EXIT_USAGE = 2
"""A bad argument or input file: fix the command line or the file (argparse uses 2 too)."""
EXIT_TROUBLE = 3
"""jupyter-exec could not do its work: a kernel would not start, Docker is missing, ..."""
EXIT_TIMEOUT = TIMEOUT_EXIT_CODE
"""A cell ran past its timeout (124, as coreutils ``timeout`` exits)."""
EXIT_INTERNAL = 70
"""An unexpected error: a bug in jupyter-exec (``EX_SOFTWARE`` of sysexits.h)."""

_TABLE: tuple[tuple[type[BaseException], int], ...] = (
    (ExecutionTimeout, EXIT_TIMEOUT),
    (ExecutionError, EXIT_FAILED),
    (InvalidArgument, EXIT_USAGE),
    (NotebookError, EXIT_USAGE),
    (WorkDirError, EXIT_USAGE),
    (SessionConflict, EXIT_USAGE),
    (CheckpointError, EXIT_USAGE),  # a damaged, partial or foreign checkpoint given to use
    (JupyterExecError, EXIT_TROUBLE),
)
"""Most specific first: the first class an error is an instance of gives its status."""

EXIT_STATUS_HELP = f"""\
exit status:
  {EXIT_OK}    done (run: every cell ran; replay: the notebook reproduced)
  {EXIT_FAILED}    a cell raised an error, or a replay differs
  {EXIT_USAGE}    bad arguments or input (missing, unreadable or malformed file, bad name,
       a damaged checkpoint or one from another environment)
  {EXIT_TROUBLE}    jupyter-exec could not do it (kernel start, Docker, a remote server, ...)
  {EXIT_INTERNAL}   an unexpected error in jupyter-exec itself (please report it)
  {EXIT_TIMEOUT}  a cell ran past --timeout
  128+N  stopped by signal N after cleaning up (130 Ctrl-C, 129 SIGHUP, 143 SIGTERM)
"""


def exit_status(error: BaseException) -> int:
    """The documented exit status for ``error``."""
    for kind, status in _TABLE:
        if isinstance(error, kind):
            return status
    return EXIT_INTERNAL


def signal_status(signum: int) -> int:
    """The conventional status of a process stopped by ``signum``: 128 + its number."""
    return 128 + int(signum)


def report(error: BaseException, *, verbose: bool = False, err: TextIO | None = None) -> int:
    """Print ``error`` for a person and return its exit status."""
    out = err if err is not None else sys.stderr
    status = exit_status(error)
    if status == EXIT_INTERNAL:
        name = type(error).__name__
        out.write(f"jupyter-exec: internal error: {name}: {error}\n")
        if verbose:
            traceback.print_exception(type(error), error, error.__traceback__, file=out)
        else:
            out.write("(run again with -v for the traceback, and please report it)\n")
    else:
        out.write(f"jupyter-exec: error: {error}\n")
    out.flush()
    return status
