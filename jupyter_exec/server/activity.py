"""Whether anyone's code runs on a server kernel, seen from the kernel's own IOPub messages.

A session's kernel is shared: a person in JupyterLab may run a long cell on
it while the agent is idle, and the session must not be culled under them.
jupyter_server tracks a kernel's ``execution_state``, but it takes the state
from the status message of *any* request it counts as activity, including
requests answered on the control channel while a cell runs (a resource-usage
panel's ``usage_request``, subshell requests): their ``idle`` sets the kernel
"idle" while the cell is still running, and an idle culler then closes it.

:class:`KernelActivity` keeps its own, narrower account: the execute requests
whose ``busy`` status has been seen and whose ``idle`` has not, whoever sent
them. Other requests' status messages do not touch it. What no one can see
is a request on its way to the kernel: it counts from the kernel's first
``busy``, a few milliseconds after the request is sent.

The same messages tell what a person ran: :meth:`KernelActivity.watch_runs`
reports each execute request that another client (JupyterLab) sent, with
its code and execution count, when it ends, so the session's notebook can
note its place in the run order (:mod:`jupyter_exec.engine.runorder`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from jupyter_client.session import Session

from jupyter_exec.engine.runorder import PersonRun

__all__ = ["KernelActivity"]

log = logging.getLogger("jupyter_exec.server")

_RESTART_STATES = frozenset({"starting", "restarting", "dead"})
_MAX_FOLLOWED = 64  # a person's requests followed at once (they run one after another)


class KernelActivity:
    """The execute requests running on one kernel, from a subscription to its IOPub.

    ``kernel`` is the server's manager of that kernel (``connect_iopub``,
    ``session``); :meth:`start` returns ``False`` for a kernel whose messages
    cannot be watched (a gateway's), and then :attr:`busy` stays ``False``.
    """

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel
        self._stream: Any = None
        self._session: Session | None = None
        self._running: dict[str, str | None] = {}  # execute msg_id -> its subshell (None: main)
        self._code: dict[str, tuple[str, str]] = {}  # execute msg_id -> (code, ISO start)
        self.last_activity: float | None = None
        """``time.monotonic()`` of the last message about an execute request, if any."""
        self._own: str | None = None  # the session's own client: its requests are not a person's
        self._on_run: Callable[[PersonRun], None] | None = None
        self._others: dict[str, dict[str, Any]] = {}  # a person's msg_id -> what was seen

    def watch_runs(self, own_session: str, on_run: Callable[[PersonRun], None]) -> None:
        """Call ``on_run`` as each execute request not sent by ``own_session`` ends.

        ``own_session`` is the session id in the headers of the agent's own
        requests (its kernel client's); every other client is a person.
        Silent requests are not reported: the kernel shows no code for them.
        """
        self._own, self._on_run = own_session, on_run

    @property
    def busy(self) -> bool:
        """An execute request has started on the kernel and not finished."""
        return bool(self._running)

    @property
    def running(self) -> tuple[str, str] | None:
        """(code, ISO start time) of the cell the kernel runs now, whoever sent it.

        From the kernel's ``execute_input``; the latest, when subshells run several.
        """
        live = [code for msg_id, code in self._code.items() if msg_id in self._running]
        return live[-1] if live else None

    def start(self) -> bool:
        """Subscribe to the kernel's IOPub; ``False`` if this kernel offers no such channel."""
        if self._stream is not None:
            return True
        connect = getattr(self._kernel, "connect_iopub", None)
        session = getattr(self._kernel, "session", None)
        if connect is None or session is None:
            return False
        try:
            stream = connect()
        except Exception:  # a kernel manager that cannot connect (remote, shut down)
            log.debug("cannot watch the kernel's IOPub", exc_info=True)
            return False
        if not hasattr(stream, "on_recv"):  # a plain socket: give it to the event loop
            from zmq.eventloop.zmqstream import ZMQStream

            stream = ZMQStream(stream)
        self._session = Session(config=session.config, key=session.key)
        self._stream = stream
        stream.on_recv(self._on_message, copy=False)  # frames, not copies of large outputs
        return True

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and not stream.closed():
            stream.close()
        self._running.clear()
        self._others.clear()
        self._code.clear()

    def _on_message(self, frames: list[Any]) -> None:
        assert self._session is not None
        try:
            _, frames = self._session.feed_identities(frames, copy=False)
            msg = self._session.deserialize(frames, content=False, copy=False)
        except Exception:  # a message we cannot read tells us nothing
            return
        self.observe(msg)

    def _content(self, msg: dict[str, Any]) -> dict[str, Any]:
        """A message's content, decoded now if it was deserialized without it."""
        content = msg.get("content")
        if not isinstance(content, dict):
            assert self._session is not None
            try:
                content = self._session.unpack(getattr(content, "bytes", content))
            except (ValueError, RecursionError):  # not JSON, or nested past the parser's limit
                content = {}
            msg["content"] = content  # decoded once, whoever asks next
        return content if isinstance(content, dict) else {}

    def observe(self, msg: dict[str, Any]) -> None:
        """Account for one IOPub message (header, parent header; content for status and input)."""
        parent = msg.get("parent_header") or {}
        kind = msg["header"]["msg_type"]
        if self._on_run is not None and parent.get("msg_type") == "execute_request":
            self._note_other(msg, kind, parent)
        if kind != "status":
            if parent.get("msg_type") == "execute_request":
                self.last_activity = time.monotonic()
                if kind == "execute_input":
                    self._note_code(parent.get("msg_id"), self._content(msg))
            return
        content = self._content(msg)
        state = content.get("execution_state")
        if state in _RESTART_STATES and parent.get("msg_type") != "execute_request":
            self._running.clear()  # a new kernel process: nothing of the old one runs
            self._code.clear()
            return
        if parent.get("msg_type") != "execute_request":
            return  # another request's busy/idle says nothing about running code
        msg_id = parent.get("msg_id")
        if not isinstance(msg_id, str):
            return
        self.last_activity = time.monotonic()
        subshell = parent.get("subshell_id")
        if state == "busy":
            # One shell runs one request at a time: an older one there has ended, even
            # if its idle was lost (a subscriber's queue can overflow under a flood).
            for other in [k for k, s in self._running.items() if s == subshell]:
                del self._running[other]
                self._code.pop(other, None)
            self._running[msg_id] = subshell
        elif state == "idle":
            self._running.pop(msg_id, None)
            self._code.pop(msg_id, None)

    def _note_other(self, msg: dict[str, Any], kind: str, parent: dict[str, Any]) -> None:
        """Follow a person's execute request: its code, whether it failed, its end."""
        msg_id = parent.get("msg_id")
        if parent.get("session") == self._own or not isinstance(msg_id, str):
            return
        if kind == "execute_input":
            content = self._content(msg)
            count = content.get("execution_count")
            self._others[msg_id] = {
                "code": str(content.get("code", "")),
                "count": count if isinstance(count, int) else None,
                "ok": True,
                "user": str(parent.get("username") or ""),
            }
            while len(self._others) > _MAX_FOLLOWED:  # idles lost in a flood: drop the oldest
                del self._others[next(iter(self._others))]
        elif kind == "error" and msg_id in self._others:
            self._others[msg_id]["ok"] = False
        elif kind == "status" and self._content(msg).get("execution_state") == "idle":
            seen = self._others.pop(msg_id, None)
            if seen is not None and self._on_run is not None:
                run = PersonRun(seen["code"], seen["count"], seen["ok"], seen["user"])
                try:
                    self._on_run(run)
                except Exception:  # the notebook's bookkeeping must not stop the watching
                    log.warning("could not note a person's cell in the run order", exc_info=True)

    def _note_code(self, msg_id: Any, content: dict[str, Any]) -> None:
        """The code an execute request runs (its ``execute_input``), until its idle."""
        code = content.get("code")
        if isinstance(msg_id, str) and isinstance(code, str):
            self._code[msg_id] = (code, datetime.now(timezone.utc).isoformat())
