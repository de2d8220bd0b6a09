"""The MCP server: named, stateful Jupyter sessions as tools (``jupyter-exec mcp`` runs it).

Built on the official ``mcp`` Python SDK (its ``MCPServer``, called ``FastMCP``
before mcp 2; both are supported). Transports: stdio (what desktop clients
launch) and streamable HTTP. Whoever reaches the HTTP server runs code as
this user, so it binds to loopback only, every request must carry the
server's bearer token (:class:`BearerAuth`; other users and processes of the
machine reach loopback too), and a request whose Host or Origin header is not
a loopback name is refused (a web page's DNS-rebinding attempt). The command
line (:mod:`jupyter_exec.cli.mcp`) closes every session on any exit, signals
included.

Tools::

    execute_code(code, session="default", language="python", timeout, backend)
                         run code in a named session, created on first use
    list_sessions()      the sessions, with work dir, notebook and state
    restart_session(session) / interrupt_session(session) / close_session(session)
    read_notebook(session)   the session's notebook as readable text
    list_files(session, path=".") / read_file(session, path)
                         the session's work dir (paths confined to it)
    fork_session(session, n=1, name) / undo(session, n=1) / checkpoint(session, name)
    restore_checkpoint(session, checkpoint) / list_checkpoints(session)
                         a session's state: branches, undo, named checkpoints
                         (:mod:`jupyter_exec.mcp_state`)

Code runs through the agent runner (:mod:`jupyter_exec.agent`), as for every
agent front end: its text, images a cell displayed or saved as MCP image
content, and ``isError`` set when the code failed. Each
session has its own work dir ``<root>/<session>`` holding its files and its
notebook. The sessions are held by an
:class:`~jupyter_exec.manager.AsyncSessionManager` rooted at the work dir, which
brings ``--max-sessions``, ``--cull-idle`` and a warm pool (``--pool-size``)
of kernels of the server's environment. With a network policy (a
:class:`~jupyter_exec.environments.DockerEnv` whose ``network`` is a
:class:`~jupyter_exec.NetworkPolicy`), every session is a Docker kernel that
reaches only the hosts the policy allows, and the text of a cell that tried
another says so (the agent runner lists the denied connections).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hmac
import importlib
import ipaddress
import logging
import os
import secrets
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_exec.agent import MAX_IMAGE_BYTES, run_block
from jupyter_exec.codeblocks import CodeBlock, normalise_language
from jupyter_exec.environments import DockerEnv, Environment
from jupyter_exec.exceptions import (
    InvalidArgument,
    JupyterExecError,
    SessionLimitError,
    SessionNotFound,
    WorkDirError,
)
from jupyter_exec.integrations import require
from jupyter_exec.llm import DEFAULT_LLM_CHARS
from jupyter_exec.manager import AsyncSessionManager, SessionInfo
from jupyter_exec.mcp_state import register_state_tools
from jupyter_exec.naming import validate_name
from jupyter_exec.outputs import strip_ansi
from jupyter_exec.recorder import read_notebook
from jupyter_exec.safefs import Folder
from jupyter_exec.session import AsyncSession
from jupyter_exec.store import confined_path

__all__ = ["TOKEN_ENV", "SessionRegistry", "build_server", "http_app", "main", "serve"]

log = logging.getLogger("jupyter_exec.mcp")

DEFAULT_PORT = 8765
TOKEN_ENV = "JUPYTER_EXEC_MCP_TOKEN"
"""Environment variable holding the HTTP transport's token (else one is made and printed)."""
MAX_READ_CHARS = 50_000
MAX_LISTED = 500
_IMAGE_SUFFIXES = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".gif": "gif", ".webp": "webp"}
_LANGUAGES = ("python", "bash", "sh", "shell")

INSTRUCTIONS = """\
Stateful Python sessions on Jupyter kernels. Each named session keeps its variables, imports
and loaded data between execute_code calls, and has its own work dir (the kernel's cwd) where
files the code writes and plots it shows are saved; every call is recorded in the session's
notebook. Shell code (language="bash") runs in the same environment, so `pip install x` there
makes `import x` work next. A first line `# filename: <name>` also saves the code to that file.
Long-running code is interrupted at its timeout and the session keeps its state.
To explore, fork_session copies a session's live state into new sessions; checkpoint and
restore_checkpoint go back to a named state; undo takes back the last cells (when enabled).
"""


@dataclass(frozen=True)
class _SDK:
    """What we use of the SDK: from ``mcp.server.mcpserver`` (mcp 2) or ``.fastmcp`` (mcp 1)."""

    server: Any
    image: Any
    tool_error: Any
    v2: bool


def _sdk() -> _SDK:
    require("mcp", "mcp", "The MCP server")
    try:
        module = importlib.import_module("mcp.server.mcpserver")
        errors = importlib.import_module("mcp.server.mcpserver.exceptions")
        return _SDK(module.MCPServer, module.Image, errors.ToolError, True)
    except ImportError:
        module = importlib.import_module("mcp.server.fastmcp")
        errors = importlib.import_module("mcp.server.fastmcp.exceptions")
        return _SDK(module.FastMCP, module.Image, errors.ToolError, False)


# -- sessions ---------------------------------------------------------------------------------


class SessionRegistry:
    """The server's named sessions, held by an :class:`AsyncSessionManager` over ``root``.

    Each session is created on first use in ``<root>/<name>`` with the
    server's environment (or Docker, when asked for and allowed). The manager
    brings the limits (``max_sessions``), idle culling (``cull_idle_timeout``)
    and a warm pool of ``pool_size`` kernels of the server's environment, so
    a new session's first call need not wait for a kernel to start.
    """

    def __init__(
        self,
        root: Path,
        environment: Environment,
        *,
        timeout: float | None = 600.0,
        max_sessions: int = 16,
        pool_size: int = 0,
        cull_idle_timeout: float = 0.0,
        session_options: Mapping[str, Any] | None = None,
        zygote: dict[str, Any] | None = None,
    ) -> None:
        self.root = root.absolute()
        self.environment = environment
        self.timeout = timeout
        self.pool_size = pool_size
        self.zygote = dict(zygote or {})
        """``AsyncSessionManager`` zygote traits (``zygote_size``, ``zygote_preload``): the
        environment's sessions are then forked from a zygote (local environments only)."""
        if self.zygote.get("zygote_size", 0) > 0 and environment.backend != "local":
            raise InvalidArgument(
                "a zygote pool forks local kernels only (forks of a Docker kernel would share "
                "its container); use --pool-size for Docker sessions"
            )
        self.manager = AsyncSessionManager(
            root_dir=str(self.root),
            max_sessions=max_sessions,
            cull_idle_timeout=cull_idle_timeout,
            session_defaults={"timeout": timeout, **(session_options or {})},
            pools=[],  # the environment's pool is added once its options are known: start()
            handle_sigterm=False,  # the server's transport owns the process's signals
        )
        self._options: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self._pool_task: asyncio.Task[None] | None = None

    @property
    def max_sessions(self) -> int:
        return self.manager.max_sessions

    async def start(self) -> None:
        """Start the manager; fill the pool in the background (a venv may be made first).

        Idempotent, and called on first use too, so a registry works without it.
        """
        await self.manager.start()
        wanted = self.pool_size > 0 or self.zygote.get("zygote_size", 0) > 0
        if wanted and self._pool_task is None:
            self._pool_task = asyncio.create_task(self._fill_pool(), name="jupyter-exec mcp pool")

    async def _fill_pool(self) -> None:
        try:
            options = await self._options_for(self.environment)
            if self.zygote.get("zygote_size", 0) > 0:  # first: it serves the environment's key
                await self.manager.add_zygote(
                    self.zygote["zygote_size"],
                    self.zygote.get("zygote_preload"),
                    self.zygote.get("zygote_setup"),
                    **options,
                )
            if self.pool_size > 0:
                await self.manager.add_pool(self.pool_size, **options)
        except Exception:  # sessions still start, only without a warm kernel
            log.exception("the warm pool could not be set up")

    async def _options_for(self, environment: Environment) -> dict[str, Any]:
        """The environment's session options, prepared once (a venv may take a while).

        Shared by concurrent callers and the pool; shielded, so a caller that
        gives up does not cancel the preparation for the others.
        """
        key = repr(environment)
        task = self._options.get(key)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.ensure_future(environment.async_session_options())
            self._options[key] = task
        return await asyncio.shield(task)

    def _environment_for(self, backend: str | None) -> Environment:
        if backend in (None, "", "default") or backend == self.environment.backend:
            return self.environment
        if backend == "docker":
            return DockerEnv()
        if backend == "local":
            raise JupyterExecError(
                "this server runs code in Docker only; local sessions are not allowed"
            )
        raise ValueError(f"unknown backend {backend!r}: use 'local' or 'docker'")

    async def get(self, name: str, *, backend: str | None = None) -> AsyncSession:
        """The session called ``name``, started now if it does not exist yet."""
        validate_name(name)
        await self.start()
        if name not in self.manager:
            environment = self._environment_for(backend)
            options = await self._options_for(environment)
            try:
                await self.manager.session(name, **options)
            except SessionLimitError as exc:
                open_now = ", ".join(sorted(self._names())) or "none"
                raise SessionLimitError(
                    f"cannot start session {name!r}: this server allows {self.max_sessions} "
                    f"open session(s) at once (--max-sessions) and that many are open "
                    f"({open_now}); close one with close_session, or use an open one"
                ) from exc
        info = self._info(name) if backend not in (None, "", "default") else None
        if info is not None and backend != info.backend:
            raise JupyterExecError(
                f"session {name!r} already runs on {info.backend}; close it first "
                f"or use another name for a {backend} session"
            )
        return self.manager.get(name)

    def _info(self, name: str) -> SessionInfo | None:
        return next((i for i in self.manager.list() if i.name == name), None)

    def existing(self, name: str) -> AsyncSession:
        """The session called ``name``; :class:`SessionNotFound` if there is none."""
        if name in self.manager:
            return self.manager.get(name)
        known = ", ".join(sorted(self._names())) or "none yet"
        raise SessionNotFound(f"no session named {name!r} (open sessions: {known})")

    def _names(self) -> list[str]:
        return [i.name for i in self.manager.list()]

    def describe(self) -> list[dict[str, Any]]:
        """The open sessions (looking does not count as use for idle culling)."""
        return [
            {
                "name": info.name,
                "backend": info.backend,
                "alive": info.alive,
                "work_dir": str(info.work_dir),
                "notebook": str(info.notebook_path),
                "from_pool": info.from_pool,
                "idle_seconds": info.idle_seconds,
                "network": self._network(info),
            }
            for info in sorted(self.manager.list(), key=lambda i: i.name)
        ]

    def _network(self, info: SessionInfo) -> str | None:
        """The session's network policy, as a model should read it (None: none).

        The server's: only its own environment carries one (and every session runs in it).
        """
        environment = self.environment
        policy = environment.policy if isinstance(environment, DockerEnv) else None
        return policy.describe() if policy is not None and info.backend == "docker" else None

    def pools(self) -> list[tuple[str, int, int]]:
        """Each warm pool: its label, kernels ready, and its size."""
        return [(p.key.label, p.ready, p.size) for p in self.manager.kernel_pools]

    async def close(self, name: str) -> None:
        self.existing(name)
        await self.manager.close(name)

    async def close_all(self) -> None:
        """Close every session and stop the pool's kernels."""
        if self._pool_task is not None:
            self._pool_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pool_task
        for task in self._options.values():
            task.cancel()
        await self.manager.shutdown()


# -- content ----------------------------------------------------------------------------------


def _notebook_text(path: Path, max_chars: int) -> str:
    nb = read_notebook(path)
    parts = [f"# notebook {path}"]
    for cell in nb.cells:
        if cell.cell_type != "code":
            parts.append(str(cell.source))
            continue
        parts.append(f"In [{cell.get('execution_count') or ' '}]:\n{cell.source}")
        shown: list[str] = []
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "stream":
                shown.append(strip_ansi(str(output.get("text", ""))))
            elif kind in ("execute_result", "display_data"):
                data = output.get("data", {})
                shown.append(
                    str(data["text/plain"]) if "text/plain" in data else f"[{', '.join(data)}]"
                )
            elif kind == "error":
                shown.append(f"{output.get('ename')}: {output.get('evalue')}")
        if shown:
            parts.append("Out:\n" + "\n".join(s.rstrip("\n") for s in shown))
    text = "\n\n".join(parts)
    if len(text) > max_chars:
        cut = len(text) - max_chars
        text = (
            f"[... the first {cut:,} characters cut; read the .ipynb for all ...]\n"
            + text[-max_chars:]
        )
    return text


def _file_listing(root: Path, folder: Path) -> str:
    lines: list[str] = []
    base = root.resolve()
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            path = Path(dirpath) / name
            try:
                size = path.stat().st_size
            except OSError:
                continue
            lines.append(f"{path.relative_to(base).as_posix()}  ({size:,} bytes)")
            if len(lines) >= MAX_LISTED:
                lines.append(f"[... listing stopped at {MAX_LISTED} files ...]")
                return "\n".join(lines)
    return "\n".join(lines) or "(no files)"


# -- the server -------------------------------------------------------------------------------


def build_server(registry: SessionRegistry, *, max_output_chars: int = DEFAULT_LLM_CHARS) -> Any:
    """The MCP server object, its tools bound to ``registry``."""
    sdk = _sdk()
    image_class = sdk.image
    types = importlib.import_module("mcp.types")
    server = sdk.server("jupyter-exec", instructions=INSTRUCTIONS)

    def text(value: str) -> Any:
        return types.TextContent(type="text", text=value)

    def tool(fn: Callable[..., Awaitable[Any]]) -> None:
        """Register ``fn``; our errors reach the model as the tool's error text.

        The SDK hides the message of an unexpected exception (it may hold
        secrets); ours are written for the user, so they are passed on as
        ``ToolError``s, which the SDK shows.
        """

        @functools.wraps(fn)
        async def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except (JupyterExecError, ValueError) as exc:
                raise sdk.tool_error(str(exc)) from exc

        server.tool(structured_output=False)(run)

    @tool
    async def execute_code(
        code: str,
        session: str = "default",
        language: str = "python",
        timeout: float | None = None,
        backend: str | None = None,
    ) -> Any:
        """Run code in a named, stateful session (created on first use) and return its output.

        language: "python" (default) or "bash" (runs in the session's own environment).
        timeout: seconds before the code is interrupted (default: the server's).
        backend: "local" or "docker", for a new session (default: the server's).
        Variables persist between calls to the same session. Images are returned as images;
        files written are listed relative to the session's work dir.
        """
        if language.lower() not in _LANGUAGES:
            raise ValueError(f"unsupported language {language!r}: use python or bash")
        live = await registry.get(session, backend=backend)
        block = CodeBlock.from_code(code, normalise_language(language))
        result = await run_block(live, block, timeout=timeout, max_output_chars=max_output_chars)
        content = [text(result.text)]
        content += [
            image_class(data=data, format=fmt).to_image_content() for data, fmt in result.images
        ]
        # A failing cell is a failed call: clients and models tell success by isError.
        return types.CallToolResult.model_validate(
            {"content": content, "isError": result.exit_code != 0}
        )

    @tool
    async def list_sessions() -> str:
        """The open sessions (name, backend, whether the kernel is alive, work dir, notebook)
        and the warm pools of ready kernels, if any."""
        sessions, pools = registry.describe(), registry.pools()
        lines = [
            f"{s['name']}: {s['backend']}, {'alive' if s['alive'] else 'dead'}, "
            f"work dir {s['work_dir']}, notebook {s['notebook']}"
            + (", kernel from the warm pool" if s["from_pool"] else "")
            + (f", network policy ({s['network']})" if s["network"] else "")
            for s in sessions
        ] or ["no sessions yet (execute_code creates one)"]
        lines += [f"warm pool {name}: {ready}/{size} kernels ready" for name, ready, size in pools]
        return "\n".join(lines)

    @tool
    async def restart_session(session: str = "default") -> str:
        """Restart a session's kernel: variables and imports are lost, files stay."""
        await registry.existing(session).restart()
        return f"session {session!r} restarted: its variables and imports are gone"

    @tool
    async def interrupt_session(session: str = "default") -> str:
        """Interrupt the code running in a session (like Ctrl-C); its state is kept."""
        await registry.existing(session).interrupt()
        return f"session {session!r} interrupted"

    @tool
    async def close_session(session: str) -> str:
        """Stop a session's kernel; its work dir and notebook stay on disk."""
        await registry.close(session)
        return f"session {session!r} closed"

    @tool
    async def read_notebook(session: str = "default", max_chars: int = 20_000) -> str:
        """The session's notebook as text: each cell's code and a summary of its outputs."""
        live = registry.existing(session)
        if live.notebook_path is None:
            return "this session records no notebook"
        return _notebook_text(live.notebook_path, max(500, max_chars))

    @tool
    async def list_files(session: str = "default", path: str = ".") -> str:
        """Files in the session's work dir (or a folder of it), with sizes."""
        live = registry.existing(session)
        folder = confined_path(live.work_dir, path)
        if not folder.is_dir():
            raise WorkDirError(f"{path!r} is not a folder in the work dir")
        return _file_listing(live.work_dir, folder)

    @tool
    async def read_file(session: str, path: str) -> list[Any]:
        """A file of the session's work dir: text as text, images as images."""
        live = registry.existing(session)
        target = confined_path(live.work_dir, path)
        base = live.work_dir.resolve()
        try:  # read without following a link swapped in since the check above
            with Folder.open(base, target.parent.relative_to(base)) as folder:
                data = folder.read_bytes(target.name)
        except (FileNotFoundError, IsADirectoryError):
            raise WorkDirError(f"no file {path!r} in the work dir") from None
        fmt = _IMAGE_SUFFIXES.get(target.suffix.lower())
        if fmt and len(data) <= MAX_IMAGE_BYTES:
            return [image_class(data=data, format=fmt)]
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            if len(data) > MAX_READ_CHARS:
                return [text(f"{path}: a binary file of {len(data):,} bytes (too big to show)")]
            encoded = base64.b64encode(data).decode()
            return [text(f"{path}: binary, {len(data):,} bytes, base64:\n{encoded}")]
        if len(content) > MAX_READ_CHARS:
            content = (
                content[:MAX_READ_CHARS]
                + f"\n[... {len(content) - MAX_READ_CHARS:,} more characters not shown ...]"
            )
        return [text(content)]

    register_state_tools(tool, registry)
    return server


# -- running it -------------------------------------------------------------------------------


def _check_loopback(host: str) -> None:
    """Refuse to listen beyond this machine: the tools run arbitrary code."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InvalidArgument(
            f"refusing to listen on {host}: the MCP server runs code for whoever connects, "
            "so it only binds to loopback (127.0.0.1, ::1, localhost)"
        )


def _loopback_names(host: str) -> list[str]:
    """The Host header values a request to ``host`` may carry (any port)."""
    names = {host, "127.0.0.1", "localhost", "[::1]"}
    return sorted(f"[{n}]" if ":" in n and not n.startswith("[") else n for n in names)


def transport_security(host: str) -> Any:
    """The SDK's DNS-rebinding guard, on for every loopback address we may bind.

    A web page the user visits can make their browser send requests to
    localhost; its Host header then names the attacker's domain and its Origin
    the attacker's site, so both are checked against loopback names.
    """
    security = importlib.import_module("mcp.server.transport_security")
    names = _loopback_names(host)
    return security.TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{n}:*" for n in names],
        allowed_origins=[f"http://{n}:*" for n in names],
    )


class BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``.

    Binding to loopback keeps other machines out, not other users and
    processes of this one; the token does. Compared in constant time.
    """

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                body = (
                    b'{"error": "unauthorized: send the header Authorization: Bearer <token> '
                    b"(the token jupyter-exec mcp printed, or $" + TOKEN_ENV.encode() + b')"}'
                )
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="jupyter-exec"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: Any, *, host: str, token: str | None) -> Any:
    """The streamable-HTTP ASGI app: Host/Origin checked, and the token required unless None."""
    security = transport_security(host)
    if _sdk().v2:
        app = server.streamable_http_app(host=host, transport_security=security)
    else:
        server.settings.transport_security = security
        app = server.streamable_http_app()
    return BearerAuth(app, token) if token is not None else app


def new_token() -> str:
    """A token for the HTTP transport: from ``$JUPYTER_EXEC_MCP_TOKEN``, else a fresh one."""
    return os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)


async def serve(
    registry: SessionRegistry,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    max_output_chars: int = DEFAULT_LLM_CHARS,
    token: str | None = None,
) -> None:
    """Serve until the client goes away (stdio) or the task is cancelled (HTTP).

    Closing the sessions is the caller's: the command line runs
    ``registry.close_all()`` on every exit path, signals included.
    """
    server = build_server(registry, max_output_chars=max_output_chars)
    await registry.start()
    if transport == "stdio":
        await server.run_stdio_async()
        return
    _check_loopback(host)
    import uvicorn

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Any:  # the command line owns the process's signals
            yield

    app = http_app(server, host=host, token=token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    print(
        f"[jupyter-exec] MCP server on http://{host}:{port}/mcp (streamable HTTP)",
        file=sys.stderr,
        flush=True,
    )
    await _Server(config).serve()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jupyter_exec.mcp_server``: ``jupyter-exec mcp`` on its own."""
    from jupyter_exec.cli import main as cli_main

    return cli_main(["mcp", *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    sys.exit(main())
