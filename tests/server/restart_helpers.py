"""Talking to a real ``jupyter server`` that is stopped and started again (test_rest_restart
and the registry attacks): REST calls, and a stop as a process manager does it (SIGTERM or
SIGKILL)."""

from __future__ import annotations

from typing import Any

import requests

from tests.cli_helpers import stop_process
from tests.server.server_helpers import JupyterProcess

__all__ = ["STOPS", "call", "kernels", "new_session", "run", "stop"]

STOPS = ["SIGTERM", "SIGKILL"]


def call(server: JupyterProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    response = requests.request(
        method,
        f"{server.url}/api/exec/{path}",
        headers=server.headers,
        json=body,
        timeout=120,
    )
    return response.status_code, (response.json() if response.content else None)


def stop(server: JupyterProcess, how: str) -> None:
    """Stop the server as a process manager does: politely, or not at all."""
    if how == "SIGKILL":
        server.proc.kill()
        server.proc.wait(30)
    else:
        stop_process(server.proc)


def new_session(server: JupyterProcess, **body: Any) -> dict[str, Any]:
    status, model = call(server, "POST", "sessions", body)
    assert status == 201, (model, server.tail())
    assert isinstance(model, dict)
    return model


def run(server: JupyterProcess, session_id: str, code: str) -> dict[str, Any]:
    status, out = call(server, "POST", f"sessions/{session_id}/execute", {"code": code})
    assert status == 200, (out, server.tail())
    assert isinstance(out, dict)
    return out


def kernels(server: JupyterProcess) -> list[dict[str, Any]]:
    """The server's running kernels (``/api/kernels``)."""
    found: list[dict[str, Any]] = requests.get(
        f"{server.url}/api/kernels", headers=server.headers, timeout=10
    ).json()
    return found
