"""Every option of a session, typed, with its default and its help, declared once.

:class:`SessionOptions` is what :class:`~jupyter_exec.AsyncSession`,
:class:`~jupyter_exec.Session`, the session manager and its pools take. The
sessions' keyword arguments build one; front ends build one from their own
input (:meth:`SessionOptions.from_mapping` refuses unknown keys with a message
that lists the known ones). Each field's ``help`` lives in its metadata, so
the command line and the server's traitlets can be generated from
:func:`option_fields` instead of repeating the text.

Validation happens when the object is made, before any kernel starts: a bad
value raises :class:`~jupyter_exec.InvalidArgument` saying what to fix. Every
path accepts ``os.PathLike``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from jupyter_exec.boundary.naming import check_text, validate_name
from jupyter_exec.engine.languages import language_record
from jupyter_exec.engine.outputs import DEFAULT_MAX_STREAM_CHARS
from jupyter_exec.exceptions import InvalidArgument
from jupyter_exec.network.policy import NetworkPolicy

__all__ = [
    "DEFAULT_CHECKPOINT_EVERY",
    "DEFAULT_INTERRUPT_GRACE",
    "DEFAULT_MAX_OUTPUT_CHARS",
    "DEFAULT_PRELOAD",
    "DEFAULT_STARTUP_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "DEFAULT_UNDO_STEPS",
    "Backend",
    "OptionField",
    "SessionOptions",
    "option_fields",
    "options_from",
]

Backend = Literal["local", "docker", "remote"]
"""Where a kernel runs: this machine, a hardened container, or a Jupyter server / gateway."""

DEFAULT_INTERRUPT_GRACE = 3.0
"""Seconds an interrupted cell gets to stop before the kernel is restarted."""
DEFAULT_STARTUP_TIMEOUT = 60.0
"""Seconds a kernel gets to start and answer."""
DEFAULT_TIMEOUT = 600.0
"""Seconds a cell may run by default before it is interrupted (``None`` = no limit)."""
DEFAULT_UNDO_STEPS = 0
"""Cells that can be undone by default: none. A snapshot before each cell costs 20 to 30 ms
(several times a small cell's own round trip) and holds, copy-on-write, whatever later cells
rewrite (up to ``undo_steps`` times the data one cell rewrites): opt in where undo is worth it."""
DEFAULT_MAX_OUTPUT_CHARS = DEFAULT_MAX_STREAM_CHARS
"""Stream characters kept per cell (head + tail) before the rest is spilled to a file."""

DEFAULT_CHECKPOINT_EVERY = 60.0
"""Seconds between automatic checkpoints on disk. Counted in time, not cells, so the cost is
bounded whatever the cells' pace (one checkpoint a minute, not one per tiny cell) and so is
what a kernel death loses (the last minute's work); taken after a cell that changed names,
only while the namespace is under 64 MB (at most about half a second to write, once a
minute), so on by default."""

DEFAULT_STATE_BUDGET_MB = 2048
"""Megabytes of stored objects a session's per-cell state may take on disk (``save_state``):
an object past it is not stored (named, with the reason) and old generations are pruned."""

MAX_UNDO_STEPS = 100
"""The most snapshots a session may keep for undo (each is a process)."""

DEFAULT_PRELOAD = ("numpy", "pandas", "matplotlib")
"""What a zygote (a manager's pool of forked kernels) imports unless told otherwise: the usual
data-analysis stack. Here, beside the sessions' defaults, so a command line shows it without
loading the manager."""

PathArg = str | os.PathLike[str]


def _help(text: str, *, cli: bool = True) -> dict[str, Any]:
    return {"help": text, "cli": cli}


@dataclass(frozen=True)
class SessionOptions:
    """How a session starts and runs. Frozen: derive a changed copy with :meth:`replace`."""

    work_dir: Path | None = field(
        default=None,
        metadata=_help(
            "The kernel's working directory, where output files and the notebook go "
            "(made if missing). None: a fresh temporary directory, kept afterwards."
        ),
    )
    kernel_name: str = field(
        default="python3",
        metadata=_help("An installed kernelspec to run (unless python or backend say otherwise)."),
    )
    language: str | None = field(
        default=None,
        metadata=_help(
            "The language to run: python, r, bash, javascript, typescript or java (aliases "
            "such as R, sh, js, ts, py too); it picks the kernel (python3, ir, bash, deno, "
            "java). "
            "None: kernel_name decides."
        ),
    )
    python: str | None = field(
        default=None,
        metadata=_help(
            "An interpreter, a virtual environment folder, or a command name to run the "
            "kernel with; it must have ipykernel."
        ),
    )
    notebook: Path | Literal[False] | None = field(
        default=None,
        metadata=_help(
            "Where to record: None for <work_dir>/<name>.ipynb, a path, or False to record nothing."
        ),
    )
    name: str | None = field(
        default=None,
        metadata=_help(
            "The session's name (default session-<date>-<time>); it names the notebook "
            "and the <name>_files folder of saved outputs."
        ),
    )
    timeout: float | None = field(
        default=DEFAULT_TIMEOUT,
        metadata=_help(
            "Seconds a cell may run before it is interrupted (None: no limit); if the "
            "interrupt does not take within interrupt_grace, the kernel is restarted."
        ),
    )
    backend: Backend = field(
        default="local",
        metadata=_help(
            "local (a subprocess of this process, for trusted code), docker (a hardened, "
            "network-less container) or remote (a Jupyter server or gateway at url)."
        ),
    )
    docker: Mapping[str, Any] = field(
        default_factory=dict,
        metadata=_help(
            'Docker backend options (DockerProvisioner traits, e.g. {"network": true, '
            '"memory": "2g"}).',
            cli=False,
        ),
    )
    network: NetworkPolicy | None = field(
        default=None,
        metadata=_help(
            "For backend=docker: a NetworkPolicy (or its mapping form) deciding which hosts "
            "the kernel may reach through jupyter-exec's proxy. None: the docker option "
            "network decides (no network by default).",
            cli=False,
        ),
    )
    env: Mapping[str, str] | None = field(
        default=None,
        metadata=_help("The kernel's environment variables (default: this process's).", cli=False),
    )
    interrupt_grace: float = field(
        default=DEFAULT_INTERRUPT_GRACE,
        metadata=_help("Seconds an interrupted cell gets to stop before the kernel is restarted."),
    )
    startup_timeout: float = field(
        default=DEFAULT_STARTUP_TIMEOUT,
        metadata=_help("Seconds a kernel gets to start and answer."),
    )
    max_output_chars: int = field(
        default=DEFAULT_MAX_OUTPUT_CHARS,
        metadata=_help(
            "Stream characters kept per cell (head and tail); the rest is spilled to a file "
            "in the work dir and named in the output."
        ),
    )
    undo_steps: int = field(
        default=DEFAULT_UNDO_STEPS,
        metadata=_help(
            "How many of the last cells session.undo() can take back: a copy-on-write "
            "snapshot of the kernel is taken before each cell (20-30 ms) and the last "
            "undo_steps are kept. 0 (default): undo is off. Local and Docker IPython kernels."
        ),
    )
    save_state: bool = field(
        default=True,
        metadata=_help(
            "Save the namespace after every cell, incrementally (only the names the cell "
            "changed, written by a thread in the kernel off the cell's path) to "
            ".<name>_state/ in the work dir, so a kernel death or a host crash comes back "
            "to the last completed cell. IPython kernels: local, Docker, and remote (saved "
            "in the kernel's folder on its host, signed here; a kernel death comes back). "
            "A session's save_state=True asks for it: a remote kernel that cannot keep "
            "state is then refused at start, naming why (left out: on where possible)."
        ),
    )
    state_budget_mb: int = field(
        default=DEFAULT_STATE_BUDGET_MB,
        metadata=_help(
            "Megabytes the per-cell state (save_state) may take on disk; an object past it "
            "is not saved and is named as lost, with the reason."
        ),
    )
    checkpoint_every: float | None = field(
        default=DEFAULT_CHECKPOINT_EVERY,
        metadata=_help(
            "Seconds between automatic checkpoints of the namespace to disk "
            "(.<name>_checkpoints/auto-<k>), taken after a cell that changed names while the "
            "namespace is under 64 MB; a kernel that dies comes back from the latest one. "
            "0 or None: off."
        ),
    )
    overwrite: bool = field(
        default=False,
        metadata=_help("Replace an existing notebook at the recording path instead of refusing."),
    )
    environment: Any = field(
        default=None,
        metadata=_help(
            "Where code runs, said once for every front end: an Environment or a string "
            "(venv, venv:<path>, python:<interpreter>, docker, docker:<image>). It sets "
            "python, backend and docker when the session starts.",
            cli=False,
        ),
    )
    url: str | None = field(
        default=None,
        metadata=_help(
            "For backend=remote: the Jupyter Server / Kernel Gateway / Enterprise "
            "Gateway to run the kernel on."
        ),
    )
    token: str | None = field(
        default=None,
        repr=False,
        metadata=_help("For backend=remote: the server's token."),
    )
    host: str | None = field(
        default=None,
        metadata=_help(
            "For backend=remote through a gateway that places kernels on several hosts "
            "(jupyter-exec gateway, Enterprise Gateway): run the kernel on this one (sent "
            "as KERNEL_REMOTE_HOST). None: the gateway chooses."
        ),
    )
    kernel_manager: Any = field(
        default=None,
        repr=False,
        compare=False,
        metadata=_help(
            "An already started AsyncKernelManager to attach to instead of starting a kernel "
            "(the server's kernels, a pool's warm kernels).",
            cli=False,
        ),
    )
    owns_kernel: bool = field(
        default=False,
        metadata=_help(
            "With kernel_manager: whether close() shuts that kernel down (default: its owner "
            "does).",
            cli=False,
        ),
    )

    def __post_init__(self) -> None:
        put = object.__setattr__
        if self.work_dir is not None:
            put(self, "work_dir", _path(self.work_dir, "work_dir"))
        if self.python is not None:
            put(self, "python", os.fspath(_path(self.python, "python")))
        if self.notebook is not None and self.notebook is not False:
            put(self, "notebook", _path(self.notebook, "notebook"))
        if self.name is not None:
            validate_name(self.name)
        if self.language is not None:
            _language(self)
        if self.backend not in get_args(Backend):
            raise InvalidArgument(
                f"unknown backend {self.backend!r}: use 'local', 'docker' or 'remote'"
            )
        if self.backend == "remote" and not self.url and self.kernel_manager is None:
            raise InvalidArgument("backend='remote' needs url= (the Jupyter server or gateway)")
        if self.host is not None:
            _host(self)
        if self.timeout is not None:
            put(self, "timeout", _seconds(self.timeout, "timeout", zero=False))
        put(self, "interrupt_grace", _seconds(self.interrupt_grace, "interrupt_grace", zero=True))
        put(self, "startup_timeout", _seconds(self.startup_timeout, "startup_timeout", zero=False))
        if isinstance(self.max_output_chars, bool) or not isinstance(self.max_output_chars, int):
            raise InvalidArgument("max_output_chars must be a whole number of characters")
        if self.max_output_chars < 0:
            raise InvalidArgument("max_output_chars must be >= 0")
        if isinstance(self.undo_steps, bool) or not isinstance(self.undo_steps, int):
            raise InvalidArgument("undo_steps must be a whole number of cells")
        if not 0 <= self.undo_steps <= MAX_UNDO_STEPS:
            raise InvalidArgument(f"undo_steps must be from 0 to {MAX_UNDO_STEPS}")
        if not isinstance(self.save_state, bool):
            raise InvalidArgument("save_state must be True or False")
        if isinstance(self.state_budget_mb, bool) or not isinstance(self.state_budget_mb, int):
            raise InvalidArgument("state_budget_mb must be a whole number of megabytes")
        if self.state_budget_mb < 1:
            raise InvalidArgument("state_budget_mb must be at least 1")
        if self.checkpoint_every is not None:
            put(
                self,
                "checkpoint_every",
                _seconds(self.checkpoint_every, "checkpoint_every", zero=True),
            )
        if not isinstance(self.docker, Mapping):
            raise InvalidArgument("docker must be a mapping of Docker backend options")
        put(self, "docker", dict(self.docker))
        if self.network is not None:
            put(self, "network", NetworkPolicy.from_value(self.network))
            if self.environment is None and self.backend != "docker":
                raise InvalidArgument(
                    f"network= is enforced only for Docker kernels (backend='docker'); a "
                    f"{self.backend} kernel has this machine's network, so the policy could "
                    "not apply: use backend='docker' or drop network="
                )
            if self.docker.get("network") not in (None, False, "", "none"):
                raise InvalidArgument(
                    "network= (a policy) and docker={'network': ...} both set the kernel's "
                    "network; keep only the policy"
                )
        if self.env is not None:
            if not isinstance(self.env, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()
            ):
                raise InvalidArgument("env must map variable names to strings")
            put(self, "env", dict(self.env))

    @property
    def shuts_down_kernel(self) -> bool:
        """Whether closing the session stops its kernel: one it started, or one it was given."""
        return self.owns_kernel or self.kernel_manager is None

    # -- deriving --------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> SessionOptions:
        """Options from a plain mapping (configuration, JSON); unknown keys are refused."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InvalidArgument(
                f"unknown session option(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(known))}"
            )
        return cls(**dict(values))

    def replace(self, **changes: Any) -> SessionOptions:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self, *, changed_only: bool = False) -> dict[str, Any]:
        """The options as keyword arguments (only those differing from the default if asked)."""
        result: dict[str, Any] = {}
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            if changed_only and value == _default(spec):
                continue
            result[spec.name] = value
        return result


@dataclass(frozen=True)
class OptionField:
    """One option as a front end needs it: to make a flag or a trait from it."""

    name: str
    type: str
    default: Any
    help: str
    cli: bool
    """Whether it makes sense as a command-line flag (plain values, not objects)."""


def option_fields() -> Iterator[OptionField]:
    """Every session option with its type, default and help, in declaration order."""
    for spec in dataclasses.fields(SessionOptions):
        yield OptionField(
            name=spec.name,
            type=str(spec.type),
            default=_default(spec),
            help=spec.metadata["help"],
            cli=spec.metadata["cli"],
        )


def _default(spec: dataclasses.Field[Any]) -> Any:
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return spec.default


def _path(value: Any, what: str) -> Path:
    if not isinstance(value, str | os.PathLike):
        raise InvalidArgument(f"{what} must be a path (str or os.PathLike), not {type(value)}")
    text = os.fspath(value)
    if not isinstance(text, str):
        raise InvalidArgument(f"{what} must be a text path, not bytes")
    if not text:
        raise InvalidArgument(f"{what} is empty; give a path")
    check_text(text, f"{what} {text!r}")
    return Path(text)


_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.:_-]{0,252}[A-Za-z0-9])?")


def _host(options: SessionOptions) -> None:
    """A host name or address as a gateway's list holds it; nothing a shell could read."""
    if options.backend != "remote":
        raise InvalidArgument(
            "host= places a remote kernel (backend='remote' through a gateway with several "
            f"hosts); a {options.backend} kernel runs on this machine"
        )
    if not isinstance(options.host, str) or not _HOST.fullmatch(options.host):
        raise InvalidArgument(
            f"host must be a host name or an address (letters, digits, '.', ':', '-', '_'), "
            f"not {options.host!r}"
        )


def _language(options: SessionOptions) -> None:
    """Settle ``language`` to its canonical name and ``kernel_name`` to its kernel; refuse a
    ``kernel_name`` or ``python`` that says otherwise."""
    record = language_record(options.language)
    kernel = record.kernel
    if options.kernel_name not in (kernel, "python3"):
        raise InvalidArgument(
            f"language={options.language!r} runs the kernel {kernel!r}, but kernel_name="
            f"{options.kernel_name!r} was given too: give one of them"
        )
    if options.python is not None and not record.interpreter:
        raise InvalidArgument(
            f"python= names a Python interpreter; language={options.language!r} runs "
            f"the {kernel!r} kernel: drop one of them"
        )
    if record.docker is None and options.backend == "docker":
        why = record.no_docker_why.format(container="a network-less container")
        raise InvalidArgument(
            f"language={record.name!r} runs on this machine's kernel only for now ({why}): "
            "use backend='local'"
        )
    if options.undo_steps and not record.undo:
        raise InvalidArgument(
            f"undo_steps needs a Python kernel (undo is Python run inside the kernel); "
            f"language={options.language!r} has no undo: drop undo_steps"
        )
    object.__setattr__(options, "language", record.name)
    object.__setattr__(options, "kernel_name", kernel)


def _seconds(value: Any, what: str, *, zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{what} must be a number of seconds, not {value!r}")
    seconds = float(value)
    if math.isnan(seconds) or seconds < 0 or (seconds == 0 and not zero):
        raise InvalidArgument(f"{what} must be {'>= 0' if zero else '> 0'} seconds, not {value!r}")
    return seconds


def options_from(base: SessionOptions | None, **given: Any) -> SessionOptions:
    """``base`` (default: the defaults) with every ``given`` value that is not its default.

    How the sessions' keyword arguments and an ``options=`` object combine:
    an argument left at its default does not override the options' value.
    """
    defaults = {spec.name: _default(spec) for spec in dataclasses.fields(SessionOptions)}
    changed = {k: v for k, v in given.items() if not _is_default(v, defaults[k])}
    if base is None:
        return SessionOptions(**changed)
    return base.replace(**changed) if changed else base


def _is_default(value: Any, default: Any) -> bool:
    if value is None or value is default:
        return default is None or default == {} or value is default
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    if isinstance(value, str | int | float | dict) and type(value) is type(default):
        return bool(value == default)
    return False
