"""``jupyter-exec e2b``: the E2B-compatible sandbox server's command line.

The server is :mod:`jupyter_exec.e2b`; this module reads the options and
runs it until a signal, after which every sandbox's kernels are stopped
(their work dirs and notebooks stay).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

from jupyter_exec.cli.commands import Command
from jupyter_exec.cli.exits import EXIT_OK, EXIT_STATUS_HELP
from jupyter_exec.cli.options import (
    STATE_OPTIONS,
    add_network_policy,
    add_session_options,
    add_zygote,
    network_policy_from_args,
    non_negative_float,
    non_negative_int,
    positive_int,
    session_kwargs,
    zygote_kwargs,
)
from jupyter_exec.cli.signals import serve_until_stopped
from jupyter_exec.e2b.limits import CODE_PORT, ENVD_PORT, MAX_SANDBOX_TIMEOUT, MAX_UPLOAD
from jupyter_exec.exceptions import InvalidArgument

__all__ = ["E2B_COMMAND", "KEY_ENV", "api_key_from"]

KEY_ENV = ("E2B_API_KEY", "JUPYTER_EXEC_API_KEY")
"""Where the server's API key is read from (never the command line: ``ps`` shows that)."""

EPILOG = f"""\
examples:
  E2B_DEBUG=true jupyter-exec e2b        one machine, zero configuration: then run your
                                         E2B code with E2B_DEBUG=true (Sandbox.create(),
                                         run_code, files, commands: all on this server)
  jupyter-exec e2b --backend docker      every sandbox's kernel in a hardened container
  jupyter-exec e2b --backend docker --allow pypi.org --allow files.pythonhosted.org
                                         ... that may reach the package index, nothing else
  E2B_API_KEY=k jupyter-exec e2b --port 49999
                                         many sandboxes, each with its own access token
                                         (or --api-key-file FILE; not --api-key, which `ps`
                                         shows to every user); clients set E2B_API_KEY=k,
                                         E2B_API_URL=http://127.0.0.1:49999 and
                                         E2B_SANDBOX_URL=http://127.0.0.1:49999

Each sandbox is a jupyter-exec session: its work dir <root dir>/<sandbox id> is the
sandbox's /home/user, and every run_code is recorded in its notebook there.
Requests whose Host or Origin is not this machine are refused.

{EXIT_STATUS_HELP}"""


def positive_float(text: str) -> float:
    """A finite number above 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, not {text}")
    return value


def _debug_default() -> bool:
    return os.environ.get("E2B_DEBUG", "false").lower() == "true"


def api_key_from(args: argparse.Namespace) -> tuple[str, bool]:
    """The server's API key and whether it was made here (so printing it is the only way).

    From ``--api-key-file``, else the deprecated ``--api-key`` (which every user
    of the machine reads in ``ps``: a warning says so), else ``$E2B_API_KEY``
    (or ``$JUPYTER_EXEC_API_KEY``), else a new one, in E2B's form (``e2b_`` and 40 hex
    digits: :func:`jupyter_exec.e2b.auth.new_api_key`).
    """
    if args.api_key_file:
        try:
            key = Path(args.api_key_file).expanduser().read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgument(
                f"cannot read --api-key-file {args.api_key_file}: {exc}"
            ) from None
        if not key:
            raise InvalidArgument(f"--api-key-file {args.api_key_file} is empty")
        return key, False
    if args.api_key:
        print(
            "[jupyter-exec] warning: --api-key shows the key to every user of this machine "
            f"(ps, /proc); set {KEY_ENV[0]} or use --api-key-file instead",
            file=sys.stderr,
            flush=True,
        )
        return str(args.api_key), False
    for name in KEY_ENV:
        if os.environ.get(name):
            return os.environ[name], False
    from jupyter_exec.e2b.auth import new_api_key

    return new_api_key(), True


def cmd_e2b(args: argparse.Namespace) -> int:
    """Run the server until a signal stops it."""
    import asyncio

    from jupyter_exec.e2b import E2BConfig, E2BServer

    api_key, made = api_key_from(args)
    options: dict[str, Any] = session_kwargs(args, STATE_OPTIONS)
    if args.backend:
        options["backend"] = args.backend
    if args.python:
        options["python"] = args.python
    policy = network_policy_from_args(args, args.backend)
    if policy is not None:
        options["network"] = policy  # every sandbox's kernels (code contexts) go through it
    ports = (args.port,) if args.envd_port in (0, args.port) else (args.port, args.envd_port)
    config = E2BConfig(
        root_dir=Path(args.root_dir).expanduser(),
        host=args.host,
        ports=ports,
        debug=args.debug,
        api_key=api_key,
        session_options=options,
        pool_size=args.pool_size,
        zygote=zygote_kwargs(args),
        max_sessions=args.max_sessions,
        sandbox_timeout=args.sandbox_timeout,
        max_sandbox_timeout=args.max_sandbox_timeout,
        max_upload_bytes=args.max_upload_mb << 20,
    )
    server = E2BServer(config)

    async def serve() -> None:
        await server.start()
        base = f"http://{'localhost' if args.debug else args.host}:{server.ports[0]}"
        print(f"[jupyter-exec] E2B server on {args.host}, ports {server.ports}; sandboxes in "
              f"{server.manager.root}", file=sys.stderr, flush=True)  # fmt: skip
        if args.debug:
            print("[jupyter-exec] debug mode: clients set E2B_DEBUG=true (no token)",
                  file=sys.stderr, flush=True)  # fmt: skip
        shown = api_key if made else "<the key you gave>"
        print(f"[jupyter-exec] API mode: E2B_API_KEY={shown} E2B_API_URL={base} "
              f"E2B_SANDBOX_URL={base}", file=sys.stderr, flush=True)  # fmt: skip
        await asyncio.Event().wait()

    asyncio.run(serve_until_stopped(serve(), server.stop))
    return EXIT_OK


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``jupyter-exec e2b``."""
    net = parser.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1", help="address to listen on "
                     "(default 127.0.0.1; another address needs an API key)")  # fmt: skip
    net.add_argument("--port", type=non_negative_int, default=CODE_PORT,
                     help=f"the code interpreter's port, where the SDK's debug mode sends code "
                     f"(default {CODE_PORT}); every route is served on it")  # fmt: skip
    net.add_argument("--envd-port", type=non_negative_int, default=ENVD_PORT,
                     help=f"envd's port (files, commands) in debug mode (default {ENVD_PORT}; "
                     "0: none)")  # fmt: skip
    auth = parser.add_argument_group("access")
    auth.add_argument("--debug", action=argparse.BooleanOptionalAction, default=_debug_default(),
                      help="serve the SDK's debug-mode sandbox (no token; loopback only; "
                      "default: on when E2B_DEBUG=true)")  # fmt: skip
    auth.add_argument("--api-key-file", metavar="FILE", help="a file holding the key API "
                      "calls must carry (default $E2B_API_KEY, else a new one, "
                      "printed)")  # fmt: skip
    auth.add_argument("--api-key", metavar="KEY", help="deprecated: the key on the command "
                      "line, where `ps` shows it to every user; use $E2B_API_KEY or "
                      "--api-key-file")  # fmt: skip
    sandboxes = parser.add_argument_group("sandboxes")
    sandboxes.add_argument("--root-dir", default="jupyter-exec-e2b", metavar="DIR",
                           help="one work dir per sandbox "
                           "(default ./jupyter-exec-e2b)")  # fmt: skip
    sandboxes.add_argument("--backend", choices=("local", "docker"), default=None,
                           help="where kernels run: local (your rights: trusted code only) or "
                           "docker (a hardened, network-less container)")  # fmt: skip
    sandboxes.add_argument("--python", metavar="PY",
                           help="interpreter or venv for local kernels")  # fmt: skip
    sandboxes.add_argument("--pool-size", type=non_negative_int, default=0, metavar="N",
                           help="kernels kept started, so Sandbox.create() is fast "
                           "(default 0)")  # fmt: skip
    sandboxes.add_argument("--max-sessions", type=non_negative_int, default=16, metavar="N",
                           help="kernels (code contexts) at once "
                           "(0: no limit; default 16)")  # fmt: skip
    sandboxes.add_argument("--sandbox-timeout", type=non_negative_float, default=300.0,
                           metavar="S", help="a sandbox's life when create() gives none "
                           "(default 300; 0: no end)")  # fmt: skip
    sandboxes.add_argument("--max-sandbox-timeout", type=positive_float,
                           default=MAX_SANDBOX_TIMEOUT, metavar="S",
                           help="the longest life a client may give a sandbox (create, "
                           "connect, set_timeout; more is refused; "
                           f"default {MAX_SANDBOX_TIMEOUT:g})")  # fmt: skip
    sandboxes.add_argument("--max-upload-mb", type=positive_int, default=MAX_UPLOAD >> 20,
                           metavar="MB", help="the largest file upload, in MiB (other requests "
                           f"take far less; default {MAX_UPLOAD >> 20})")  # fmt: skip
    add_session_options(parser, STATE_OPTIONS, title="sandbox state")
    add_network_policy(parser)
    add_zygote(parser)


E2B_COMMAND = Command(
    "e2b",
    help="serve the E2B sandbox protocol (the e2b-code-interpreter SDK, unchanged)",
    description="Run a server that speaks the E2B sandbox protocol, so code written for "
    "the official e2b-code-interpreter SDK runs on local Jupyter kernels: sandboxes, "
    "run_code with streaming and rich results, code contexts, files and commands.",
    epilog=EPILOG,
    arguments=_arguments,
    run=cmd_e2b,
)
