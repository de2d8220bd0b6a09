"""The option groups of ``jupyter-exec``, each declared once and shared by every subcommand.

A subcommand takes the groups it needs: :func:`add_environment` (where code
runs: ``--env``, ``--python``, ``--backend``, packages), :func:`add_timeout`,
:func:`add_recording` (work dir, notebook, name) and :func:`add_quiet`; the
values are read back with :func:`environment_from_args`. The help text of an
option is written here once, so ``--timeout`` means the same everywhere.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from jupyter_exec.environments import Environment, parse_environment
from jupyter_exec.exceptions import InvalidArgument

__all__ = [
    "add_environment",
    "add_quiet",
    "add_recording",
    "add_timeout",
    "environment_from_args",
    "formatter",
    "non_negative_float",
    "non_negative_int",
    "positive_int",
    "timeout_from_args",
]

Subparsers = Any  # argparse._SubParsersAction is private; its type is not worth importing


def formatter(prog: str) -> argparse.HelpFormatter:
    """Help laid out as written: the epilogs' examples keep their columns."""
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def add_timeout(parser: argparse._ActionsContainer, default: float, per: str = "cell") -> None:
    """``--timeout S``: seconds per ``per`` before the code is interrupted (0: no limit)."""
    parser.add_argument(
        "--timeout",
        type=non_negative_float,
        default=default,
        metavar="S",
        help=f"seconds per {per} before it is interrupted (0: no limit; default {default:g})",
    )


def timeout_from_args(args: argparse.Namespace) -> float | None:
    """The session's timeout: ``None`` for 0 (no limit)."""
    value: float = args.timeout
    return value or None


def add_recording(parser: argparse.ArgumentParser, *, work_dir_help: str) -> None:
    """Where a session works and what it records: ``--work-dir``, ``--notebook``, ``--name``."""
    group = parser.add_argument_group("recording")
    group.add_argument("--work-dir", metavar="DIR", help=work_dir_help)
    group.add_argument(
        "--notebook",
        metavar="PATH",
        help="record to this .ipynb (default: <work dir>/<name>.ipynb)",
    )
    group.add_argument("--no-notebook", action="store_true", help="do not record a notebook")
    group.add_argument(
        "--name", help="session name: names the notebook and the <name>_files folder"
    )


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print only errors and the summary"
    )


def add_environment(parser: argparse.ArgumentParser) -> None:
    """Where code runs, the same flags for every subcommand that starts kernels."""
    group = parser.add_argument_group("environment (where code runs)")
    group.add_argument(
        "--env",
        metavar="SPEC",
        default=None,
        help="local (this Python, default), python:<interpreter>, venv (cached, made on demand), "
        "venv:<path>, docker or docker:<image>",
    )
    group.add_argument(
        "--python",
        metavar="PY",
        help="interpreter or venv to run the kernel with (needs ipykernel); "
        "short for --env python:PY",
    )
    group.add_argument(
        "--backend",
        choices=["local", "docker"],
        default=None,
        help="local: a kernel process with your rights (trusted code); docker: a hardened, "
        "network-less container; short for --env docker",
    )
    group.add_argument(
        "--package",
        dest="packages",
        action="append",
        default=[],
        metavar="PKG",
        help="a pip package to install into the venv or image (repeatable)",
    )
    group.add_argument(
        "--requirements", metavar="FILE", help="a requirements file for the venv or image"
    )
    group.add_argument(
        "--python-version", metavar="X.Y", help="Python version of a venv made on demand"
    )
    group.add_argument(
        "--dockerfile", metavar="FILE", help="your Dockerfile, as the base of the Docker image"
    )
    group.add_argument(
        "--network",
        action="store_true",
        help="give Docker kernels network access (default: none)",
    )


def _check_interpreter(python: str) -> None:
    """A file given as the interpreter must be one this user can run."""
    path = os.path.expanduser(python)
    if os.path.isfile(path) and not os.access(path, os.X_OK):
        raise InvalidArgument(
            f"--python {python}: the file is not executable; give a Python interpreter "
            f"(chmod +x it if it is one) or a virtual environment's folder"
        )


def environment_spec(args: argparse.Namespace) -> str | None:
    """The ``--env`` spec the flags say, with ``--backend`` and ``--python`` as its short forms."""
    spec: str | None = args.env
    if args.python:
        _check_interpreter(args.python)
    if spec is not None and (args.python or args.backend):
        given = "--python" if args.python else "--backend"
        raise InvalidArgument(f"give --env or {given}, not both ({given} is short for --env)")
    if args.python and args.backend == "docker":
        raise InvalidArgument("--python is a local interpreter; it cannot go with --backend docker")
    if spec is None and args.backend == "docker":
        spec = "docker"
    elif spec is None and args.python:
        spec = f"python:{args.python}"
    return spec


def said_environment(args: argparse.Namespace) -> bool:
    """Whether the flags ask for anything but the stock kernel (which needs no probe)."""
    flags = (args.packages, args.requirements, args.python_version, args.dockerfile, args.network)
    return environment_spec(args) not in (None, "local") or any(flags)


def environment_from_args(args: argparse.Namespace) -> Environment:
    """The environment the flags of :func:`add_environment` describe."""
    for option, value in (("--requirements", args.requirements), ("--dockerfile", args.dockerfile)):
        if value and not os.path.isfile(os.path.expanduser(value)):
            raise InvalidArgument(f"{option} {value}: no such file")
    try:
        return parse_environment(
            environment_spec(args),
            packages=args.packages,
            python_version=args.python_version,
            requirements_file=args.requirements,
            dockerfile=args.dockerfile,
            network=args.network,
        )
    except InvalidArgument:
        raise
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
