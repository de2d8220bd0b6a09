"""The MCP server's tools: what a model may call, bound to a session registry.

:func:`build_server` makes the SDK's server object and registers every tool
on it (the state tools come from :mod:`jupyter_exec.mcp.state`); how it is
then reached, over stdio or HTTP, is :mod:`jupyter_exec.mcp.server`'s
concern. Each tool is a thin view: it names a session of the
:class:`~jupyter_exec.mcp.sessions.SessionRegistry`, runs code through the
agent runner (:mod:`jupyter_exec.agents.agent`) or reads the session's notebook and
files, and turns the result into MCP content. Our own errors are written for
the user, so the tool wrapper passes their text on to the model.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import importlib
import inspect
import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_exec.agents.agent import MAX_IMAGE_BYTES, run_block
from jupyter_exec.agents.codeblocks import CodeBlock, normalise_language
from jupyter_exec.agents.llm import DEFAULT_LLM_CHARS
from jupyter_exec.boundary.paths import Folder
from jupyter_exec.engine.languages import canonical_language
from jupyter_exec.engine.outputs import strip_ansi
from jupyter_exec.engine.recorder import read_notebook
from jupyter_exec.engine.store import confined_path
from jupyter_exec.exceptions import JupyterExecError, StorageError, WorkDirError
from jupyter_exec.integrations import require
from jupyter_exec.mcp.ask import ElicitingAsk
from jupyter_exec.mcp.sessions import SessionRegistry
from jupyter_exec.mcp.state import register_state_tools
from jupyter_exec.mcp.tasks import Tasks
from jupyter_exec.models import Execution

__all__ = ["INSTRUCTIONS", "build_server"]

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
    context: Any
    v2: bool


def _sdk() -> _SDK:
    require("mcp", "mcp", "The MCP server")
    try:
        module = importlib.import_module("mcp.server.mcpserver")
        errors = importlib.import_module("mcp.server.mcpserver.exceptions")
        return _SDK(module.MCPServer, module.Image, errors.ToolError, module.Context, True)
    except ImportError:
        module = importlib.import_module("mcp.server.fastmcp")
        errors = importlib.import_module("mcp.server.fastmcp.exceptions")
        return _SDK(module.FastMCP, module.Image, errors.ToolError, module.Context, False)


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


def _file_listing(root: Path, relative: str) -> str:
    """The files below ``root/relative`` with sizes, walked by descriptor: no link is entered."""
    lines: list[str] = []

    def walk(folder: Folder, prefix: str) -> bool:
        for name in sorted(os.listdir(folder.fd)):
            if name.startswith("."):
                continue
            st = folder.lstat(name)
            if st is None or stat.S_ISLNK(st.st_mode):
                continue
            shown = f"{prefix}{name}"
            if stat.S_ISDIR(st.st_mode):
                with folder.sub(name) as sub:
                    if not walk(sub, f"{shown}/"):
                        return False
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            lines.append(f"{shown}  ({st.st_size:,} bytes)")
            if len(lines) >= MAX_LISTED:
                lines.append(f"[... listing stopped at {MAX_LISTED} files ...]")
                return False
        return True

    with Folder.open(root, relative) as start:
        walk(start, f"{relative}/" if relative else "")
    return "\n".join(lines) or "(no files)"


def _read_head(root: Path, relative: str) -> tuple[bytes, int]:
    """The first bytes of a file that a tool may show, and its size, read by descriptor.

    No link is followed and no FIFO or device opened (:class:`Folder`); at most what could be
    shown is read (an image up to MAX_IMAGE_BYTES, else a text's worth), whatever the size.
    """
    parent, _, name = relative.rpartition("/")
    with Folder.open(root, parent) as folder:
        fd = folder.open_file(name, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        wanted = max(MAX_IMAGE_BYTES, 4 * MAX_READ_CHARS + 4)
        chunks: list[bytes] = []
        got = 0
        while got < wanted and (chunk := os.read(fd, min(1 << 20, wanted - got))):
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks), size
    finally:
        os.close(fd)


def _status(described: dict[str, Any]) -> str:
    if described.get("dormant"):
        return "dormant (from before the server restarted; back with its state on first use)"
    if described.get("state") == "sleeping":
        return "sleeping (state saved, no kernel; its next call wakes it)"
    return "alive" if described["alive"] else "dead"


def _state_note(execution: Execution | None) -> str:
    """A line before the output when the cell's state came back from somewhere (a wake from
    sleep, a recovery), naming what did not: the model should not count on those names."""
    recovered = execution.recovered if execution is not None else None
    if recovered is None:
        return ""
    note = f"[state: {recovered.source}"
    if recovered.lost:
        note += "; not back: " + "; ".join(f"{n} ({why})" for n, why in recovered.lost.items())
    return note + "]\n"


# -- the server -------------------------------------------------------------------------------


def _asker(registry: SessionRegistry) -> ElicitingAsk | None:
    """The server policy's ``ask``, when it asks a person through the MCP client."""
    policy = getattr(registry.environment, "policy", None)
    ask = getattr(policy, "ask", None)
    return ask if isinstance(ask, ElicitingAsk) else None


def build_server(registry: SessionRegistry, *, max_output_chars: int = DEFAULT_LLM_CHARS) -> Any:
    """The MCP server object, its tools bound to ``registry``."""
    sdk = _sdk()
    image_class = sdk.image
    types = importlib.import_module("mcp.types")
    server = sdk.server("jupyter-exec", instructions=INSTRUCTIONS)

    asker = _asker(registry)

    def text(value: str) -> Any:
        return types.TextContent(type="text", text=value)

    def tool(fn: Callable[..., Awaitable[Any]]) -> None:
        """Register ``fn``; our errors reach the model as the tool's error text.

        The SDK hides the message of an unexpected exception (it may hold
        secrets); ours are written for the user, so they are passed on as
        ``ToolError``s, which the SDK shows.
        """

        signature = inspect.signature(fn)

        @functools.wraps(fn)
        async def run(*args: Any, **kwargs: Any) -> Any:
            try:
                named = signature.bind_partial(*args, **kwargs)
                named.apply_defaults()
                session = named.arguments.get("session")
                if isinstance(session, str):  # from before a restart: back on its first use
                    await registry.wake(session)
                return await fn(*args, **kwargs)
            except (JupyterExecError, ValueError) as exc:
                raise sdk.tool_error(str(exc)) from exc

        server.tool(structured_output=False)(run)

    async def execute_code(
        code: str,
        session: str = "default",
        language: str = "python",
        timeout: float | None = None,
        backend: str | None = None,
        ctx: Any = None,
    ) -> Any:
        """Run code in a named, stateful session (created on first use) and return its output.

        language: "python" (default), "bash" (shell commands in a Python session's own
        environment), or "r", "javascript", "typescript": a session of that language's kernel
        (a session keeps the language it was made with; name another session for another).
        timeout: seconds before the code is interrupted (default: the server's).
        backend: "local" or "docker", for a new session (default: the server's).
        Variables persist between calls to the same session. Images are returned as images;
        files written are listed relative to the session's work dir.
        """
        if language.lower() in _LANGUAGES:
            live = await registry.get(session, backend=backend, language="python")
            block = CodeBlock.from_code(code, normalise_language(language))
        else:  # a kernel of its own: the code is its cell as given
            kernel_language = canonical_language(language)
            live = await registry.get(session, backend=backend, language=kernel_language)
            block = CodeBlock(code=code, language="python")
        with asker.running(session, ctx) if asker is not None else contextlib.nullcontext():
            result = await run_block(
                live, block, timeout=timeout, max_output_chars=max_output_chars
            )
        content = [text(_state_note(result.execution) + result.text)]
        content += [
            image_class(data=data, format=fmt).to_image_content() for data, fmt in result.images
        ]
        # A failing cell is a failed call: clients and models tell success by isError.
        return types.CallToolResult.model_validate(
            {"content": content, "isError": result.exit_code != 0}
        )

    # The SDK hands a tool its call's context by this annotation (an --ask-person question
    # goes out on that call); a real class, as the SDK is imported only here.
    execute_code.__annotations__["ctx"] = sdk.context
    tool(execute_code)

    @tool
    async def list_sessions() -> str:
        """The open sessions (name, backend, whether the kernel is alive, work dir, notebook)
        and the warm pools of ready kernels, if any. A session from before the server
        restarted is "dormant": naming it in any tool brings it back, state included."""
        sessions, pools = registry.describe(), registry.pools()
        lines = [
            f"{s['name']}: {s['backend']}, {_status(s)}, "
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
        relative = confined_path(live.work_dir, path).relative_to(live.work_dir.absolute())
        shown = relative.as_posix() if relative.parts else ""
        try:
            return _file_listing(live.work_dir, shown)
        except (FileNotFoundError, StorageError):
            raise WorkDirError(f"{path!r} is not a folder in the work dir") from None

    @tool
    async def read_file(session: str, path: str) -> list[Any]:
        """A file of the session's work dir: text as text, images as images."""
        live = registry.existing(session)
        target = confined_path(live.work_dir, path)
        relative = target.relative_to(live.work_dir.absolute()).as_posix()
        try:  # by descriptor: a link swapped in since the check above is refused too
            data, size = _read_head(live.work_dir, relative)
        except (FileNotFoundError, IsADirectoryError):
            raise WorkDirError(f"no file {path!r} in the work dir") from None
        fmt = _IMAGE_SUFFIXES.get(target.suffix.lower())
        if fmt and size <= MAX_IMAGE_BYTES:
            return [image_class(data=data, format=fmt)]
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if size > len(data) and exc.start >= len(data) - 4:
                content = data[: exc.start].decode("utf-8")  # a character cut at the end
            else:
                if size > MAX_READ_CHARS:
                    return [text(f"{path}: a binary file of {size:,} bytes (too big to show)")]
                encoded = base64.b64encode(data).decode()
                return [text(f"{path}: binary, {size:,} bytes, base64:\n{encoded}")]
        if len(content) > MAX_READ_CHARS or size > len(data):
            content = (
                content[:MAX_READ_CHARS]
                + f"\n[... the file has {size:,} bytes; the rest is not shown ...]"
            )
        return [text(content)]

    register_state_tools(tool, registry)
    if sdk.v2:  # execute_code as an MCP task (protocol 2025-11-25): :mod:`.tasks`
        tasks = Tasks(registry.root, server.call_tool)
        tasks.on_cancel(registry.interrupt_running)
        registry.on_stop(tasks.stop, tasks.sessions)
        server.middleware.append(tasks)
    return server
