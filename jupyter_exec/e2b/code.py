"""The code interpreter's endpoints (E2B's port 49999): ``/execute`` and ``/contexts``.

``POST /execute`` runs the code in a context's kernel and streams each
output as a protocol line the moment the kernel sends it
(:mod:`jupyter_exec.e2b.protocol`). The SDK's per-call ``timeout`` is a
deadline on its side: when it passes, or the caller goes away, the
connection closes and the execution is cancelled here, which interrupts the
kernel, so the next call does not queue behind code nobody waits for. A
sandbox killed while its code runs cuts the stream short, and the SDK,
finding the sandbox gone, reports that it was killed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tornado.iostream import StreamClosedError

from jupyter_exec.e2b.languages import Language, language_named
from jupyter_exec.e2b.protocol import count_line, encode, error_line, event_lines
from jupyter_exec.e2b.web import E2BHandler
from jupyter_exec.exceptions import InvalidArgument, SessionClosedError
from jupyter_exec.models import Execution
from jupyter_exec.session.session import AsyncSession

__all__ = ["ContextHandler", "ContextRestartHandler", "ContextsHandler", "ExecuteHandler"]


class ExecuteHandler(E2BHandler):
    """``POST /execute``: run code, stream its outputs as JSON lines."""

    _task: asyncio.Future[Execution] | None = None

    async def post(self) -> None:
        body = self.json_body()
        code = body.get("code")
        if not isinstance(code, str):
            raise InvalidArgument("'code' must be a string")
        context_id = body.get("context_id")
        language = body.get("language")
        if context_id is None:
            language_named(language)  # a language no sandbox runs: refused before anything
        env_vars = body.get("env_vars") or {}
        if not isinstance(env_vars, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
        ):
            raise InvalidArgument("'env_vars' must map names to strings")
        sandboxes = self.server.sandboxes
        sandbox = self.sandbox()
        context, session = await sandboxes.context_session(sandbox, context_id, language)
        kind = language_named(context.language)
        kind.check_env(env_vars)
        self.set_header("Content-Type", "application/x-ndjson")
        self.set_header("Cache-Control", "no-store")
        await self.flush()  # the SDK waits for the status line before reading lines
        self._task = asyncio.ensure_future(self._run(session, kind, code, env_vars))
        try:
            execution = await self._task
        except asyncio.CancelledError:
            if self.request.connection is not None and self._closed():
                return  # the caller left; the kernel was interrupted
            raise
        except SessionClosedError:
            self._abort()  # killed meanwhile: the SDK then asks whether the sandbox runs
            return
        if execution.status in ("timeout", "died") and execution.error is not None:
            error = execution.error
            self.write(encode(error_line(error.ename, error.evalue, error.traceback)))
        count = count_line(execution.execution_count)
        if count is not None:
            self.write(encode(count))
        self.finish()

    async def _run(
        self, session: AsyncSession, language: Language, code: str, env_vars: dict[str, str]
    ) -> Execution:
        """Run ``code``; ``env_vars`` are set for this run only (two recorded cells around it,
        in the context's language)."""
        timeout = self.server.execution_timeout
        if not env_vars:
            return await session.execute(code, timeout=timeout, on_output=self._send)
        await session.execute(language.set_env_code(env_vars), timeout=timeout)
        try:
            return await session.execute(code, timeout=timeout, on_output=self._send)
        finally:
            restore = language.restore_env_code(env_vars)
            await asyncio.shield(session.execute(restore, timeout=timeout))

    def _abort(self) -> None:
        """End the response without its last chunk, as a sandbox that vanished would."""
        stream = getattr(self.request.connection, "stream", None)
        if stream is not None:
            stream.close()
        self._finished = True  # nothing more can be sent; tornado must not try

    def _closed(self) -> bool:
        stream = getattr(self.request.connection, "stream", None)
        return stream is None or bool(stream.closed())

    async def _send(self, event: dict[str, Any]) -> None:
        lines = event_lines(event)
        if not lines or self._closed():
            return
        for line in lines:
            self.write(encode(line))
        try:
            await self.flush()
        except StreamClosedError:
            self.on_connection_close()

    def on_connection_close(self) -> None:
        super().on_connection_close()  # a body still arriving ends too (E2BHandler streams it)
        if self._task is not None and not self._task.done():
            self._task.cancel()


class ContextsHandler(E2BHandler):
    """``GET /contexts`` lists a sandbox's contexts; ``POST`` makes one."""

    def get(self) -> None:
        sandbox = self.sandbox()
        contexts = self.server.sandboxes.list_contexts(sandbox)
        self.send_json([c.describe() for c in contexts])

    async def post(self) -> None:
        body = self.json_body()
        sandbox = self.sandbox()
        context = await self.server.sandboxes.create_context(
            sandbox, language=body.get("language"), cwd=body.get("cwd")
        )
        self.send_json(context.describe())


class ContextHandler(E2BHandler):
    """``DELETE /contexts/{id}``: stop a context's kernel."""

    async def delete(self, context_id: str) -> None:
        sandbox = self.sandbox()
        await self.server.sandboxes.remove_context(sandbox, context_id)
        self.set_status(204)
        self.finish()


class ContextRestartHandler(E2BHandler):
    """``POST /contexts/{id}/restart``: a fresh kernel, all state lost."""

    async def post(self, context_id: str) -> None:
        sandbox = self.sandbox()
        await self.server.sandboxes.restart_context(sandbox, context_id)
        self.set_status(204)
        self.finish()
