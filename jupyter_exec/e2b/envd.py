"""envd's endpoints (E2B's port 49983): ``/health``, ``/files``, and the filesystem and
process services over Connect RPC (:mod:`jupyter_exec.e2b.connect`).

The handlers only decode, call :class:`~jupyter_exec.e2b.files.SandboxFiles`
or :class:`~jupyter_exec.e2b.processes.Processes` (on this host, or in a Docker
sandbox's container), and encode. A process started with a ``pty`` is a
terminal (:mod:`jupyter_exec.e2b.terminals`): ``SendInput`` types into it
and ``Update`` resizes it. ``StreamInput`` is answered ``unimplemented``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import os
import signal
from typing import Any

from tornado.iostream import StreamClosedError

from jupyter_exec.e2b import fields
from jupyter_exec.e2b.connect import end_stream, envelope, is_stream, read_request
from jupyter_exec.e2b.errors import (
    SandboxGone,
    Unauthorized,
    connect_code,
    error_message,
    status_of,
)
from jupyter_exec.e2b.files import CHUNK, SandboxFiles
from jupyter_exec.e2b.processes import SIGNALS, Process
from jupyter_exec.e2b.sandboxes import Sandbox
from jupyter_exec.e2b.terminals import PtyRunner, pty_size
from jupyter_exec.e2b.watch import Watcher
from jupyter_exec.e2b.web import E2BHandler
from jupyter_exec.exceptions import InvalidArgument, JupyterExecError

__all__ = ["FilesHandler", "FilesystemHandler", "HealthHandler", "ProcessHandler"]


class Unimplemented(JupyterExecError):
    """An envd method this server does not serve."""


class Deadline(JupyterExecError, TimeoutError):
    """A command ran past the timeout its caller gave (``commands.run(timeout=...)``)."""


class HealthHandler(E2BHandler):
    """``GET /health``: 204 while the sandbox runs, 502 once paused or past its end (as
    E2B's envd, which then does not answer: the SDK's ``is_running()`` reads False), or gone.

    Public about the server itself; a request naming a sandbox needs its token
    (the route table decides both), so it never tells a stranger about one.
    """

    def get(self) -> None:
        grant = self.grant
        sandbox = grant.sandbox if grant is not None else None
        if sandbox is not None and not sandbox.running():  # as E2B's envd: not answering
            raise SandboxGone(f"sandbox {sandbox.id!r} is not running (paused, or past its end)")
        self.set_status(204)
        self.finish()


class FilesHandler(E2BHandler):
    """``GET /files?path=`` downloads a file; ``POST`` uploads (multipart or octet-stream).

    Opened by the sandbox's token, or by a file URL's signature: then only for
    the one path and operation it was made for (:class:`~jupyter_exec.e2b.auth.Grant`),
    so a signed upload writes to its signed path whatever its parts are called.
    """

    def _path(self, operation: str) -> str | None:
        path = self.get_query_argument("path", None)
        grant = self.grant
        if grant is None or grant.path is None:
            return path  # the sandbox's token: any path of the sandbox
        if grant.operation != operation or grant.path != (path or ""):
            raise Unauthorized("a file URL opens only the path and operation it was made for")
        return path

    def max_body(self) -> int:
        return self.auth.max_body if self.request.method == "POST" else 0

    async def get(self) -> None:
        path = self._path("read")
        fd = SandboxFiles(self.sandbox().paths).open_read(path or "")
        self.set_header("Content-Type", "application/octet-stream")
        self.set_header("Content-Length", str(os.fstat(fd).st_size))
        # Streamed a chunk at a time, each flushed before the next is read: memory stays at
        # one chunk whatever the file's size (a sparse 1 TB file included).
        try:
            while chunk := os.read(fd, CHUNK):
                self.write(chunk)
                try:
                    await self.flush()
                except StreamClosedError:
                    return  # the client left
        finally:
            os.close(fd)
        self.finish()

    def post(self) -> None:
        path = self._path("write")
        files = SandboxFiles(self.sandbox().paths)
        signed = self.grant is not None and self.grant.path is not None
        content_type = self.request.headers.get("Content-Type", "")
        written = []
        if content_type.startswith("multipart/"):
            parts = self.uploaded("file")
            if not parts:
                raise InvalidArgument("the upload has no 'file' part")
            if signed and not path:
                raise InvalidArgument("a signed upload URL writes to its own path: send 'path'")
            if path and len(parts) != 1:
                raise InvalidArgument(
                    f"the upload names one path ({path!r}) but has {len(parts)} 'file' parts; "
                    "send one part per path, or no path and each part's filename"
                )
            for part in parts:  # written where the request says, never a part's own name
                written.append(files.write(path or part.filename, part.body))
        else:
            if not path:
                raise InvalidArgument("say where to write: the 'path' query parameter")
            written.append(files.write(path, self.body()))
        self.send_json(written)


class RPCHandler(E2BHandler):
    """One Connect service: ``POST /<service>/<Method>`` dispatched to ``rpc_<Method>``."""

    error_style = "connect"

    async def post(self, method: str) -> None:
        request = read_request(self.body(), self.request.headers.get("Content-Type", ""))
        sandbox = self.sandbox()
        handler = getattr(self, f"rpc_{method}", None)
        if handler is None:
            raise Unimplemented(f"{method} is not served by jupyter-exec's E2B server")
        if is_stream(self.request.headers.get("Content-Type", "")):
            await self._stream(handler, sandbox, request)
            return
        self.send_json(await handler(sandbox, request))

    async def _stream(self, handler: Any, sandbox: Sandbox, request: dict[str, Any]) -> None:
        self.set_header("Content-Type", "application/connect+json")
        error = None
        try:
            await handler(sandbox, request)
        except StreamClosedError:
            return
        except Exception as exc:  # the status is sent already: the error ends the stream
            error = {"code": connect_code(status_of(exc)), "message": error_message(exc)}
        with contextlib.suppress(StreamClosedError):
            self.write(end_stream(error))
            self.finish()

    async def send_message(self, message: dict[str, Any]) -> None:
        self.write(envelope(message))
        await self.flush()

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None))[1]
        if isinstance(exc, Unimplemented):
            self.set_status(501)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"code": "unimplemented", "message": str(exc)}))
            return
        super().write_error(status_code, **kwargs)


class FilesystemHandler(RPCHandler):
    """``/filesystem.Filesystem/*``: Stat, ListDir, MakeDir, Remove, Move, and watching a
    folder (WatchDir; CreateWatcher, GetWatcherEvents, RemoveWatcher)."""

    async def rpc_Stat(self, sandbox: Sandbox, request: dict[str, Any]) -> dict[str, Any]:
        return {"entry": SandboxFiles(sandbox.paths).stat(fields.text(request, "path"))}

    async def rpc_ListDir(self, sandbox: Sandbox, request: dict[str, Any]) -> dict[str, Any]:
        depth = fields.integer(request, "depth", default=1, most=fields.MAX_DEPTH)
        entries = SandboxFiles(sandbox.paths).list(fields.text(request, "path"), depth)
        return {"entries": entries}

    async def rpc_MakeDir(self, sandbox: Sandbox, request: dict[str, Any]) -> dict[str, Any]:
        return {"entry": SandboxFiles(sandbox.paths).make_dir(fields.text(request, "path"))}

    async def rpc_Remove(self, sandbox: Sandbox, request: dict[str, Any]) -> dict[str, Any]:
        SandboxFiles(sandbox.paths).remove(fields.text(request, "path"))
        return {}

    async def rpc_Move(self, sandbox: Sandbox, request: dict[str, Any]) -> dict[str, Any]:
        source, destination = fields.text(request, "source"), fields.text(request, "destination")
        return {"entry": SandboxFiles(sandbox.paths).move(source, destination)}

    # -- watching a folder (jupyter_exec.e2b.watch) -------------------------------------------

    async def rpc_WatchDir(self, sandbox: Sandbox, request: dict[str, Any]) -> None:
        """The changes of a folder as a stream, until the caller leaves."""
        watcher = Watcher(sandbox, _watched(request), bool(request.get("recursive")),
                          bool(request.get("includeEntry")))  # fmt: skip
        watcher.start()  # a folder that is not there, or not the sandbox's: refused now

        async def send(event: dict[str, Any]) -> None:
            await self.send_message({"filesystem": event})

        await self.send_message({"start": {}})
        await watcher.follow(send, lambda: not self._gone())

    def _gone(self) -> bool:
        stream = getattr(self.request.connection, "stream", None)
        return stream is None or bool(stream.closed())

    async def rpc_CreateWatcher(self, sandbox: Sandbox, request: dict[str, Any]) -> dict[str, Any]:
        watchers = self.server.watchers
        watchers.prune({s.id for s in self.server.sandboxes.every()})
        path, recursive = _watched(request), bool(request.get("recursive"))
        made = watchers.create(sandbox, path, recursive, bool(request.get("includeEntry")))
        return {"watcherId": made.id}

    async def rpc_GetWatcherEvents(
        self, sandbox: Sandbox, request: dict[str, Any]
    ) -> dict[str, Any]:
        return {"events": await self.server.watchers.events(sandbox, request.get("watcherId"))}

    async def rpc_RemoveWatcher(self, sandbox: Sandbox, request: dict[str, Any]) -> dict[str, Any]:
        self.server.watchers.remove(sandbox, request.get("watcherId"))
        return {}


def _watched(request: dict[str, Any]) -> str:
    """The folder a watch request names (it must name one: no folder is watched by default)."""
    path = fields.text(request, "path")
    if not path:
        raise InvalidArgument("say which folder to watch: 'path'")
    return path


def _input_bytes(request: dict[str, Any], kind: str) -> bytes:
    """The bytes of ``input.<kind>`` (``stdin`` for a command, ``pty`` for a terminal)."""
    data = fields.obj(request, "input").get(kind)
    if not isinstance(data, str):
        other = "a terminal's (pty.send_stdin)" if kind == "pty" else "a command's (stdin)"
        raise InvalidArgument(f"send {other} input as base64 in input.{kind}")
    try:
        return base64.b64decode(data, validate=True)
    except binascii.Error:
        raise InvalidArgument("input.stdin is not base64") from None


class ProcessHandler(RPCHandler):
    """``/process.Process/*``: Start and Connect (streams), List, SendInput, SendSignal,
    CloseStdin."""

    async def rpc_Start(self, sandbox: Sandbox, request: dict[str, Any]) -> None:
        config = fields.obj(request, "process")
        tag = request.get("tag")
        if tag is not None and not isinstance(tag, str):
            raise InvalidArgument("'tag' must be a string")
        cwd = fields.text(config, "cwd") or None
        try:  # opened without following links: a planted one is refused (400)
            folder, _ = sandbox.paths.folder(cwd)
        except FileNotFoundError:
            raise InvalidArgument(f"the cwd {cwd!r} is not a folder in the sandbox") from None
        seconds = fields.seconds_from_ms(self.request.headers.get("Connect-Timeout-Ms", ""))
        pty = request.get("pty")
        process = await sandbox.processes.start(
            config, folder, stdin=bool(request.get("stdin")), tag=tag,
            pty=None if pty is None else pty_size(pty),
        )  # fmt: skip
        queue = process.follow()
        sandbox.processes.launch(process)
        try:
            await asyncio.wait_for(self._follow(process, queue), seconds)
        except asyncio.TimeoutError:
            process.signal(signal.SIGKILL)
            raise Deadline(
                f"the command ran past its {seconds:g} s timeout and was killed"
            ) from None

    async def rpc_Connect(self, sandbox: Sandbox, request: dict[str, Any]) -> None:
        process = sandbox.processes.get(request.get("process"))
        await self._follow(process, process.follow())

    async def _follow(self, process: Process, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        """Send the start event, then every event until the process ends or the caller leaves."""
        try:
            await self.send_message({"event": {"start": {"pid": process.pid}}})
            while (event := await queue.get()) is not None:
                await self.send_message({"event": event})
        finally:
            process.unfollow(queue)

    async def rpc_List(self, sandbox: Sandbox, request: dict[str, Any]) -> dict[str, Any]:
        return {"processes": [p.describe() for p in sandbox.processes.list()]}

    async def rpc_SendSignal(self, sandbox: Sandbox, request: dict[str, Any]) -> dict[str, Any]:
        process = sandbox.processes.get(request.get("process"))
        wanted = request.get("signal")
        signum = SIGNALS.get(wanted) if isinstance(wanted, (str, int)) else None
        if signum is None:
            raise InvalidArgument("signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM")
        process.signal(signum)
        return {}

    async def rpc_SendInput(self, sandbox: Sandbox, request: dict[str, Any]) -> dict[str, Any]:
        process = sandbox.processes.get(request.get("process"))
        terminal = isinstance(process.runner, PtyRunner)
        await process.runner.write(_input_bytes(request, "pty" if terminal else "stdin"))
        return {}

    async def rpc_Update(self, sandbox: Sandbox, request: dict[str, Any]) -> dict[str, Any]:
        """A terminal's new size (``pty.resize``)."""
        process = sandbox.processes.get(request.get("process"))
        if not isinstance(process.runner, PtyRunner):
            raise InvalidArgument(f"process {process.pid} is not a terminal: it has no size")
        if request.get("pty") is not None:
            process.runner.resize(*pty_size(request.get("pty")))
        return {}

    async def rpc_CloseStdin(self, sandbox: Sandbox, request: dict[str, Any]) -> dict[str, Any]:
        process = sandbox.processes.get(request.get("process"))
        process.runner.close_stdin()
        return {}
