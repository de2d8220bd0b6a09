"""MCP tasks for ``execute_code``: a long cell outlives its client, and the server's restart.

MCP's task protocol (revision 2025-11-25) lets a client augment ``tools/call``
with ``params.task``: the server answers at once with a task id, and the
client asks later (``tasks/get``, ``tasks/result``, ``tasks/list``,
``tasks/cancel``; the server may also send ``notifications/tasks/status``).
The ``mcp`` SDK we pin (2.3) carries the protocol's types but serves none of it
(its own runtime is deferred to the 2026 tasks extension), so this module is the
receiver, plugged in as one server middleware (:class:`Tasks`), active only on
connections that negotiated 2025-11-25 (what every SDK client's ``initialize``
offers)::

    initialize            + capabilities.tasks {list, cancel, requests.tools.call}
    tools/list            + execute_code.execution.taskSupport = "optional"
    tools/call + task     the cell starts in the background; the answer is a
                          CreateTaskResult (with a text ``content`` too, so a
                          client that validates it as a tool result still reads it)
    tasks/get|list        the task's state; tasks/result waits for the end and
                          returns the tool's result; tasks/cancel interrupts the kernel

**Durable.** Each task is a signed record under
``<root>/.jupyter_exec/mcp-tasks/<id>.json`` (:class:`~jupyter_exec.manager.saved.SignedStore`,
beside the session registry ``mcp-sessions``), rewritten at each status change;
its result is a file of its own under ``mcp-task-results/``, whose SHA-256 the
record signs. A client that disconnects gets it on any later connection; a
server started again on the root answers for the tasks of the last one. A task
still ``working`` when its server died (SIGKILL, a crash) is ``failed`` with a
``lost:`` message naming the session and code: its kernel ended with the server,
and the cell is not in the notebook (the session comes back from its notebook,
without that cell's effects).

**Bound to the credential.** Over HTTP a task belongs to the bearer token that
made it (an HMAC of it under the host key is kept, never the token): another
token's ``tasks/get`` gets the same "not found" as an unknown id, and its
``tasks/list`` does not show it. Over stdio the client is whoever launched the
server; ids are 128 random bits either way. A record that is not signed by this
host for this root, or a result file that does not match its record, is never
served.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import importlib
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from jupyter_exec.boundary import trust
from jupyter_exec.boundary.paths import Folder
from jupyter_exec.exceptions import JupyterExecError, StorageError
from jupyter_exec.manager.saved import BadEntry, SignedStore, registry_folder, same_fields

__all__ = ["KIND", "RESULTS_KIND", "TASK_PROTOCOL", "TaskBook", "TaskRecord", "Tasks"]

log = logging.getLogger("jupyter_exec.mcp")

TASK_PROTOCOL = "2025-11-25"
"""The protocol revision whose tasks this module serves."""
KIND = "mcp-tasks"
RESULTS_KIND = "mcp-task-results"
TASK_TOOLS = frozenset({"execute_code"})
"""The tools a client may call as a task."""
DEFAULT_TTL_MS = 24 * 3600 * 1000
MAX_TTL_MS = 7 * 24 * 3600 * 1000
"""A task is kept from its creation for the ttl its client asks, at most a week (default a day)."""
POLL_MS = 1000
PAGE = 50
MAX_WORKING = 64
"""Tasks running at once, for all clients: a flood of task calls cannot start unbounded cells."""
CANCEL_WAIT = 2.0
"""Seconds tasks/cancel waits for the interrupted cell to end before it cancels the run."""
STOP_WAIT = 15.0
"""Seconds a stopping server gives its tasks' interrupted cells to end and be recorded."""
"""Seconds tasks/cancel waits for the interrupted cell to end before it cancels the run."""
MAX_RESULT_BYTES = 64 << 20
RELATED = "io.modelcontextprotocol/related-task"
IMMEDIATE = "io.modelcontextprotocol/model-immediate-response"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
STATUSES = TERMINAL | {"working", "input_required"}
STDIO_OWNER = "stdio"

INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32600, -32601, -32602, -32603


def _is_task_id(text: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{32}", text) is not None


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _head(code: str) -> str:
    first = next((line for line in code.splitlines() if line.strip()), "")
    return first[:120] + (" ..." if len(first) > 120 or code.count("\n") > 0 else "")


@dataclass(frozen=True)
class TaskRecord:
    """One task as kept on disk: what it ran, whose it is, where it stands."""

    task_id: str
    owner: str
    """Whose task: an HMAC of the HTTP credential, or ``stdio``."""
    session: str
    code: str
    """The code's first line, to say what a lost task was running."""
    status: str
    message: str
    created: str
    updated: str
    ttl_ms: int
    result_sha256: str | None
    """The SHA-256 of the result file, once there is one."""

    @classmethod
    def checked(cls, key: str, entry: dict[str, Any]) -> TaskRecord:
        """A record as this module writes one, or :class:`BadEntry`."""
        same_fields(entry, {f for f in cls.__dataclass_fields__})
        if entry["task_id"] != key:
            raise BadEntry("its task id is not its file's name")
        strings = ("owner", "session", "code", "status", "message", "created", "updated")
        if not all(isinstance(entry[f], str) for f in strings):
            raise BadEntry("a field is not a string")
        if entry["status"] not in STATUSES or not isinstance(entry["ttl_ms"], int):
            raise BadEntry("bad status or ttl")
        sha = entry["result_sha256"]
        if sha is not None and (not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha)):
            raise BadEntry("bad result digest")
        try:
            _parse(entry["created"]), _parse(entry["updated"])
        except ValueError:
            raise BadEntry("bad time") from None
        return cls(**entry)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def expired(self, now: datetime) -> bool:
        return now >= _parse(self.created) + timedelta(milliseconds=self.ttl_ms)

    def wire(self) -> dict[str, Any]:
        """The protocol's ``Task`` object."""
        task: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created,
            "lastUpdatedAt": self.updated,
            "ttl": self.ttl_ms,
            "pollInterval": POLL_MS,
        }
        if self.message:
            task["statusMessage"] = self.message
        return task


class TaskBook:
    """The task records and result files of one root, signed and written whole."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.records = SignedStore(root, KIND, _is_task_id)

    def load(self) -> list[TaskRecord]:
        return self.records.load(TaskRecord.checked)

    def save(self, record: TaskRecord) -> None:
        self.records.save(record.task_id, asdict(record))

    def save_result(self, task_id: str, payload: dict[str, Any]) -> str | None:
        """Write a task's result; its SHA-256 (None: it could not be written, logged)."""
        data = json.dumps(payload, separators=(",", ":")).encode()
        try:
            folder = Folder.open(self.root, registry_folder(RESULTS_KIND), create=True, mode=0o700)
            with folder as f:
                f.write_atomic(f"{task_id}.json", [data], mode=0o600, fsync=True)
        except (JupyterExecError, OSError) as exc:
            log.warning("jupyter-exec: the result of MCP task %s is not kept: %s", task_id, exc)
            return None
        return hashlib.sha256(data).hexdigest()

    def read_result(self, record: TaskRecord) -> dict[str, Any] | None:
        """The result its record signs; None when there is none; StorageError when the file
        is not the one the record names (edited, swapped, cut)."""
        if record.result_sha256 is None:
            return None
        try:
            with Folder.open(self.root, registry_folder(RESULTS_KIND)) as folder:
                data = folder.read_bytes(f"{record.task_id}.json", limit=MAX_RESULT_BYTES)
        except (JupyterExecError, OSError) as exc:
            why = f"the result of task {record.task_id} cannot be read: {exc}"
            raise StorageError(why) from None
        if not hmac.compare_digest(hashlib.sha256(data).hexdigest(), record.result_sha256):
            raise StorageError(
                f"the result file of task {record.task_id} is not the one its record names "
                "(written or edited by someone else): not served"
            )
        payload = json.loads(data)
        if not isinstance(payload, dict):
            raise StorageError(f"the result of task {record.task_id} is not a tool result")
        return payload

    def remove(self, task_id: str) -> None:
        self.records.remove(task_id)
        with (
            contextlib.suppress(JupyterExecError, OSError),
            Folder.open(self.root, registry_folder(RESULTS_KIND)) as folder,
        ):
            folder.unlink(f"{task_id}.json")


def _text_result(text: str, *, error: bool) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


def _first_text(payload: dict[str, Any]) -> str:
    for item in payload.get("content") or []:
        if isinstance(item, dict) and item.get("type") == "text":
            return str(item.get("text", ""))
    return ""


def _error(code: int, message: str) -> Exception:
    errors = importlib.import_module("mcp.shared.exceptions")
    exc: Exception = errors.MCPError(code=code, message=message)
    return exc


CallTool = Callable[[str, dict[str, Any]], Awaitable[Any]]


class Tasks:
    """The task receiver of one MCP server: a middleware (``server.middleware.append(tasks)``).

    ``call_tool(name, arguments)`` runs a tool as a plain call would (the SDK
    server's own ``call_tool``: argument validation, our wrapper, the tool);
    a task runs it in the background and keeps what it returns.
    """

    def __init__(self, root: Path, call_tool: CallTool) -> None:
        self.book = TaskBook(root)
        self._call_tool = call_tool
        self._records: dict[str, TaskRecord] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._done: dict[str, asyncio.Event] = {}
        self._notify: dict[str, Any] = {}
        self._interrupt: Callable[[str], Awaitable[bool]] | None = None
        self._stopping = False
        now = _now()
        for record in self.book.load():
            if record.expired(now):
                self.book.remove(record.task_id)
                continue
            if not record.terminal:  # its server died under it: so did its kernel
                record = self._lost(record)
            self._records[record.task_id] = record

    def on_cancel(self, interrupt: Callable[[str], Awaitable[bool]]) -> None:
        """How tasks/cancel interrupts a session's running cell (True: it was running)."""
        self._interrupt = interrupt

    def sessions(self) -> set[str]:
        """The sessions whose running cell is a task's."""
        return {
            self._records[task_id].session
            for task_id, running in self._running.items()
            if not running.done() and task_id in self._records
        }

    async def stop(self) -> None:
        """The server stops: each running task's cell is interrupted, and ends recorded.

        Its task is then ``failed`` with a ``stopped:`` message, and its result holds
        what the cell printed up to the interrupt (with the ``KeyboardInterrupt``).
        """
        self._stopping = True
        running = [(i, t) for i, t in self._running.items() if not t.done()]
        if not running:
            return
        for task_id, _ in running:
            await self._interrupt_cell(self._records[task_id].session)
        tasks = [t for _, t in running]
        await asyncio.wait(tasks, timeout=STOP_WAIT)
        for task in tasks:
            task.cancel()  # not started yet, or the interrupt did not take: cut short
        await asyncio.wait(tasks, timeout=STOP_WAIT)

    async def _interrupt_cell(self, session: str) -> bool:
        if self._interrupt is None:
            return False
        try:
            return await self._interrupt(session)
        except Exception:  # the session is gone or its kernel dead: the run ends anyway
            return False

    # -- the middleware ------------------------------------------------------------------

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        method = ctx.method
        if method == "initialize":
            return self._advertise(await call_next(ctx))
        if ctx.protocol_version != TASK_PROTOCOL:
            return await call_next(ctx)
        params = dict(ctx.params or {})
        if method == "tools/list":
            return self._mark_tools(await call_next(ctx))
        if method == "tools/call":
            if params.get("task") is None:
                return await call_next(ctx)
            return await self._create(ctx, params)
        handlers = {
            "tasks/get": self._get,
            "tasks/result": self._result,
            "tasks/list": self._list,
            "tasks/cancel": self._cancel,
        }
        handler = handlers.get(method)
        if handler is None:
            return await call_next(ctx)
        return await handler(self._owner(ctx), params)

    @staticmethod
    def _advertise(result: Any) -> Any:
        if isinstance(result, dict) and result.get("protocolVersion") == TASK_PROTOCOL:
            capabilities = dict(result.get("capabilities") or {})
            capabilities["tasks"] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
            result = {**result, "capabilities": capabilities}
        return result

    @staticmethod
    def _mark_tools(result: Any) -> Any:
        if isinstance(result, dict):
            tools = [
                {**t, "execution": {"taskSupport": "optional"}}
                if isinstance(t, dict) and t.get("name") in TASK_TOOLS
                else t
                for t in result.get("tools") or []
            ]
            result = {**result, "tools": tools}
        return result

    @staticmethod
    def _owner(ctx: Any) -> str:
        """Whose task: the HTTP request's credential (an HMAC of it), else the stdio client."""
        headers = getattr(getattr(ctx, "request", None), "headers", None)
        if headers is None:
            return STDIO_OWNER
        credential = str(headers.get("authorization", "")).encode()
        return "http:" + trust.fingerprint(credential, b"jupyter-exec mcp task owner")

    # -- tools/call as a task ------------------------------------------------------------

    async def _create(self, ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise _error(INVALID_PARAMS, "tools/call needs a tool name and an arguments object")
        if name not in TASK_TOOLS:
            only = ", ".join(sorted(TASK_TOOLS))
            why = f"tool {name!r} does not run as a task (only {only} does); call it without 'task'"
            raise _error(METHOD_NOT_FOUND, why)
        code, session = arguments.get("code"), arguments.get("session", "default")
        if not isinstance(code, str) or not isinstance(session, str):
            raise _error(INVALID_PARAMS, "execute_code needs code (a string) and a session name")
        if sum(1 for t in self._running.values() if not t.done()) >= MAX_WORKING:
            why = (
                f"{MAX_WORKING} tasks run on this server: wait for one to end, or tasks/cancel one"
            )
            raise _error(INVALID_REQUEST, why)
        task = params.get("task")
        if not isinstance(task, dict):
            raise _error(INVALID_PARAMS, "'task' is an object: {} or {\"ttl\": milliseconds}")
        asked = task.get("ttl")
        ttl = min(asked, MAX_TTL_MS) if isinstance(asked, int) and asked > 0 else DEFAULT_TTL_MS
        now = _stamp(_now())
        record = TaskRecord(
            task_id=secrets.token_hex(16),
            owner=self._owner(ctx),
            session=session,
            code=_head(code),
            status="working",
            message=f"running in session {session!r}",
            created=now,
            updated=now,
            ttl_ms=ttl,
            result_sha256=None,
        )
        self._put(record)
        self._done[record.task_id] = asyncio.Event()
        self._notify[record.task_id] = ctx.session
        self._running[record.task_id] = asyncio.create_task(
            self._run(record.task_id, dict(arguments)), name=f"mcp task {record.task_id}"
        )
        said = (
            f"task {record.task_id} started in session {session!r}: poll tasks/get, "
            "then tasks/result for the output"
        )
        return {
            "task": record.wire(),
            "content": [{"type": "text", "text": said}],  # for a client that reads a tool result
            "_meta": {IMMEDIATE: said},
        }

    async def _run(self, task_id: str, arguments: dict[str, Any]) -> None:
        try:
            result = await self._call_tool("execute_code", arguments)
            payload = (
                result
                if isinstance(result, dict)
                else result.model_dump(by_alias=True, mode="json", exclude_none=True)
            )
        except asyncio.CancelledError:  # our own: tasks/cancel or a stop, after the interrupt
            why = "the MCP server stopped" if self._stopping else "tasks/cancel"
            said = (
                f"{why}: the kernel was interrupted; the cell is in the session's notebook "
                "with what it printed"
            )
            payload = _text_result(said, error=True)
        except Exception as exc:  # the tool's own error (our errors' text), or the SDK's
            payload = _text_result(str(exc) or type(exc).__name__, error=True)
        try:
            self._finish(task_id, payload)
        finally:
            self._done[task_id].set()
            self._running.pop(task_id, None)

    def _finish(self, task_id: str, payload: dict[str, Any]) -> None:
        record = self._records.get(task_id)
        if record is None:
            return
        sha = self.book.save_result(task_id, payload)
        if record.terminal:  # cancelled meanwhile: it stays so, with what the cell gave
            self._put(replace(record, result_sha256=sha))
            return
        failed = bool(payload.get("isError"))
        lines = _first_text(payload).strip().splitlines()
        message = "the cell ran to its end"
        if failed:
            message = f"the cell failed: {lines[-1][:200]}" if lines else "the cell failed"
        if self._stopping and failed:
            message = "stopped: the MCP server stopped while this task ran; its cell was "
            message += "interrupted, and its result holds what it printed"
        record = replace(
            record,
            status="failed" if failed else "completed",
            message=message,
            updated=_stamp(_now()),
            result_sha256=sha,
        )
        self._put(record)
        self._tell(record)

    def _tell(self, record: TaskRecord) -> None:
        """``notifications/tasks/status`` to the connection that made the task, if it is there."""
        session = self._notify.pop(record.task_id, None)
        if session is None:
            return
        types = importlib.import_module("mcp.types")
        notification = types.TaskStatusNotification(
            params=types.TaskStatusNotificationParams.model_validate(record.wire())
        )

        async def send() -> None:
            with contextlib.suppress(Exception):  # the client went away: it polls instead
                await session.send_notification(notification)

        asyncio.get_running_loop().create_task(send())

    def _put(self, record: TaskRecord) -> None:
        self._records[record.task_id] = record
        self.book.save(record)

    def _lost(self, record: TaskRecord) -> TaskRecord:
        lost = replace(
            record,
            status="failed",
            message=(
                f"lost: the MCP server stopped while this task ran in session "
                f"{record.session!r} (started {record.created}); its kernel ended with it"
            ),
            updated=_stamp(_now()),
        )
        text = (
            f"{lost.message}. The cell ({record.code!r}) did not finish and is not in the "
            f"notebook; the session comes back from its notebook without it. Run it again."
        )
        sha = self.book.save_result(record.task_id, _text_result(text, error=True))
        lost = replace(lost, result_sha256=sha)
        self._put(lost)
        return lost

    # -- tasks/* ---------------------------------------------------------------------------

    def _owned(self, owner: str, params: dict[str, Any]) -> TaskRecord:
        task_id = params.get("taskId")
        record = self._records.get(task_id) if isinstance(task_id, str) else None
        if record is not None and record.expired(_now()) and record.terminal:
            self._records.pop(record.task_id, None)
            self.book.remove(record.task_id)
            record = None
        if record is None or not hmac.compare_digest(record.owner, owner):
            raise _error(INVALID_PARAMS, "Failed to retrieve task: Task not found")  # alike
        return record

    async def _get(self, owner: str, params: dict[str, Any]) -> dict[str, Any]:
        return self._owned(owner, params).wire()

    async def _result(self, owner: str, params: dict[str, Any]) -> dict[str, Any]:
        record = self._owned(owner, params)
        done = self._done.get(record.task_id)
        if done is not None:
            await done.wait()
        record = self._records[record.task_id]
        try:
            payload = self.book.read_result(record)
        except (StorageError, ValueError) as exc:
            raise _error(INTERNAL_ERROR, str(exc)) from None
        if payload is None:
            said = f"task {record.task_id} ended ({record.status}: {record.message}) with no result"
            payload = _text_result(said, error=True)
        meta = dict(payload.get("_meta") or {})
        meta[RELATED] = {"taskId": record.task_id}
        return {**payload, "_meta": meta}

    async def _list(self, owner: str, params: dict[str, Any]) -> dict[str, Any]:
        cursor = params.get("cursor")
        start = 0
        if cursor is not None:
            if not isinstance(cursor, str) or not cursor.isdigit():
                raise _error(INVALID_PARAMS, "Invalid cursor")
            start = int(cursor)
        now = _now()
        mine = sorted(
            (r for r in self._records.values() if r.owner == owner and not r.expired(now)),
            key=lambda r: r.created,
            reverse=True,
        )
        page = mine[start : start + PAGE]
        listed: dict[str, Any] = {"tasks": [r.wire() for r in page]}
        if start + PAGE < len(mine):
            listed["nextCursor"] = str(start + PAGE)
        return listed

    async def _cancel(self, owner: str, params: dict[str, Any]) -> dict[str, Any]:
        record = self._owned(owner, params)
        if record.terminal:
            why = f"Cannot cancel task: already in terminal status {record.status!r}"
            raise _error(INVALID_PARAMS, why)
        record = replace(
            record,
            status="cancelled",
            message="cancelled by tasks/cancel: the kernel was interrupted",
            updated=_stamp(_now()),
        )
        self._put(record)
        running = self._running.get(record.task_id)
        if running is not None and not running.done():
            if await self._interrupt_cell(
                record.session
            ):  # the cell ends with KeyboardInterrupt and is recorded so
                await asyncio.wait([running], timeout=CANCEL_WAIT)
            if not running.done():  # not started yet, or the interrupt did not take
                running.cancel()
        self._tell(record)
        return record.wire()
