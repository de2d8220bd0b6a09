"""The floor: raw jupyter_client with nothing on top, as a careful user would write it.

Two clients, both talking to a kernel started by jupyter_client's own manager
with its defaults (TCP on localhost):

* :class:`BlockingFloor` - ``KernelManager`` + ``BlockingKernelClient.execute_interactive``,
  the reference named in the issue; outputs are only appended to a list.
* :class:`AsyncFloor` - ``AsyncKernelManager`` + an ``AsyncKernelClient`` loop that
  reads IOPub until idle and then the shell reply, the way nbclient does.

Neither saves files, records a notebook, or bounds memory: the difference
between them and jupyter-exec is what jupyter-exec's features cost.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager, KernelManager

__all__ = ["AsyncFloor", "BlockingFloor"]

_START_TIMEOUT = 60.0


class BlockingFloor:
    """A kernel driven by ``BlockingKernelClient.execute_interactive``."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.km: Any = None
        self.kc: Any = None

    def start(self) -> BlockingFloor:
        """``KernelManager.start_kernel`` + ``start_channels`` + ``wait_for_ready``."""
        self.km = KernelManager()
        # The kernel warns on stderr about TCP without encryption; keep the report clean.
        self.km.start_kernel(cwd=str(self.cwd), stderr=subprocess.DEVNULL)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=_START_TIMEOUT)
        return self

    def execute(self, code: str, timeout: float | None = None) -> list[dict[str, Any]]:
        """Run ``code``; returns the IOPub messages of the cell. Raises TimeoutError on timeout."""
        messages: list[dict[str, Any]] = []
        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=messages.append)
        messages.append(reply)
        return messages

    def close(self) -> None:
        """``stop_channels`` + a polite ``shutdown_kernel`` (what jupyter-exec's close does)."""
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None and self.km.has_kernel:
            self.km.shutdown_kernel()
        self.km = self.kc = None


class AsyncFloor:
    """A kernel driven by an nbclient-style ``AsyncKernelClient`` loop."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.km: Any = None
        self.kc: Any = None

    async def start(self) -> AsyncFloor:
        self.km = AsyncKernelManager()
        await self.km.start_kernel(cwd=str(self.cwd), stderr=subprocess.DEVNULL)
        self.kc = self.km.client()
        self.kc.start_channels()
        await self.kc.wait_for_ready(timeout=_START_TIMEOUT)
        return self

    async def execute(self, code: str) -> list[dict[str, Any]]:
        """Send ``execute_request``; read IOPub until idle, then the shell reply."""
        msg_id = self.kc.execute(code)
        messages: list[dict[str, Any]] = []
        while True:
            msg = await self.kc.get_iopub_msg()
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                break
            messages.append(msg)
        while True:
            reply = await self.kc.get_shell_msg()
            if reply["parent_header"].get("msg_id") == msg_id:
                messages.append(reply)
                return messages

    async def close(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None and self.km.has_kernel:
            await self.km.shutdown_kernel()
        self.km = self.kc = None
