"""A cell run through a raw jupyter_client ``AsyncKernelClient``: what provisioner tests read.

The Docker provisioner's tests and the cluster's launcher tests drive kernels without a
session; both read a cell's outputs the same way, here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Run", "run_cell"]


@dataclass
class Run:
    """What one execution produced."""

    status: str
    stdout: str = ""
    stderr: str = ""
    outputs: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None

    @property
    def result(self) -> str:
        for out in self.outputs:
            if out["msg_type"] == "execute_result":
                return str(out["content"]["data"]["text/plain"])
        return ""


async def run_cell(kc: Any, code: str, timeout: float = 30) -> Run:
    """Run ``code``; its IOPub messages until idle (TimeoutError past ``timeout`` s)."""
    msg_id = kc.execute(code)
    run = Run(status="?")
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no idle for {code!r}")
        msg = await kc.get_iopub_msg(timeout=remaining)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status" and content["execution_state"] == "idle":
            break
        if kind == "stream":
            if content["name"] == "stdout":
                run.stdout += content["text"]
            else:
                run.stderr += content["text"]
        elif kind in ("execute_result", "display_data"):
            run.outputs.append(msg)
        elif kind == "error":
            run.error = content
    run.status = "error" if run.error else "ok"
    return run
