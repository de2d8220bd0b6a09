"""An AG2 1.x ``Sandbox`` (the argv-level backend under its shell and code tools) on a session.

AG2 1.x's ``SandboxShellTool`` and ``SandboxCodeTool`` run on a ``Sandbox``:
``exec(argv, *, env, timeout) -> ExecResult(output, exit_code)``, a
``workdir``, ``put_file`` / ``remove_file`` inside it. :class:`JupyterSandbox`
is one on a jupyter-exec session, and also its own ``SandboxFactory`` (what
the tools take), so one session serves an agent's shell tool and, through
:meth:`~jupyter_exec.integrations.ag2_tools.JupyterCodeEnvironment`'s
session, its stateful code tool, in the same work dir and container::

    from ag2.tools import SandboxCodeTool, SandboxShellTool
    from jupyter_exec.integrations.ag2_sandbox import JupyterSandbox
    from jupyter_exec.integrations.ag2_tools import JupyterCodeEnvironment

    code = JupyterCodeEnvironment(work_dir="analysis", environment="docker")
    shell = JupyterSandbox(share=code)        # the same kernel's session
    tools = [SandboxCodeTool(code), SandboxShellTool(shell)]

Each ``exec`` is a new process in the session's environment, run by
:func:`jupyter_exec.agents.agent.run_command` (shared with the Deep Agents backend):
the work dir as its current directory, killed with exit code 124 past its
timeout, recorded in the session's notebook as a ``%%bash`` cell. Files are
written and removed on the host side of the work dir (visible in the
container too), confined to it. AG2 is not imported here: the protocol is
structural (``isinstance(sandbox, ag2.tools.sandbox.Sandbox)`` holds) and
``ExecResult`` is made only when a result is returned.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import AsyncIterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from jupyter_exec.agents.agent import run_command
from jupyter_exec.boundary.paths import write_bytes
from jupyter_exec.engine.environments import Environment
from jupyter_exec.engine.store import confined_path
from jupyter_exec.exceptions import InvalidArgument
from jupyter_exec.integrations import require
from jupyter_exec.integrations.ag2_tools import JupyterCodeEnvironment
from jupyter_exec.network import NetworkPolicy
from jupyter_exec.session.session import AsyncSession

__all__ = ["JupyterSandbox"]

DOCKER_WORKDIR = PurePosixPath("/work")
"""Where a Docker session's work dir is mounted (the provisioner's ``work_mount``)."""


def _exec_result(output: str, exit_code: int) -> Any:
    base = require("ag2.tools.sandbox.base", "ag2-tools", "JupyterSandbox")
    return base.ExecResult(output=output, exit_code=exit_code)


def _command(argv: list[str], env: dict[str, str] | None) -> str:
    """``argv`` as one shell command, run as given (no shell parsing of its words)."""
    if not argv:
        raise InvalidArgument("argv is empty: give the program to run and its arguments")
    prefix = ["env", *(f"{key}={value}" for key, value in (env or {}).items())] if env else []
    return "exec " + shlex.join([*prefix, *argv])


class JupyterSandbox:
    """AG2 1.x ``Sandbox`` and ``SandboxFactory`` on one jupyter-exec session.

    Either its own session (``work_dir``, ``environment``, any other
    :class:`~jupyter_exec.AsyncSession` option), or ``share=`` a
    :class:`~jupyter_exec.integrations.ag2_tools.JupyterCodeEnvironment`'s.
    ``timeout`` is the default seconds per command; ``max_output`` the
    characters of output kept (the end is cut, as AG2's ``LocalSandbox``
    does).
    """

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        *,
        environment: Environment | str | None = None,
        timeout: float | None = 60.0,
        max_output: int = 100_000,
        share: JupyterCodeEnvironment | None = None,
        network: NetworkPolicy | Mapping[str, Any] | None = None,
        **session_options: Any,
    ) -> None:
        given = work_dir is not None or environment or network is not None or session_options
        if share is not None and given:
            raise InvalidArgument(
                "share= uses that environment's session: give work_dir, environment, network "
                "and session options to it, not here"
            )
        self.timeout = timeout
        self.max_output = max_output
        # One way to start a session: a code environment, shared or this sandbox's own.
        self._owns = share is None
        self._code = (
            share
            if share is not None
            else JupyterCodeEnvironment(
                work_dir,
                environment=environment,
                timeout=timeout,
                network=network,
                **session_options,
            )
        )
        self._work_dir = Path(work_dir) if work_dir is not None else None

    async def session(self) -> AsyncSession:
        """The session (started on first use)."""
        return await self._code.session()

    # -- the Sandbox protocol ------------------------------------------------------------------

    @property
    def workdir(self) -> PurePosixPath:
        """The work dir as commands see it: ``/work`` in a container, else the host path."""
        if self._code.environment.backend == "docker":
            return DOCKER_WORKDIR
        host = self.host_workdir
        return PurePosixPath(host.as_posix()) if host is not None else PurePosixPath(".")

    @property
    def host_workdir(self) -> Path | None:
        """The work dir on this machine, once the session has started (or if given)."""
        live = self._code.work_dir
        if live is not None:
            return live
        return self._work_dir.absolute() if self._work_dir is not None else None

    async def exec(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Run ``argv`` (no shell parsing) as a new process; ``ExecResult(output, exit_code)``."""
        session = await self.session()
        result = await run_command(
            session, _command(argv, env), timeout=self.timeout if timeout is None else timeout
        )
        output = result.output
        if len(output) > self.max_output:
            output = output[: self.max_output] + f"\n[... {len(output) - self.max_output:,} cut]"
        return _exec_result(output, result.exit_code)

    def _inside(self, session: AsyncSession, path: PurePosixPath) -> Path:
        if path.is_absolute():
            raise ValueError(
                f"absolute paths are not allowed here ({path}); give one relative to the work dir"
            )
        return confined_path(session.work_dir, str(path))

    async def put_file(self, path: PurePosixPath, content: bytes) -> None:
        """Write ``content`` at ``path`` (relative to the work dir, confined to it)."""
        session = await self.session()
        target = self._inside(session, PurePosixPath(path))
        base = session.work_dir.absolute()
        write_bytes(base, target.relative_to(base), content)

    async def remove_file(self, path: PurePosixPath) -> None:
        """Delete ``path`` (relative to the work dir); nothing if it is gone."""
        session = await self.session()
        target = self._inside(session, PurePosixPath(path))
        with contextlib.suppress(FileNotFoundError):
            target.unlink()

    async def aclose(self) -> None:
        """Stop its own session (a shared one is its owner's to close). Idempotent."""
        if self._owns:
            await self._code.aclose()

    async def __aenter__(self) -> JupyterSandbox:
        await self.session()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the SandboxFactory protocol (what SandboxShellTool / SandboxCodeTool take) -----------

    @contextlib.asynccontextmanager
    async def open(self, context: Any = None) -> AsyncIterator[JupyterSandbox]:
        """This sandbox, for every conversation (its session outlives each call)."""
        del context
        yield self
