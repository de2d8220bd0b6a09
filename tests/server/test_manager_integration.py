"""The extension's sessions are held by an AsyncSessionManager: its limits and its idle culling.

A real server (pytest-jupyter) and real kernels. The manager is configured the
way a deployment would do it, in the server's config (``c.AsyncSessionManager.*``
or ``c.JupyterExecApp.max_sessions``), here through ``jp_server_config``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec.manager import AsyncSessionManager

Api = Callable[..., Awaitable[tuple[int, Any]]]

CULL = {"cull_idle_timeout": 1.0, "cull_interval": 0.1}
# Culling off until the test switches it on (cull_idle_timeout is read at every pass).
CULL_LATER = {"cull_idle_timeout": 0.0, "cull_interval": 0.05}


def _app(serverapp: Any) -> Any:
    return serverapp.extension_manager.extension_points["jupyter_exec"].app


async def _kernel_ids(jp_fetch: Any) -> list[str]:
    return [k["id"] for k in json.loads((await jp_fetch("api", "kernels")).body)]


@pytest.mark.parametrize(
    ("jp_server_config", "limit"),
    [
        ({"AsyncSessionManager": {"max_sessions": 1}}, "max_sessions=1"),
        ({"JupyterExecApp": {"max_sessions": 1}}, "max_sessions=1"),
        ({"AsyncSessionManager": {"max_sessions_per_backend": {"local": 1}}}, "per_backend"),
    ],
    indirect=["jp_server_config"],
    ids=["AsyncSessionManager.max_sessions", "JupyterExecApp.max_sessions", "per-backend"],
)
async def test_a_session_over_the_managers_limit_gets_429(
    api: Api, jp_fetch: Any, jp_serverapp: Any, limit: str
) -> None:
    app = _app(jp_serverapp)
    manager = app.manager
    assert isinstance(manager, AsyncSessionManager)
    assert manager.parent is app  # configurable as c.AsyncSessionManager.*
    assert manager.handle_sigterm is False  # the server owns SIGTERM
    assert manager.kernel_pools == []  # the server's kernels cannot be pooled

    status, first = await api("POST", "sessions", body={"name": "first"})
    assert status == 201, first
    assert [i.name for i in manager.list()] == [first["id"]]
    kernels = await _kernel_ids(jp_fetch)

    status, error = await api("POST", "sessions", body={"name": "second"})
    assert (status, error["error"]) == (429, "SessionLimitReached")
    assert limit in error["message"]
    assert "delete a session first" in error["message"]
    assert await _kernel_ids(jp_fetch) == kernels  # refused before any kernel started
    assert not (Path(jp_serverapp.root_dir) / "jupyter-exec" / "second").exists()

    # Deleting frees the place.
    assert (await api("DELETE", "sessions", first["id"]))[0] == 204
    status, second = await api("POST", "sessions", body={"name": "second"})
    assert status == 201, second
    await api("DELETE", "sessions", second["id"])


async def _wait_until_culled(api: Api, jp_fetch: Any, model: dict[str, Any]) -> None:
    """Until the session is gone (GET says 404) and so is its kernel, from /api/kernels."""
    deadline = time.monotonic() + 30
    while (await api("GET", "sessions", model["id"]))[0] != 404:
        assert time.monotonic() < deadline, "the session was never culled"
        await asyncio.sleep(0.1)
    while model["kernel"]["id"] in await _kernel_ids(jp_fetch):  # shutting down
        assert time.monotonic() < deadline, "the culled session's kernel is still running"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize(
    "jp_server_config", [{"AsyncSessionManager": CULL}], indirect=True, ids=["cull-1s"]
)
async def test_an_idle_session_is_culled_with_its_kernel(
    api: Api, jp_fetch: Any, jp_serverapp: Any
) -> None:
    status, model = await api("POST", "sessions", body={"name": "idle"})
    assert status == 201, model
    status, out = await api("POST", "sessions", model["id"], "execute", body={"code": "x = 1"})
    assert (status, out["status"]) == (200, "ok")

    await _wait_until_culled(api, jp_fetch, model)
    jupyter_sessions = json.loads((await jp_fetch("api", "sessions")).body)
    assert model["notebook"]["path"] not in [s["path"] for s in jupyter_sessions]
    assert model["id"] not in [s["id"] for s in (await api("GET", "sessions"))[1]]
    notebook = Path(jp_serverapp.root_dir) / model["notebook"]["path"]
    assert "x = 1" in notebook.read_text()  # the record stays
    status, error = await api("POST", "sessions", model["id"], "execute", body={"code": "x"})
    assert (status, error["error"]) == (404, "SessionNotFound")


@pytest.mark.parametrize(
    "jp_server_config", [{"AsyncSessionManager": CULL_LATER}], indirect=True, ids=["cull-later"]
)
async def test_a_person_running_code_on_the_kernel_keeps_the_session(
    api: Api, jp_fetch: Any, jp_serverapp: Any, root: Path
) -> None:
    """Code run on the shared kernel by another client (JupyterLab) counts as use.

    Deterministic under any load: culling is switched on only once the server has
    seen the person's cell start, the cell runs until the test lets it end (no
    fixed sleep to outlast), and the culler is also called directly. While the
    cell runs, a request on the control channel (what a resource-usage panel
    sends) makes jupyter_server itself believe the kernel is idle.
    """
    status, model = await api("POST", "sessions", body={"name": "shared"})
    assert status == 201, model
    app = _app(jp_serverapp)
    manager = app.manager
    session = app.sessions.get(model["id"]).session
    km = jp_serverapp.kernel_manager.get_kernel(model["kernel"]["id"])
    release = root / "release-the-cell"
    person = km.client()
    person.start_channels()
    try:
        msg_id = person.execute(
            f"import os, time\nwhile not os.path.exists({str(release)!r}):\n    time.sleep(0.02)"
        )
        await _until(lambda: session.activity.busy, "the person's cell was never seen running")
        manager.cull_idle_timeout = 0.5  # from now on, half a second idle is enough to cull

        # A control request answered while the cell runs: its idle status fools the server.
        usage = person.session.msg("usage_request", {})
        person.control_channel.send(usage)
        await _until_iopub_idle(person, usage["header"]["msg_id"])
        # jupyter_server usually takes that idle status as the kernel's (the trap); when a
        # later status wins the race it does not, and the cell must keep the session all the same.
        with contextlib.suppress(AssertionError):
            await _until(lambda: km.execution_state == "idle", "not fooled", timeout=10.0)

        ran_since = time.monotonic()
        while time.monotonic() - ran_since < 6 * manager.cull_idle_timeout:
            assert await manager.cull_idle() == []  # also the culler's own passes meanwhile
            assert (await api("GET", "sessions", model["id"]))[0] == 200
            await asyncio.sleep(manager.cull_idle_timeout / 2)
        assert session.busy

        release.touch()
        while True:
            reply = await person.get_shell_msg(timeout=60)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
    finally:
        release.touch()
        person.stop_channels()
    # Once nobody uses the kernel, the session goes.
    await _wait_until_culled(api, jp_fetch, model)


async def _until(condition: Callable[[], bool], failure: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, failure
        await asyncio.sleep(0.02)


async def _until_iopub_idle(client: Any, parent_id: str, timeout: float = 60.0) -> None:
    """Until the kernel published ``idle`` for the request ``parent_id``."""
    deadline = time.monotonic() + timeout
    while True:
        msg = await client.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.1))
        if (
            msg["msg_type"] == "status"
            and msg["parent_header"].get("msg_id") == parent_id
            and msg["content"]["execution_state"] == "idle"
        ):
            return
