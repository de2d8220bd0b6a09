"""One record per ``jupyter-exec`` command: its name, its words for ``--help``, its
arguments and the function that runs it.

Each command module declares its :class:`Command` (``RUN_COMMAND``, ``MCP_COMMAND``...)
and :func:`jupyter_exec.cli.build_parser` registers them in order, so how a command
joins the parser (its own parser, its arguments, its function as ``func``) is written
once, here, and a command's name is said once, in its record. A command with actions
(``image build``, ``kernels list``) registers theirs, records too, from its arguments.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from jupyter_exec.cli.options import Subparsers

__all__ = ["Command"]


def _nothing(parser: argparse.ArgumentParser) -> None:
    """The arguments of a command that takes none."""


@dataclass(frozen=True)
class Command:
    """A command (or an action of one) of ``jupyter-exec``."""

    name: str
    help: str
    """Its line in the list of commands."""
    description: str | None = None
    """What its own ``--help`` says first."""
    epilog: str | None = None
    """What its own ``--help`` says last: examples, exit statuses."""
    arguments: Callable[[argparse.ArgumentParser], None] = _nothing
    """Adds its arguments (and its actions) to its parser."""
    run: Callable[[argparse.Namespace], int] | None = None
    """Runs it with the parsed arguments and returns the exit status (None: a command
    whose actions run)."""

    def register(self, subparsers: Subparsers) -> argparse.ArgumentParser:
        """Add this command's parser under ``subparsers``; its parser."""
        parser: argparse.ArgumentParser = subparsers.add_parser(
            self.name, help=self.help, description=self.description, epilog=self.epilog
        )
        self.arguments(parser)
        if self.run is not None:
            parser.set_defaults(func=self.run)
        return parser
