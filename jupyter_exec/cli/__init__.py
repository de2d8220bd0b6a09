"""The ``jupyter-exec`` command (also ``jupyter exec`` and ``python -m jupyter_exec``).

One parser, built by :func:`build_parser` (the documentation generates the
command-line reference from it), one :func:`main`. Each subcommand lives in
its own module as one :class:`~jupyter_exec.cli.commands.Command` record (its
words, its arguments, what runs it; :data:`COMMANDS` lists them) and takes the
option groups of :mod:`~jupyter_exec.cli.options`;
every error ends in :mod:`~jupyter_exec.cli.exits` (one table from our error
types to exit statuses), and SIGTERM and SIGHUP stop a command as Ctrl-C does
(:mod:`~jupyter_exec.cli.signals`)::

    run, demo        cli/run.py       a file's code (or the demo) in one session
    replay           cli/replay.py    re-run a notebook, report what differs
    mcp              cli/mcp.py       the MCP server (stdio or HTTP)
    e2b              cli/e2b.py       the E2B-compatible sandbox server
    image, reap      cli/docker.py    the Docker kernel image, orphaned containers
    kernels          cli/kernels.py   each language's kernel; the Docker kernelspec
    checkpoints      cli/checkpoints.py   list and verify a work dir's checkpoints
    gateway          cli/gateway.py   a kernel gateway placing kernels on hosts over SSH
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jupyter_exec._version import __version__

if TYPE_CHECKING:
    from jupyter_exec.cli.commands import Command

__all__ = ["build_parser", "main"]

# The command modules (and what they import) load only when a parser is built: ``--version``,
# answered before that, reads the version alone (``tests/cli/test_startup_imports.py``).

EPILOG = """\
examples:
  jupyter-exec demo                         a short analysis: state, a plot, a notebook
  jupyter-exec run analysis.py              run a script (cells split on '# %%' lines)
  jupyter-exec run steps.md --work-dir out  run a markdown file's code blocks in one session
  jupyter-exec run old.ipynb --timeout 60   re-run a notebook's code cells, recorded anew
  jupyter-exec run job.py --python .venv    use another interpreter or virtual environment
  jupyter-exec run job.py --backend docker  run in a hardened, network-less container
  jupyter-exec run job.py --env venv --package polars   in a venv made on demand
  jupyter-exec replay nb.ipynb              re-run a notebook and check it reproduces
  jupyter-exec mcp                          an MCP server (stdio) for LLM clients
  jupyter-exec image build --pip scikit-learn   build the Docker kernel image
  jupyter-exec kernels install              add "Python 3 (Docker)" to JupyterLab
  jupyter-exec gateway --hosts n1,n2        a kernel gateway starting kernels on n1, n2 (SSH)
  jupyter-exec COMMAND --help               each command's options and examples

Every run records a notebook (<work dir>/<name>.ipynb) and saves rich outputs
(plots, HTML, JSON, ...) as files in the work dir. Local kernels run with your
rights: use them for code you trust.
"""


def all_commands() -> tuple[Command, ...]:
    """Every command, in the order ``jupyter-exec --help`` lists them (``COMMANDS``)."""
    from jupyter_exec.cli.checkpoints import CHECKPOINTS_COMMAND
    from jupyter_exec.cli.docker import IMAGE_COMMAND, REAP_COMMAND
    from jupyter_exec.cli.e2b import E2B_COMMAND
    from jupyter_exec.cli.gateway import GATEWAY_COMMAND
    from jupyter_exec.cli.kernels import KERNELS_COMMAND
    from jupyter_exec.cli.mcp import MCP_COMMAND
    from jupyter_exec.cli.replay import REPLAY_COMMAND
    from jupyter_exec.cli.run import DEMO_COMMAND, RUN_COMMAND

    return (
        RUN_COMMAND,
        DEMO_COMMAND,
        REPLAY_COMMAND,
        MCP_COMMAND,
        E2B_COMMAND,
        IMAGE_COMMAND,
        KERNELS_COMMAND,
        REAP_COMMAND,
        CHECKPOINTS_COMMAND,
        GATEWAY_COMMAND,
    )


def __getattr__(name: str) -> Any:
    if name == "COMMANDS":
        return all_commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_parser(
    prog: str = "jupyter-exec", commands: Sequence[str] | None = None
) -> argparse.ArgumentParser:
    """The whole command line (or only ``commands``), as argparse describes it."""
    from jupyter_exec.cli.exits import EXIT_STATUS_HELP
    from jupyter_exec.cli.options import CommandParser

    parser = CommandParser(
        prog=prog,
        description=(
            "Stateful code execution on Jupyter kernels; every session recorded as a notebook."
        ),
        epilog=f"{EPILOG}\n{EXIT_STATUS_HELP}" if commands is None else None,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more (-vv for debug)"
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in all_commands():
        if commands is None or command.name in commands:
            command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = "jupyter-exec") -> int:
    """Run the command line; returns the exit status (see ``jupyter-exec --help``)."""
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:
        print(f"{prog} {__version__}")  # as argparse's version action says it, parser-free
        return 0
    from jupyter_exec.cli.exits import EXIT_USAGE, report, signal_status
    from jupyter_exec.cli.signals import Stopped, stop_signals

    parser = build_parser(prog)
    args = parser.parse_args(argv)
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(message)s", stream=sys.stderr)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        with stop_signals():
            return int(args.func(args))
    except Stopped as stop:
        print(f"\njupyter-exec: stopped by signal {stop.signum}", file=sys.stderr)
        if getattr(args, "exit_at_once", False):
            # A server has closed its sessions by now. A thread of its transport blocked
            # reading stdin (MCP over stdio) would hold the interpreter until the client
            # hangs up, so the process ends here, skipping only that wait.
            sys.stdout.flush()
            sys.stderr.flush()
            logging.shutdown()
            os._exit(signal_status(stop.signum))
        return signal_status(stop.signum)
    except KeyboardInterrupt:
        print("\njupyter-exec: interrupted", file=sys.stderr)
        return signal_status(2)
    except Exception as exc:  # our errors have a status; anything else is reported as a bug
        return report(exc, verbose=args.verbose > 0)


def docker_main(argv: Sequence[str] | None = None) -> int:
    """``python -m jupyter_exec.docker``: the Docker subcommands on their own."""
    from jupyter_exec.cli.docker import DOCKER_COMMANDS
    from jupyter_exec.cli.exits import EXIT_USAGE, report

    parser = build_parser("python -m jupyter_exec.docker", DOCKER_COMMANDS)
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except Exception as exc:
        return report(exc, verbose=args.verbose > 0)


if __name__ == "__main__":
    sys.exit(main())
