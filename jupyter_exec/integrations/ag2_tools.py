"""An AG2 1.x ``CodeEnvironment`` backed by one stateful jupyter-exec session.

AG2 1.x runs model-written code through ``ag2.tools.SandboxCodeTool``, which
delegates to a ``CodeEnvironment``: ``supported_languages`` and ``async
run(code, language, *, context=None) -> CodeRunResult``. Its own environments
run each call in a fresh process, so nothing survives from one call to the
next. :class:`JupyterCodeEnvironment` runs every call in the same kernel:
variables, imports and loaded data persist, shell (``bash``) runs in the
kernel's own environment through ``%%bash``, and everything is recorded in a
notebook::

    from ag2 import Agent
    from ag2.tools import SandboxCodeTool
    from jupyter_exec.integrations.ag2_tools import JupyterCodeEnvironment

    env = JupyterCodeEnvironment(work_dir="analysis", environment="docker")
    agent = Agent("analyst", config=..., tools=[SandboxCodeTool(env)])

A thin adapter: the code is run by :mod:`jupyter_exec.agents.agent`, shared with
every other front end (what runs, what the model reads, the exit code). AG2
is imported only when a result is made (this module imports without it);
``CodeRunResult`` comes from ``ag2.tools.code``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_exec.agents.agent import run_block
from jupyter_exec.agents.codeblocks import CodeBlock
from jupyter_exec.agents.llm import DEFAULT_LLM_CHARS
from jupyter_exec.engine.environments import Environment, parse_environment
from jupyter_exec.integrations import adapter_options, require
from jupyter_exec.network import NetworkPolicy
from jupyter_exec.session.session import AsyncSession

__all__ = ["JupyterCodeEnvironment"]

_LANGUAGES = {"python": "python", "bash": "sh"}


def _run_result(output: str, exit_code: int) -> Any:
    code = require("ag2.tools.code", "ag2-tools", "JupyterCodeEnvironment")
    return code.CodeRunResult(output=output, exit_code=exit_code)


class JupyterCodeEnvironment:
    """A stateful ``CodeEnvironment`` for AG2 1.x: Python and bash in one Jupyter kernel.

    Parameters are as for :class:`~jupyter_exec.integrations.ag2.SessionCodeExecutor`:
    ``work_dir``, ``environment`` (an
    :class:`~jupyter_exec.engine.environments.Environment` or its string form),
    ``timeout`` per call, ``max_output_chars``, ``network`` (a
    :class:`~jupyter_exec.NetworkPolicy` for a Docker environment), and any other
    :class:`~jupyter_exec.AsyncSession` option. The kernel starts on the first
    ``run`` (or ``async with``) and stops with :meth:`aclose`.
    """

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        *,
        environment: Environment | str | None = None,
        timeout: float | None = 60.0,
        max_output_chars: int = DEFAULT_LLM_CHARS,
        network: NetworkPolicy | Mapping[str, Any] | None = None,
        **session_options: Any,
    ) -> None:
        self.environment = parse_environment(environment, network=network)
        self.timeout = timeout
        self.max_output_chars = max_output_chars
        self._work_dir = work_dir
        self._session_options = session_options
        self._session: AsyncSession | None = None
        self._starting = asyncio.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> JupyterCodeEnvironment:
        """A copy is the same environment: it is a handle on one live kernel.

        AG2 deep-copies every tool given to an ``Agent``; a copied session
        (sockets, locks) would be broken, and a fresh one would lose the state
        that is the point of this environment.
        """
        return self

    def __copy__(self) -> JupyterCodeEnvironment:
        return self

    @property
    def supported_languages(self) -> tuple[str, ...]:
        """What the model may ask for: Python, and bash run in the kernel's environment."""
        return ("python", "bash")

    async def session(self) -> AsyncSession:
        """The environment's session, started on first use."""
        async with self._starting:
            if self._session is None:
                options = adapter_options(
                    await self.environment.async_session_options(),
                    self._session_options,
                    self.timeout,
                )
                session = AsyncSession(self._work_dir, **options)
                await session.start()
                self._session = session
        return self._session

    async def run(self, code: str, language: str, *, context: Any = None) -> Any:
        """Run ``code`` in the session; return a ``CodeRunResult`` (output text, exit code).

        Exit code 0 on success, 1 for an error, 124 for a timeout (the code was
        interrupted; the kernel is restarted only if the interrupt did not
        take), a failed bash script's own status. ``context`` is accepted for
        the protocol and not used: the session itself is the state.
        """
        kind = _LANGUAGES.get(language)
        if kind is None:
            return _run_result(
                f"unsupported language {language!r}: use one of "
                f"{', '.join(self.supported_languages)}",
                1,
            )
        session = await self.session()
        result = await run_block(
            session,
            CodeBlock.from_code(code, kind),
            timeout=self.timeout,
            max_output_chars=self.max_output_chars,
        )
        return _run_result(result.text, result.exit_code)

    @property
    def work_dir(self) -> Path | None:
        """The work dir, once the session has started."""
        return self._session.work_dir if self._session is not None else None

    async def restart(self) -> None:
        """Restart the kernel: variables and imports are gone, files stay."""
        if self._session is not None:
            await self._session.restart()

    async def aclose(self) -> None:
        """Stop the kernel (the work dir and notebook stay). Idempotent."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> JupyterCodeEnvironment:
        await self.session()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
