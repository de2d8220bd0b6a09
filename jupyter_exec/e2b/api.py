"""The E2B API's sandbox endpoints (``E2B_API_URL``): create, list, get, connect, timeout, kill,
pause (its kernels asleep: :meth:`~jupyter_exec.AsyncSession.sleep`; ``connect`` resumes it).

Every request needs the server's API key (``X-API-KEY``, which the SDK sends
from ``E2B_API_KEY``), as the route table declares (:data:`jupyter_exec.e2b.app.ROUTES`).
Create and connect answer with the sandbox's access
token, which the SDK then sends on every request to that sandbox.
Snapshots and forks are :mod:`jupyter_exec.e2b.branches`; templates and metrics are E2B
cloud features, whose routes answer 501 (:mod:`jupyter_exec.e2b.unserved`).
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import parse_qsl

from jupyter_exec.e2b.sandboxes import ENVD_VERSION, Sandbox, Sandboxes
from jupyter_exec.e2b.snapshots import is_snapshot_id
from jupyter_exec.e2b.web import E2BHandler
from jupyter_exec.exceptions import InvalidArgument, JupyterExecError

__all__ = [
    "APIHandler",
    "ConnectHandler",
    "PauseHandler",
    "SandboxHandler",
    "SandboxesHandler",
    "TimeoutHandler",
    "created",
    "lifecycle_fields",
    "timeout_field",
]


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


def timeout_field(body: dict[str, Any], most: float) -> float | None:
    """The body's ``timeout`` in seconds: a finite number from 0 to ``most`` (None: not given).

    So every sandbox a client makes ends, and the reaper ends it: NaN, infinity,
    a negative or a boolean is refused, as is more than the server's maximum.
    """
    value = body.get("timeout")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument("'timeout' must be a number of seconds")
    try:
        seconds = float(value)
    except OverflowError:
        seconds = math.inf
    if not (math.isfinite(seconds) and 0 <= seconds <= most):
        raise InvalidArgument(
            f"'timeout' must be a number of seconds from 0 to {most:g} (this server's maximum "
            f"sandbox life), not {value if isinstance(value, float) else 'that'}"
        )
    return seconds


def is_snapshot_template(template: str, sandboxes: Sandboxes) -> bool:
    """Whether a create's ``templateID`` names a snapshot: an id of ours (one that is not
    this key's is then not found), or the name of one of this key's."""
    bare = template.split(":", 1)[0].rsplit("/", 1)[-1]
    if is_snapshot_id(bare):
        return True
    try:
        return sandboxes.store().find(template, sandboxes.owner) is not None
    except JupyterExecError:  # no host key: there are no snapshots (none could be signed)
        return False


def lifecycle_fields(body: dict[str, Any]) -> tuple[str, bool, bool | None]:
    """The create body's lifecycle (``autoPause``, ``autoPauseMemory``, ``autoResume``), as
    :meth:`Sandboxes.create` takes it: what the timeout does, whether that pause keeps memory,
    and whether use resumes the sandbox (None: not said)."""
    pause, memory, resume = (
        body.get("autoPause"),
        body.get("autoPauseMemory"),
        body.get("autoResume"),
    )
    for name, value in (("autoPause", pause), ("autoPauseMemory", memory)):
        if value is not None and not isinstance(value, bool):
            raise InvalidArgument(f"{name!r} must be true or false")
    enabled = None
    if resume is not None:
        enabled = resume.get("enabled") if isinstance(resume, dict) else resume
        if not isinstance(enabled, bool):
            raise InvalidArgument("'autoResume' must be {\"enabled\": true or false}")
    if enabled and not pause:
        raise InvalidArgument("'autoResume' needs 'autoPause': only a paused sandbox resumes")
    return ("pause" if pause else "kill"), memory is not False, enabled


class APIHandler(E2BHandler):
    """The API's routes (opened by the server's key: see jupyter_exec.e2b.app.ROUTES)."""

    @property
    def max_timeout(self) -> float:
        return self.server.sandboxes.max_timeout


class SandboxesHandler(APIHandler):
    """``POST /sandboxes`` (and ``/v2/sandboxes``) creates; ``GET`` lists."""

    async def post(self) -> None:
        body = self.json_body()
        template = body.get("templateID")
        if template is not None and not isinstance(template, str):
            raise InvalidArgument("'templateID' must be a string")
        for name in ("metadata", "envVars"):
            if not isinstance(body.get(name) or {}, dict):
                raise InvalidArgument(f"{name!r} must be an object of strings")
        fields: dict[str, Any] = {
            "metadata": body.get("metadata"),
            "envs": body.get("envVars"),
            "timeout": timeout_field(body, self.max_timeout),
            "lifecycle": lifecycle_fields(body),
        }
        sandboxes = self.server.sandboxes
        if template is not None and is_snapshot_template(template, sandboxes):
            sandbox = await sandboxes.from_snapshot(template, **fields)
        else:
            sandbox = await sandboxes.create(template=template, **fields)
        self.send_json(created(sandbox), status=201)

    def get(self) -> None:
        wanted = dict(parse_qsl(self.get_query_argument("metadata", "")))
        states = self.get_query_argument("state", "")
        listed = []
        for sandbox in self.server.sandboxes.every():
            if states and sandbox.describe()["state"] not in states.split(","):
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
        seconds = timeout_field(self.json_body(), self.max_timeout)
        if seconds is None:
            raise InvalidArgument("say how long the sandbox lives: 'timeout' in seconds")
        self.server.sandboxes.set_timeout(sandbox, seconds)
        self.set_status(204)
        self.finish()


class ConnectHandler(APIHandler):
    """``POST /sandboxes/{id}/connect``: a running sandbox's token (timeout optionally reset)."""

    def post(self, sandbox_id: str) -> None:
        sandbox = self.server.sandboxes.get(sandbox_id)
        seconds = timeout_field(self.json_body(), self.max_timeout)
        if sandbox.paused:  # resumed: each kernel wakes, its state loaded, on its next call
            self.server.sandboxes.resume(sandbox, seconds)
        elif seconds is not None:
            self.server.sandboxes.set_timeout(sandbox, seconds)
        self.send_json(created(sandbox))


class PauseHandler(APIHandler):
    """``POST /sandboxes/{id}/pause``: its kernels asleep, their state saved (``memory``
    false: closed, the files alone kept); 409 when paused already. ``connect`` resumes it."""

    async def post(self, sandbox_id: str) -> None:
        sandbox = self.server.sandboxes.get(sandbox_id)
        memory = self.json_body().get("memory", True)
        if memory is None:
            memory = True
        if not isinstance(memory, bool):
            raise InvalidArgument("'memory' must be true or false")
        await self.server.sandboxes.pause(sandbox, memory=memory)
        self.set_status(204)
        self.finish()
