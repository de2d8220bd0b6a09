"""The MCP server's tools: what a model may call, bound to a session registry.

:func:`build_server` makes the SDK's server object and registers every tool
on it (the state tools come from :mod:`jupyter_exec.mcp_state`); how it is
then reached, over stdio or HTTP, is :mod:`jupyter_exec.mcp_server`'s
concern. Each tool is a thin view: it names a session of the
:class:`~jupyter_exec.mcp_sessions.SessionRegistry`, runs code through the
agent runner (:mod:`jupyter_exec.agent`) or reads the session's notebook and
files, and turns the result into MCP content. Our own errors are written for
the user, so the tool wrapper passes their text on to the model.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import importlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_exec.agent import MAX_IMAGE_BYTES, run_block
from jupyter_exec.codeblocks import CodeBlock, normalise_language
from jupyter_exec.exceptions import JupyterExecError, WorkDirError
from jupyter_exec.integrations import require
from jupyter_exec.llm import DEFAULT_LLM_CHARS
from jupyter_exec.mcp_ask import ElicitingAsk
from jupyter_exec.mcp_sessions import SessionRegistry
from jupyter_exec.mcp_state import register_state_tools
from jupyter_exec.outputs import strip_ansi
from jupyter_exec.recorder import read_notebook
from jupyter_exec.safefs import Folder
from jupyter_exec.store import confined_path

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

        @functools.wraps(fn)
        async def run(*args: Any, **kwargs: Any) -> Any:
            try:
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
        with asker.running(session, ctx) if asker is not None else contextlib.nullcontext():
            result = await run_block(
                live, block, timeout=timeout, max_output_chars=max_output_chars
            )
        content = [text(result.text)]
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
