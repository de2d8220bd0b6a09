"""The E2B API's sandbox endpoints (``E2B_API_URL``): create, list, get, connect, timeout, kill.

Every request needs the server's API key (``X-API-KEY``, which the SDK sends
from ``E2B_API_KEY``). Create and connect answer with the sandbox's access
token, which the SDK then sends on every request to that sandbox.
Templates, pause and resume, snapshots and metrics are E2B cloud features:
their routes answer 404, and the SDK says so.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from jupyter_exec.e2b.sandboxes import ENVD_VERSION, Sandbox
from jupyter_exec.e2b.web import E2BHandler
from jupyter_exec.exceptions import InvalidArgument

__all__ = ["ConnectHandler", "SandboxHandler", "SandboxesHandler", "TimeoutHandler"]


def created(sandbox: Sandbox) -> dict[str, Any]:
    """The create / connect answer: who the sandbox is, and its token."""
    return {
        "templateID": sandbox.template,
        "sandboxID": sandbox.id,
        "clientID": "jupyter-exec",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": sandbox.token,
        "trafficAccessToken": sandbox.token,
    }


def _timeout(body: dict[str, Any]) -> float | None:
    value = body.get("timeout")
    if value is None:
        return None
    if not isinstance(value, (int, float)) or value < 0:
        raise InvalidArgument("'timeout' must be a number of seconds >= 0")
    return float(value)


class APIHandler(E2BHandler):
    def prepare(self) -> None:
        super().prepare()
        self.require_api_key()


class SandboxesHandler(APIHandler):
    """``POST /sandboxes`` (and ``/v2/sandboxes``) creates; ``GET`` lists."""

    async def post(self) -> None:
        body = self.json_body()
        for name in ("metadata", "envVars"):
            if not isinstance(body.get(name) or {}, dict):
                raise InvalidArgument(f"{name!r} must be an object of strings")
        sandbox = await self.server.sandboxes.create(
            template=body.get("templateID"),
            metadata=body.get("metadata"),
            envs=body.get("envVars"),
            timeout=_timeout(body),
        )
        self.send_json(created(sandbox), status=201)

    def get(self) -> None:
        wanted = dict(parse_qsl(self.get_query_argument("metadata", "")))
        states = self.get_query_argument("state", "")
        listed = []
        for sandbox in self.server.sandboxes.every():
            if states and "running" not in states.split(","):
                continue
            if all(sandbox.metadata.get(k) == v for k, v in wanted.items()):
                listed.append(sandbox.describe())
        self.send_json(listed)


class SandboxHandler(APIHandler):
    """``GET /sandboxes/{id}`` describes one; ``DELETE`` kills it."""

    def get(self, sandbox_id: str) -> None:
        sandbox = self.server.sandboxes.get(sandbox_id)
        self.send_json(sandbox.describe())

    async def delete(self, sandbox_id: str) -> None:
        await self.server.sandboxes.kill(sandbox_id)
        self.set_status(204)
        self.finish()


class TimeoutHandler(APIHandler):
    """``POST /sandboxes/{id}/timeout``: the sandbox ends that many seconds from now."""

    def post(self, sandbox_id: str) -> None:
        sandbox = self.server.sandboxes.get(sandbox_id)
        seconds = _timeout(self.json_body())
        self.server.sandboxes.set_timeout(sandbox, 0 if seconds is None else seconds)
        self.set_status(204)
        self.finish()


class ConnectHandler(APIHandler):
    """``POST /sandboxes/{id}/connect``: a running sandbox's token (timeout optionally reset)."""

    def post(self, sandbox_id: str) -> None:
        sandbox = self.server.sandboxes.get(sandbox_id)
        seconds = _timeout(self.json_body())
        if seconds is not None:
            self.server.sandboxes.set_timeout(sandbox, seconds)
        self.send_json(created(sandbox))
