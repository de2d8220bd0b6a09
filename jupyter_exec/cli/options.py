"""The option groups of ``jupyter-exec``, each declared once and shared by every subcommand.

The session group is derived from :class:`~jupyter_exec.options.SessionOptions`:
a flag per field a command asks for (``--timeout``, ``--work-dir``,
``--kernel-name``, ...), its help and default taken from the field, so the
command line, the Python API and the server say the same thing in the same
words. :func:`session_kwargs` reads them back and validates them through
``SessionOptions`` (a bad value exits 2 with what to fix). Beside it:
:func:`add_environment` (where code runs, as ``--env`` and its package
flags, for which ``--python`` and ``--backend`` are short forms) and
:func:`add_quiet`, and :func:`add_network_policy` (``--allow``, ``--deny``,
``--network-policy``: which hosts a Docker kernel may reach).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, get_args

from jupyter_exec.exceptions import InvalidArgument
from jupyter_exec.options import DEFAULT_PRELOAD, Backend, SessionOptions, option_fields

if TYPE_CHECKING:  # the environments module finds interpreters: loaded when a command runs
    from jupyter_exec.engine.environments import Environment
    from jupyter_exec.network import NetworkPolicy

__all__ = [
    "STATE_OPTIONS",
    "CommandParser",
    "add_environment",
    "add_network_policy",
    "add_quiet",
    "add_session_options",
    "add_zygote",
    "backend_of",
    "command_line_options",
    "environment_from_args",
    "flag_for",
    "formatter",
    "network_policy_from_args",
    "non_negative_float",
    "non_negative_int",
    "positive_int",
    "said_environment",
    "session_kwargs",
    "with_environment",
    "zygote_kwargs",
]

Subparsers = Any  # argparse._SubParsersAction is private; its type is not worth importing


def formatter(prog: str) -> argparse.HelpFormatter:
    """Help laid out as written: the epilogs' examples keep their columns."""
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


class CommandParser(argparse.ArgumentParser):
    """The parser of ``jupyter-exec``, and so of each of its commands and their actions.

    argparse makes a command's parser of the class of the parser it hangs from, so the
    layout chosen here (:func:`formatter`) reaches every command without each of them
    naming it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", formatter)
        super().__init__(*args, **kwargs)


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


STATE_OPTIONS = ("undo_steps", "checkpoint_every")
"""The session options of undo and checkpoints, for the commands that take a few options."""


def command_line_options(*, without: Sequence[str] = ()) -> tuple[str, ...]:
    """Every session option a command line can say (``cli=True``), but ``without``.

    A command that takes the session's options takes them all from here, so an
    option added to :class:`SessionOptions` is a flag of that command at once
    instead of waiting for someone to add it to a list.
    """
    return tuple(f.name for f in option_fields() if f.cli and f.name not in without)


_FLAG_NAMES = {"host": "remote-host"}
"""Options whose flag is not their name: ``--host`` is a server's own listening address."""


def flag_for(name: str) -> str:
    """The command-line flag of the session option ``name`` (``--work-dir``, ``--remote-host``)."""
    return "--" + _FLAG_NAMES.get(name, name.replace("_", "-"))


_NONE_MEANS = re.compile(r"\s*\(?(?:0 or )?None: ([^.)]+)[.)]?")
"""A help's "(None: no limit)" or "0 or None: off.": on the command line None is spelt 0."""


def add_session_options(
    parser: argparse.ArgumentParser,
    names: Sequence[str],
    *,
    title: str = "session",
    defaults: Mapping[str, Any] | None = None,
    helps: Mapping[str, str] | None = None,
    aliases: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Flags for the :class:`SessionOptions` fields ``names``, in that order.

    ``defaults`` and ``helps`` override a field's own for this command (the MCP
    server's timeout is per call, replay's work dir is the notebook's folder);
    ``aliases`` adds other spellings of a flag.
    """
    fields = {f.name: f for f in option_fields()}
    group = parser.add_argument_group(title)
    for name in names:
        spec = fields[name]
        flags = [flag_for(name), *((aliases or {}).get(name, ()))]
        default = (defaults or {}).get(name, spec.default)
        text = (helps or {}).get(name, spec.help).replace("%", "%%")
        none_means = _NONE_MEANS.search(text) if spec.type.startswith("float") else None
        if none_means:  # Python's words, not a flag's
            text = _NONE_MEANS.sub("", text)
        text = text.rstrip(".")
        if name == "notebook":
            group.add_argument(
                *flags,
                metavar="PATH",
                help="record to this .ipynb (default: <work dir>/<name>.ipynb)",
            )
            group.add_argument(
                "--no-notebook", action="store_true", help="record no notebook (notebook=False)"
            )
        elif spec.type == "bool" and spec.default is True:  # --x / --no-x; unsaid: the default
            group.add_argument(
                *flags, action=argparse.BooleanOptionalAction, default=None, help=text
            )
        elif spec.type == "bool":
            group.add_argument(*flags, action="store_true", help=text)
        elif name == "backend":
            group.add_argument(*flags, choices=get_args(Backend), default=None, help=text)
        elif spec.type.startswith("float"):
            meaning = none_means.group(1) if none_means else "no limit"
            shown = f"0: {meaning}; " if "| None" in spec.type else ""
            value = 0.0 if default is None else float(default)
            group.add_argument(
                *flags,
                type=non_negative_float,
                default=value,
                metavar="S",
                help=f"{text} ({shown}default {value:g})",
            )
        elif spec.type.startswith("int"):
            group.add_argument(
                *flags,
                type=non_negative_int,
                default=default,
                metavar="N",
                help=f"{text} (default {default:,})",
            )
        else:
            metavar = {"work_dir": "DIR", "python": "PY"}.get(name, name.split("_")[-1].upper())
            group.add_argument(*flags, dest=name, metavar=metavar, default=default, help=text)


def session_kwargs(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The session options the flags of ``names`` say, validated by ``SessionOptions``.

    A float option's 0 means ``None`` (no limit); options left unsaid are left out.
    """
    fields = {f.name: f for f in option_fields()}
    values: dict[str, Any] = {}
    for name in names:
        value = getattr(args, name, None)
        if name == "notebook" and getattr(args, "no_notebook", False):
            value = False
        elif fields[name].type.startswith("float") and "| None" in fields[name].type:
            value = value or None
        if value is not None or name == "timeout":
            values[name] = value
    SessionOptions.from_mapping(values)  # refuses a bad value now, with what to fix
    return values


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print only errors and the summary"
    )


def add_environment(parser: argparse.ArgumentParser) -> None:
    """Where code runs, the same flags for every subcommand that starts kernels.

    ``--python`` and ``--backend`` (session options) are its short forms.
    """
    group = parser.add_argument_group("environment (where code runs)")
    group.add_argument(
        "--env",
        metavar="SPEC",
        default=None,
        help="local (this Python, default), python:<interpreter>, venv (cached, made on demand), "
        "venv:<path>, docker or docker:<image>",
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
    python = getattr(args, "python", None)
    backend = getattr(args, "backend", None)
    if python:
        _check_interpreter(python)
    if spec is not None and (python or backend):
        given = "--python" if python else "--backend"
        raise InvalidArgument(f"give --env or {given}, not both ({given} is short for --env)")
    if python and backend == "docker":
        raise InvalidArgument("--python is a local interpreter; it cannot go with --backend docker")
    if spec is None and backend == "docker":
        spec = "docker"
    elif spec is None and python:
        spec = f"python:{python}"
    return spec


def said_environment(args: argparse.Namespace) -> bool:
    """Whether the flags ask for anything but the stock kernel (which needs no probe)."""
    flags = (args.packages, args.requirements, args.python_version, args.dockerfile, args.network)
    return environment_spec(args) not in (None, "local") or any(flags)


_ENVIRONMENT_FLAGS = ("packages", "requirements", "python_version", "dockerfile", "network")


def with_environment(args: argparse.Namespace, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Session ``kwargs`` with ``--env`` and its package flags resolved into ``environment``.

    Without them, ``--python`` and ``--backend`` stay plain session options.
    """
    environment_spec(args)  # refuses contradictory or unusable --env/--python/--backend
    if args.env is not None or any(getattr(args, f) for f in _ENVIRONMENT_FLAGS):
        kwargs.pop("python", None)
        kwargs.pop("backend", None)
        kwargs["environment"] = environment_from_args(args)
    return kwargs


def environment_from_args(args: argparse.Namespace) -> Environment:
    """The environment the flags of :func:`add_environment` describe."""
    from jupyter_exec.engine.environments import parse_environment

    if getattr(args, "backend", None) == "remote":
        raise InvalidArgument(
            "--backend remote runs one session on a Jupyter server (jupyter-exec run --url ...); "
            "here use --backend local or docker"
        )
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


NETWORK_POLICY_HELP = """\
A Docker kernel has no network. With a policy it reaches the hosts the policy
allows, and nothing else, through a proxy jupyter-exec runs on this machine;
every connection is recorded in the notebook. For example:
  --backend docker --allow pypi.org --allow files.pythonhosted.org
FILE is JSON ({"allow": [...], "deny": [...], "secrets": {...}}); a secret
header's value is text in the file or {"env": "VARIABLE", "prefix": "Bearer "}:
  {"allow": ["api.example.org"], "secrets": {"api.example.org":
    {"Authorization": {"env": "API_TOKEN", "prefix": "Bearer "}}}}
Secrets come only from the file or the environment, never from the command line."""


def add_network_policy(parser: argparse.ArgumentParser) -> None:
    """``--allow``, ``--deny``, ``--network-policy``: one group for every command with kernels."""
    group = parser.add_argument_group("network policy (Docker kernels)", NETWORK_POLICY_HELP)
    group.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="HOST",
        help="a host the kernel may reach: pypi.org, pypi.org:443, *.example.org, 10.0.0.0/8 "
        "(repeatable)",
    )
    group.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="HOST",
        help="a host the kernel may not reach, even if allowed (repeatable; wins over --allow)",
    )
    group.add_argument(
        "--network-policy",
        metavar="FILE",
        help="a JSON policy file; --allow and --deny add to its rules",
    )


def network_policy_from_args(args: argparse.Namespace, backend: str | None) -> NetworkPolicy | None:
    """The policy the flags say (``None``: none), refused unless ``backend`` is ``docker``.

    Read and checked here, before any kernel starts: a malformed file or rule,
    a policy beside ``--network`` (the whole network), or for
    a kernel it could not be enforced on, are each an :class:`InvalidArgument`
    (exit 2).
    """
    from jupyter_exec.cli.policy import load_policy_file, merged

    path = getattr(args, "network_policy", None)
    policy = load_policy_file(path) if path else None
    policy = merged(policy, getattr(args, "allow", ()), getattr(args, "deny", ()))
    if policy is None:
        return None
    if getattr(args, "network", False):
        raise InvalidArgument(
            "--network gives the kernel the whole network, a policy (--allow, --deny, "
            "--network-policy) only some hosts: give one or the other"
        )
    if backend != "docker":
        whole = (
            "its server's network, which jupyter-exec does not control"
            if backend == "remote"
            else "this machine's whole network"
        )
        raise InvalidArgument(
            f"a network policy is enforced only for Docker kernels, and this {backend or 'local'} "
            f"kernel would have {whole}: add --backend docker (or --env docker), or drop "
            "--allow/--deny/--network-policy"
        )
    return policy


def backend_of(kwargs: Mapping[str, Any]) -> str:
    """Where the session ``kwargs`` (after :func:`with_environment`) run a kernel."""
    from jupyter_exec.engine.environments import Environment

    environment = kwargs.get("environment")
    if isinstance(environment, Environment):
        return environment.backend
    return str(kwargs.get("backend") or "local")


def add_zygote(parser: argparse.ArgumentParser) -> None:
    """The zygote pool's flags (``AsyncSessionManager.zygote_size`` / ``zygote_preload``)."""
    group = parser.add_argument_group("zygote pool (local kernels)")
    group.add_argument(
        "--zygote-size",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="kernels forked ahead of time from a zygote that imported the --preload modules "
        "once: a new session starts with them imported, in tens of milliseconds, sharing their "
        "memory (0: no zygote; default 0)",
    )
    group.add_argument(
        "--preload",
        action="append",
        default=None,
        metavar="MODULE",
        help=f"a module the zygote imports (repeatable; default {', '.join(DEFAULT_PRELOAD)})",
    )


def zygote_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``AsyncSessionManager`` traits from :func:`add_zygote`'s flags (only those given)."""
    kwargs: dict[str, Any] = {}
    if args.zygote_size:
        kwargs["zygote_size"] = args.zygote_size
    if args.preload is not None:
        if not args.zygote_size:
            raise InvalidArgument("--preload is what the zygote imports: give --zygote-size too")
        kwargs["zygote_preload"] = list(args.preload)
    return kwargs
