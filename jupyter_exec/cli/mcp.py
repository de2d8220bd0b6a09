"""``jupyter-exec mcp``: the MCP server's command line, and its stop on any signal.

The server is :mod:`jupyter_exec.mcp.server`; this module reads the options,
and runs it so that Ctrl-C, SIGTERM (systemd, ``docker stop``, Kubernetes) and
SIGHUP all end it the same way: every session closed, Docker kernels
stopped, notebooks saved, then exit status 128 + the signal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_exec.agents.llm import DEFAULT_LLM_CHARS
from jupyter_exec.cli.commands import Command
from jupyter_exec.cli.exits import EXIT_OK, EXIT_STATUS_HELP
from jupyter_exec.cli.options import (
    STATE_OPTIONS,
    add_environment,
    add_network_policy,
    add_session_options,
    add_zygote,
    environment_from_args,
    network_policy_from_args,
    non_negative_float,
    non_negative_int,
    positive_int,
    session_kwargs,
    zygote_kwargs,
)
from jupyter_exec.cli.signals import serve_until_stopped
from jupyter_exec.exceptions import InvalidArgument
from jupyter_exec.mcp.ask import DEFAULT_ASK_TIMEOUT

if TYPE_CHECKING:
    from jupyter_exec.network.policy import NetworkPolicy

__all__ = ["MCP_COMMAND"]

DEFAULT_PORT = 8765

EPILOG = f"""\
examples:
  jupyter-exec mcp                                  stdio, sessions in ./jupyter-exec-mcp
  jupyter-exec mcp --work-dir ~/agent-work          keep the sessions' files there
  jupyter-exec mcp --env docker --package polars    every session in a container
  jupyter-exec mcp --env venv --python-version 3.12 --package pandas
  jupyter-exec mcp --transport http --port 8765     streamable HTTP on 127.0.0.1:8765/mcp
  jupyter-exec mcp --pool-size 2 --cull-idle 3600   2 warm kernels; idle sessions closed after 1 h
  jupyter-exec mcp --undo-steps 5                   the undo tool can take back 5 cells
  jupyter-exec mcp --env docker --allow pypi.org --allow files.pythonhosted.org
                                                    containers that reach the package index only
  jupyter-exec mcp --env docker --network-policy policy.json
                                                    the hosts (and API keys) a JSON file allows
  jupyter-exec mcp --env docker --allow pypi.org --ask-person
                                                    other hosts: the person at the client decides

A client configuration (Claude Desktop, Cursor, ...):
  {{"mcpServers": {{"jupyter": {{"command": "jupyter-exec",
                               "args": ["mcp", "--work-dir", "/home/me/agent-work"]}}}}}}

Over HTTP every request needs the header "Authorization: Bearer <token>": the
token is $JUPYTER_EXEC_MCP_TOKEN, or a new one printed at start. Requests whose
Host or Origin is not this machine are refused (DNS rebinding).
Local sessions run with your rights; use --env docker for code you do not trust.

{EXIT_STATUS_HELP}"""


def _asking(policy: NetworkPolicy | None, args: argparse.Namespace, backend: str) -> NetworkPolicy:
    """``policy`` (none: deny every host) with an ``ask`` that elicits the person's answer."""
    from jupyter_exec.mcp.ask import ElicitingAsk
    from jupyter_exec.network.policy import NetworkPolicy

    if backend != "docker" or getattr(args, "network", False):
        raise InvalidArgument(
            "--ask-person decides which hosts a Docker kernel's network policy lets through: "
            "add --env docker (or --backend docker), and drop --network"
        )
    base = policy if policy is not None else NetworkPolicy()
    return NetworkPolicy(
        base.allow,
        base.deny,
        base.secrets,
        ElicitingAsk(args.ask_timeout or DEFAULT_ASK_TIMEOUT),  # 0: the default
        extra_ca=base.extra_ca,
    )


def cmd_mcp(args: argparse.Namespace) -> int:
    """Run the MCP server until its client leaves (stdio) or a signal stops it."""
    import asyncio

    from jupyter_exec.engine.environments import with_network
    from jupyter_exec.mcp.server import SessionRegistry, _check_loopback, new_token, serve

    environment = environment_from_args(args)
    policy = network_policy_from_args(args, environment.backend)
    if args.ask_person:
        policy = _asking(policy, args, environment.backend)
    if policy is not None:
        environment = with_network(environment, policy)
    defaults = session_kwargs(args, ("timeout", *STATE_OPTIONS))
    root = Path(args.work_dir or "jupyter-exec-mcp").expanduser()
    token: str | None = None
    if args.transport == "http":
        _check_loopback(args.host)
        if not args.no_token:
            token = new_token()
            print(
                f"[jupyter-exec] token: {token}  (send the header 'Authorization: Bearer {token}')",
                file=sys.stderr,
                flush=True,
            )
    registry = SessionRegistry(
        root,
        environment,
        timeout=defaults.pop("timeout"),
        max_sessions=args.max_sessions,
        pool_size=args.pool_size,
        cull_idle_timeout=args.cull_idle,
        sleep_after=args.sleep_after,
        session_options=defaults,
        zygote=zygote_kwargs(args),
    )
    asyncio.run(
        serve_until_stopped(
            serve(
                registry,
                transport=args.transport,
                host=args.host,
                port=args.port,
                max_output_chars=args.max_output_chars,
                token=token,
            ),
            registry.close_all,
            registry.busy,
        )
    )
    return EXIT_OK


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``jupyter-exec mcp``."""
    http = parser.add_argument_group("transport")
    http.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (default; what desktop clients launch) or streamable HTTP",
    )
    http.add_argument(
        "--host", default="127.0.0.1", help="HTTP address; loopback only (default 127.0.0.1)"
    )
    http.add_argument(
        "--port",
        type=positive_int,
        default=DEFAULT_PORT,
        help=f"HTTP port (default {DEFAULT_PORT})",
    )
    http.add_argument(
        "--no-token",
        action="store_true",
        help="HTTP without a token: any process of any user on this machine can run code "
        "as you (only for a single-user machine)",
    )
    sessions = parser.add_argument_group("sessions")
    sessions.add_argument(
        "--work-dir",
        metavar="DIR",
        help="root of the sessions' work dirs, one folder per session (default ./jupyter-exec-mcp)",
    )
    sessions.add_argument(
        "--max-output-chars",
        type=positive_int,
        default=DEFAULT_LLM_CHARS,
        metavar="N",
        help=f"text budget per call (default {DEFAULT_LLM_CHARS:,})",
    )
    sessions.add_argument(
        "--max-sessions",
        type=non_negative_int,
        default=16,
        metavar="N",
        help="open sessions at once; one more is refused (0: no limit; default 16)",
    )
    sessions.add_argument(
        "--pool-size",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="kernels of the session environment kept started and ready, so a new session's "
        "first call does not wait for a kernel to start (each idle kernel holds ~50 MB; "
        "default 0)",
    )
    sessions.add_argument(
        "--cull-idle",
        type=non_negative_float,
        default=0.0,
        metavar="S",
        help="close sessions idle for S seconds; their files and notebook stay (0: never; "
        "default 0)",
    )
    sessions.add_argument(
        "--sleep-after",
        type=non_negative_float,
        default=0.0,
        metavar="S",
        help="put sessions idle for S seconds to sleep: their state saved, their kernel "
        "stopped; the next call wakes them (0: never; default 0)",
    )
    add_session_options(
        parser,
        ("timeout", "python", "backend", *STATE_OPTIONS),
        title="session",
        helps={
            "timeout": "Seconds a call may run before it is interrupted; the session keeps "
            "its state."
        },
    )
    add_environment(parser)
    add_network_policy(parser)
    ask = parser.add_argument_group(
        "asking a person (Docker kernels)",
        "A host the policy neither allows nor denies is put to the person at the MCP client "
        "(an MCP elicitation on the execute_code call that tried it). Yes allows that host for "
        "the rest of the session; no, no answer, or a client that cannot ask, denies it, and the "
        "model is told why.",
    )
    ask.add_argument(
        "--ask-person",
        action="store_true",
        help="ask the person about hosts the policy leaves undecided, instead of denying them "
        "(with no --allow/--deny/--network-policy: about every host)",
    )
    ask.add_argument(
        "--ask-timeout",
        type=non_negative_float,
        default=DEFAULT_ASK_TIMEOUT,
        metavar="S",
        help=f"seconds the person has to answer before the host is denied (0: the default) "
        f"(default {DEFAULT_ASK_TIMEOUT:g})",
    )
    add_zygote(parser)
    parser.set_defaults(exit_at_once=True)  # main ends the process on a signal: see there


MCP_COMMAND = Command(
    "mcp",
    help="serve stateful Jupyter sessions to AI agents over MCP (stdio or HTTP)",
    description="Run an MCP server whose tools execute code in named, stateful Jupyter "
    "sessions (created on first use), list/restart/interrupt/close them, fork a session "
    "into new ones, undo cells, take and restore checkpoints, read a session's "
    "notebook, and list and fetch the files in its work dir. Images come back as image "
    "content; a call that fails is marked as an error (isError).",
    epilog=EPILOG,
    arguments=_arguments,
    run=cmd_mcp,
)
