"""A scripted kernel for message-handling tests: the session's ``kernel_manager`` seam, faked.

A session given ``kernel_manager=FakeKernelManager(script)`` attaches to it as
to any running kernel (a server's, a pool's). ``script(code)`` says what the
kernel answers to each executed ``code``: a list of :class:`Say` (an IOPub
message), :class:`Reply` (the execute_reply; sent last if not given), and
:class:`Hang` (stop answering: the runner's timeout, interrupt and death
logic take over). Messages are built like ipykernel's, so the session cannot
tell the difference; no stream is ever split or joined behind the test's back.
"""

from __future__ import annotations

import asyncio
import queue
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_exec import AsyncSession


@dataclass
class Say:
    """One IOPub message of the cell (``stream``, ``display_data``, ``update_display_data``...)."""

    msg_type: str
    content: dict[str, Any]


@dataclass
class Reply:
    """The execute_reply; ``status="error"`` with ``ename``/``evalue`` like ipykernel's."""

    content: dict[str, Any] = field(default_factory=lambda: {"status": "ok"})


@dataclass
class Hang:
    """The kernel stops answering. ``interruptible``: an interrupt ends the cell with a
    KeyboardInterrupt (as IPython does); otherwise only a restart does. ``loses``: that many
    interrupts are lost first (as IRkernel loses one landing in its own code)."""

    interruptible: bool = True
    loses: int = 0


Event = Say | Reply | Hang
Script = Callable[[str], Sequence[Event]]


def stream(text: str, name: str = "stdout") -> Say:
    return Say("stream", {"name": name, "text": text})


def display(text: str, display_id: str | None = None, *, html: str | None = None) -> Say:
    data = {"text/plain": text, **({"text/html": html} if html else {})}
    transient = {"display_id": display_id} if display_id else {}
    return Say("display_data", {"data": data, "metadata": {}, "transient": transient})


def update(text: str, display_id: str, *, html: str | None = None) -> Say:
    data = {"text/plain": text, **({"text/html": html} if html else {})}
    return Say(
        "update_display_data",
        {"data": data, "metadata": {}, "transient": {"display_id": display_id}},
    )


def error(ename: str, evalue: str) -> list[Event]:
    return [
        Say("error", {"ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}),
        Reply({"status": "error", "ename": ename, "evalue": evalue, "traceback": []}),
    ]


class _Channel:
    """A channel the session reads with ``get_msg`` (the path gateway kernels take)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise queue.Empty from None


class _Session:
    def msg(self, msg_type: str, content: dict[str, Any], metadata: Any = None) -> dict[str, Any]:
        return {"header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type}, "content": content}


class _ShellSender:
    """The shell channel: requests go to the kernel, replies come back through ``get_msg``."""

    def __init__(self, kernel: FakeKernelManager) -> None:
        self._kernel = kernel

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
        return await self._kernel.shell.get_msg(timeout)

    def send(self, msg: dict[str, Any]) -> None:
        content = msg["content"]
        self._kernel.run(msg["header"]["msg_id"], content["code"], content.get("silent", False))


class FakeClient:
    def __init__(self, kernel: FakeKernelManager) -> None:
        self._kernel = kernel
        self.iopub_channel = kernel.iopub
        self.shell_channel = _ShellSender(kernel)
        self.session = _Session()

    def start_channels(self) -> None:
        pass

    def stop_channels(self) -> None:
        pass

    def kernel_info(self) -> str:
        msg_id = uuid.uuid4().hex
        self._kernel.kernel_info_requests += 1
        if self._kernel.kernel_info_requests <= self._kernel.loses_kernel_info:
            return msg_id  # lost on the way, as a request sent while the socket connects
        self._kernel.send_iopub(msg_id, "status", {"execution_state": "busy"})
        self._kernel.send_shell(msg_id, "kernel_info_reply", self._kernel.kernel_info)
        self._kernel.send_iopub(msg_id, "status", {"execution_state": "idle"})
        return msg_id

    def execute(self, code: str, silent: bool = False, **_: Any) -> str:
        msg_id = uuid.uuid4().hex
        self._kernel.run(msg_id, code, silent)
        return msg_id


class FakeKernelManager:
    """The kernel manager of a scripted kernel; records what it was asked to do."""

    kernel_spec = None
    provisioner = None

    def __init__(self, script: Script) -> None:
        self.script = script
        self.kernel_id = f"fake-{uuid.uuid4().hex[:8]}"
        self.iopub = _Channel()
        self.shell = _Channel()
        self.alive = True
        self.executed: list[str] = []
        self.interrupts = 0
        self.restarts = 0
        self.count = 0
        self._hanging: tuple[str, Hang] | None = None
        self.kernel_info_requests = 0
        self.loses_kernel_info = 0
        """That many ``kernel_info_request`` s are lost before one is answered."""
        self.kernel_info = {
            "status": "ok",
            "language_info": {"name": "python", "version": "3", "mimetype": "text/x-python"},
        }

    # -- what the session calls ------------------------------------------------------

    @property
    def has_kernel(self) -> bool:
        return self.alive

    def client(self) -> FakeClient:
        return FakeClient(self)

    async def is_alive(self) -> bool:
        return self.alive

    async def interrupt_kernel(self) -> None:
        self.interrupts += 1
        if self._hanging is not None and self._hanging[1].interruptible:
            msg_id, hang = self._hanging
            if self.interrupts <= hang.loses:
                return
            self._hanging = None
            for event in error("KeyboardInterrupt", ""):
                self._emit(msg_id, event)
            self.send_iopub(msg_id, "status", {"execution_state": "idle"})

    async def restart_kernel(self, now: bool = False) -> None:
        self.restarts += 1
        self._hanging = None
        self.alive = True
        self.count = 0

    async def shutdown_kernel(self, now: bool = False) -> None:
        self.alive = False

    # -- the kernel's side -------------------------------------------------------------

    def send_iopub(self, parent: str, msg_type: str, content: dict[str, Any]) -> None:
        self.iopub.queue.put_nowait(_message(parent, msg_type, content))

    def send_shell(self, parent: str, msg_type: str, content: dict[str, Any]) -> None:
        self.shell.queue.put_nowait(_message(parent, msg_type, content))

    def _emit(self, msg_id: str, event: Event) -> None:
        if isinstance(event, Say):
            self.send_iopub(msg_id, event.msg_type, event.content)
        elif isinstance(event, Reply):
            self.send_shell(
                msg_id, "execute_reply", {"execution_count": self.count, **event.content}
            )

    def run(self, msg_id: str, code: str, silent: bool) -> None:
        if silent:  # set-up code the session runs unseen (the stream guard): not for us
            self.send_shell(msg_id, "execute_reply", {"status": "error", "evalue": "fake"})
            return
        self.executed.append(code)
        self.count += 1
        self.send_iopub(msg_id, "status", {"execution_state": "busy"})
        self.send_iopub(msg_id, "execute_input", {"code": code, "execution_count": self.count})
        events = list(self.script(code))
        for event in events:
            if isinstance(event, Hang):
                self._hanging = (msg_id, event)
                return
            self._emit(msg_id, event)
        if not any(isinstance(e, Reply) for e in events):
            self._emit(msg_id, Reply())
        self.send_iopub(msg_id, "status", {"execution_state": "idle"})


def _message(parent: str, msg_type: str, content: dict[str, Any]) -> dict[str, Any]:
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": msg_type,
            "date": datetime.now(timezone.utc),
        },
        "parent_header": {"msg_id": parent},
        "metadata": {},
        "content": content,
    }


def scripted(table: dict[str, Sequence[Event]]) -> FakeKernelManager:
    """A kernel answering each code in ``table``; any other code prints nothing."""
    return FakeKernelManager(lambda code: table.get(code, []))


async def started(km: FakeKernelManager, work_dir: Path, **options: Any) -> AsyncSession:
    """A started ``AsyncSession`` named ``fake`` on ``km`` (a 30 s timeout unless given)."""
    options.setdefault("timeout", 30)
    return await AsyncSession(work_dir=work_dir, name="fake", kernel_manager=km, **options).start()
