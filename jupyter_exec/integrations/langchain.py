"""A LangChain / LangGraph tool that runs Python in stateful jupyter-exec sessions, one per thread.

LangChain agents (``langchain.agents.create_agent``, LangGraph's prebuilt
agents, any ``bind_tools`` model) call tools with JSON arguments and show the
model what the tool returns. :func:`python_tool` makes such a tool: the model
sends ``code``, the code runs in a Jupyter kernel that keeps its variables
from one call to the next, and the model reads what every jupyter-exec front
end shows (outputs in order, plots named by the file they were saved to, a
short traceback, the timeout), with the images themselves as image content
blocks for a multimodal model::

    from langchain.agents import create_agent
    from jupyter_exec.integrations.langchain import JupyterSessions, python_tool

    sessions = JupyterSessions(work_dir="analysis", environment="docker")
    agent = create_agent(model, tools=[python_tool(sessions)])
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "alice"}})

State is kept per LangGraph thread (``configurable.thread_id``): each thread
gets its own session, in its own folder of the work dir, recorded in its own
notebook; calls outside a thread share one session (in ``_shared``). A failing call is a
``ToolException``, which LangChain returns to the model as an error tool
message (``status="error"``) holding the same text.

A thin adapter over :func:`jupyter_exec.agents.agent.run_block`. Every session lives
on jupyter-exec's own event loop (the one blocking sessions use), so the tool
works from synchronous ``invoke`` and from ``ainvoke`` in any event loop.
LangChain is imported when a tool is made; without it,
:class:`~jupyter_exec.integrations.MissingDependency` names the extra
(``jupyter-exec[langchain]``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any

from jupyter_exec.agents.agent import BlockResult, run_block
from jupyter_exec.agents.codeblocks import CodeBlock, normalise_language
from jupyter_exec.agents.kernels import LanguageKernels
from jupyter_exec.agents.llm import DEFAULT_LLM_CHARS
from jupyter_exec.boundary.naming import safe_name
from jupyter_exec.engine.environments import Environment, parse_environment
from jupyter_exec.engine.loop_thread import LOOP_THREAD, run_blocking
from jupyter_exec.integrations import adapter_options, require
from jupyter_exec.session.session import AsyncSession

__all__ = ["DEFAULT_DESCRIPTION", "JupyterSessions", "python_tool"]


DEFAULT_DESCRIPTION = (
    "Run Python code in a stateful Jupyter kernel. Variables, imports and files persist "
    "between calls. Returns printed output, the value of the last expression, errors as a "
    "short traceback, and the files plots and tables were saved to. Lines starting with '!' "
    "run shell commands; '%pip install x' installs a package."
)
SHARED_FOLDER = "_shared"
"""The folder of the session used by calls made outside a LangGraph thread.

No thread id maps to it: :func:`_thread_folder` never starts a name with ``_``.
"""


def _thread_folder(thread_id: str) -> str:
    """A folder name for a thread id: readable, and distinct even when cleaning changed it."""
    name = safe_name(thread_id)
    if name != thread_id:
        digest = hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        name = f"{name[:40]}-{digest}"
    return name


class JupyterSessions(contextlib.AbstractContextManager["JupyterSessions"]):
    """The sessions behind a tool: one per LangGraph thread (or one for all), started on use.

    ``work_dir`` holds a folder per thread (``<work_dir>/<thread id>``; default:
    a temporary folder each); with ``per_thread=False`` every call runs in one
    session in ``work_dir`` itself. ``environment``, ``timeout`` (seconds per
    call before the code is interrupted), ``max_output_chars`` and any other
    :class:`~jupyter_exec.AsyncSession` option are as for the other adapters.
    :meth:`close` (or ``with``) stops every kernel; the work dirs and
    notebooks stay.
    """

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        *,
        environment: Environment | str | None = None,
        timeout: float | None = 60.0,
        max_output_chars: int = DEFAULT_LLM_CHARS,
        per_thread: bool = True,
        **session_options: Any,
    ) -> None:
        self.environment = parse_environment(environment)
        self.timeout = timeout
        self.max_output_chars = max_output_chars
        self.per_thread = per_thread
        self._work_dir = Path(work_dir) if work_dir is not None else None
        self._session_options = session_options
        self._sessions: dict[str | None, AsyncSession] = {}
        self._kernels: dict[str | None, LanguageKernels] = {}
        self._starting: asyncio.Lock | None = None

    def _key(self, thread_id: str | None) -> str | None:
        return thread_id if self.per_thread and thread_id else None

    async def _session(self, key: str | None) -> AsyncSession:
        """The session for ``key``, started on first use (runs on jupyter-exec's loop)."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            session = self._sessions.get(key)
            if session is None or session.closed:
                options = adapter_options(
                    await self.environment.async_session_options(),
                    self._session_options,
                    self.timeout,
                )
                work_dir = self._work_dir
                if work_dir is not None and self.per_thread:
                    work_dir = work_dir / (SHARED_FOLDER if key is None else _thread_folder(key))
                if work_dir is not None:
                    work_dir.mkdir(parents=True, exist_ok=True)
                session = AsyncSession(work_dir, **options)
                await session.start()
                self._sessions[key] = session
        return session

    async def _run(self, code: str, thread_id: str | None, language: str) -> BlockResult:
        key = self._key(thread_id)
        session = await self._session(key)
        kernels = self._kernels.get(key)
        if kernels is None or kernels.session is not session:
            kernels = self._kernels[key] = LanguageKernels(session)
        return await run_block(
            session,
            CodeBlock.from_code(code, normalise_language(language or "python", code)),
            timeout=self.timeout,
            max_output_chars=self.max_output_chars,
            kernels=kernels,
        )

    def run(self, code: str, thread_id: str | None = None, language: str = "python") -> BlockResult:
        """Run ``code`` in the thread's session, blocking; what the model is shown.

        ``language``: ``python`` (the default), ``bash``/``sh`` (a ``%%bash`` cell of
        the Python kernel), or ``r``/``js``/``ts``/``java``, run in the thread's stateful kernel
        of that language, started on first use."""
        return run_blocking(self._run(code, thread_id, language))

    async def arun(
        self, code: str, thread_id: str | None = None, language: str = "python"
    ) -> BlockResult:
        """:meth:`run` from any event loop (the session runs on jupyter-exec's loop)."""
        return await LOOP_THREAD.run_here(self._run(code, thread_id, language))

    def session(self, thread_id: str | None = None) -> AsyncSession:
        """The (started) session of ``thread_id``: its ``work_dir``, ``notebook_path``, ..."""
        return run_blocking(self._session(self._key(thread_id)))

    @property
    def thread_ids(self) -> list[str | None]:
        """The threads that have a session (``None`` for calls outside a thread)."""
        return list(self._sessions)

    def close(self) -> None:
        """Stop every kernel. Idempotent."""
        run_blocking(self.aclose_here())

    async def aclose(self) -> None:
        """:meth:`close` from an event loop."""
        await LOOP_THREAD.run_here(self.aclose_here())

    async def aclose_here(self) -> None:
        """Stop every kernel (to be awaited on jupyter-exec's loop)."""
        kernels, self._kernels = list(self._kernels.values()), {}
        for languages in kernels:
            await languages.close()
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _thread_id(config: Any) -> str | None:
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    return str(thread) if thread is not None else None


def _content(result: BlockResult) -> Any:
    """The tool's answer: the text, plus the images as standard image blocks when there are any."""
    if not result.images:
        return result.text
    blocks: list[dict[str, Any]] = [{"type": "text", "text": result.text}]
    for data, fmt in result.images:
        blocks.append(
            {
                "type": "image",
                "base64": base64.b64encode(data).decode("ascii"),
                "mime_type": f"image/{fmt}",
            }
        )
    return blocks


def python_tool(
    sessions: JupyterSessions | None = None,
    *,
    name: str = "python",
    description: str = DEFAULT_DESCRIPTION,
    images: bool = True,
) -> Any:
    """A LangChain ``StructuredTool`` running the model's ``code`` in ``sessions``.

    ``sessions`` defaults to a new :class:`JupyterSessions` (a temporary work
    dir per thread). The tool's answer is the text every jupyter-exec front
    end shows, with the images the code showed or wrote as image content
    blocks (``images=False``: the text only, which names the saved files, for
    models that take no images in tool results); an error or a timeout raises
    ``ToolException``, which the agent turns into an error tool message with
    the same text (``handle_tool_error`` is on).
    """
    tools = require("langchain_core.tools", "langchain", "python_tool")
    runnables = require("langchain_core.runnables", "langchain", "python_tool")
    owner = sessions if sessions is not None else JupyterSessions()

    def answer(result: BlockResult) -> Any:
        if result.exit_code != 0:
            raise tools.ToolException(result.text)
        return _content(result) if images else result.text

    def run_code(code: str, config: Any, language: str = "python") -> Any:
        return answer(owner.run(code, _thread_id(config), language))

    async def arun_code(code: str, config: Any, language: str = "python") -> Any:
        return answer(await owner.arun(code, _thread_id(config), language))

    for function in (run_code, arun_code):
        # LangChain reads the signature: ``config`` typed RunnableConfig is injected, not asked.
        function.__annotations__ = {
            "code": str,
            "config": runnables.RunnableConfig,
            "language": str,
            "return": Any,
        }
        function.__doc__ = (
            "Run code.\n\nArgs:\n    code: the code to run\n    language: python (default), "
            "bash, r, js, ts or java; each language keeps its own state"
        )
    tool = tools.StructuredTool.from_function(
        func=run_code,
        coroutine=arun_code,
        name=name,
        description=description,
        parse_docstring=True,
        handle_tool_error=True,
    )
    tool.metadata = {**(tool.metadata or {}), "jupyter_sessions": owner}
    return tool
