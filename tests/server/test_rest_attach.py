"""A session attached to a kernel a person already runs (``"kernel_id"`` on creation), over REST.

A real jupyter_server: the person's kernel is started through ``/api/kernels`` and
bound to their notebook through ``/api/sessions``, as JupyterLab does; the person's
code runs on it from another kernel client (their username in the headers).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from server_helpers import run_as_person

Api = Callable[..., Awaitable[tuple[int, Any]]]


async def _kernels(jp_fetch: Any) -> list[str]:
    return [k["id"] for k in json.loads((await jp_fetch("api", "kernels")).body)]


async def _jupyter_sessions(jp_fetch: Any) -> list[dict[str, Any]]:
    return list(json.loads((await jp_fetch("api", "sessions")).body))


@pytest.fixture
async def persons_kernel(jp_fetch: Any) -> str:
    """A person's notebook and its kernel, started through Jupyter's own REST API."""
    body = {"path": "mine.ipynb", "type": "notebook", "name": "mine.ipynb", "kernel": {}}
    response = await jp_fetch("api", "sessions", method="POST", body=json.dumps(body))
    return str(json.loads(response.body)["kernel"]["id"])


async def test_an_agent_session_on_a_persons_kernel_sees_their_variables_and_leaves_it_running(
    api: Api, jp_fetch: Any, jp_serverapp: Any, root: Path, persons_kernel: str
) -> None:
    assert (await run_as_person(jp_serverapp, persons_kernel, "x = 41"))["status"] == "ok"

    status, model = await api(
        "POST", "sessions", body={"name": "helper", "kernel_id": persons_kernel}
    )
    assert status == 201, model
    assert model["kernel"]["id"] == persons_kernel
    assert model["owns_kernel"] is False
    assert model["backend"] == "local"
    assert await _kernels(jp_fetch) == [persons_kernel]  # no kernel of its own

    status, out = await api("POST", "sessions", model["id"], "execute", body={"code": "x + 1"})
    assert (status, out["status"], out["text"]) == (200, "ok", "42")
    # The person goes on in their own notebook; the agent sees it, and does not record it.
    assert (await run_as_person(jp_serverapp, persons_kernel, "y = x * 2"))["status"] == "ok"
    status, out = await api("POST", "sessions", model["id"], "execute", body={"code": "y"})
    assert out["text"] == "82"
    listed = {s["id"]: s for s in (await api("GET", "sessions"))[1]}
    assert listed[model["id"]]["owns_kernel"] is False
    bound = {s["path"]: s["kernel"]["id"] for s in await _jupyter_sessions(jp_fetch)}
    assert bound == {"mine.ipynb": persons_kernel, model["notebook"]["path"]: persons_kernel}

    assert (await api("DELETE", "sessions", model["id"]))[0] == 204
    assert persons_kernel in await _kernels(jp_fetch)
    assert (await run_as_person(jp_serverapp, persons_kernel, "assert x == 41"))["status"] == "ok"
    paths = [s["path"] for s in await _jupyter_sessions(jp_fetch)]
    assert paths == ["mine.ipynb"]  # the agent's notebook is unbound, the person's stays

    notebook = nbformat.read(root / model["notebook"]["path"], as_version=4)
    nbformat.validate(notebook)
    sources = [c.source for c in notebook.cells]
    assert sources == ["x + 1", "y"]  # the agent's cells only: never the person's


async def test_a_culled_attached_session_leaves_the_kernel_running(
    api: Api, jp_fetch: Any, jp_serverapp: Any, persons_kernel: str
) -> None:
    """Closed by the session manager, as its idle culler does: the same release path."""
    status, model = await api("POST", "sessions", body={"kernel_id": persons_kernel})
    assert status == 201, model
    app = jp_serverapp.extension_manager.extension_points["jupyter_exec"].app
    await app.manager.close_session(model["id"])
    assert (await api("GET", "sessions", model["id"]))[0] == 404
    assert persons_kernel in await _kernels(jp_fetch)
    assert (await run_as_person(jp_serverapp, persons_kernel, "1"))["status"] == "ok"


async def test_a_session_that_starts_its_kernel_owns_it(api: Api, jp_fetch: Any) -> None:
    status, model = await api("POST", "sessions", body={"name": "own"})
    assert (status, model["owns_kernel"]) == (201, True)
    assert (await api("DELETE", "sessions", model["id"]))[0] == 204
    assert model["kernel"]["id"] not in await _kernels(jp_fetch)


async def test_an_unknown_kernel_is_404_and_starts_nothing(
    api: Api, jp_fetch: Any, root: Path
) -> None:
    status, error = await api("POST", "sessions", body={"name": "x", "kernel_id": "nope"})
    assert (status, error["error"]) == (404, "KernelNotFound")
    assert "'nope'" in error["message"]
    assert "/api/kernels" in error["message"]
    assert await _kernels(jp_fetch) == []
    assert not (root / "jupyter-exec" / "x").exists()  # its own folder: not even that


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"backend": "local"}, "'backend'"),
        ({"kernel_name": "python3"}, "'kernel_name'"),
        ({"backend": "docker", "kernel_name": "python3"}, "'backend' and 'kernel_name'"),
        ({"network": {"allow": ["pypi.org"]}}, "'network'"),
        ({"undo_steps": 2}, "'undo_steps'"),
    ],
    ids=["backend", "kernel_name", "both", "network", "undo_steps"],
)
async def test_fields_the_kernel_decides_are_400_with_kernel_id(
    api: Api, jp_fetch: Any, persons_kernel: str, extra: dict[str, Any], named: str
) -> None:
    status, error = await api("POST", "sessions", body={"kernel_id": persons_kernel, **extra})
    assert (status, error["error"]) == (400, "InvalidRequest")
    assert named in error["message"]
    assert (await api("GET", "sessions"))[1] == []
    assert await _kernels(jp_fetch) == [persons_kernel]


async def test_one_session_per_kernel_is_409(
    api: Api, jp_fetch: Any, persons_kernel: str, session: dict[str, Any]
) -> None:
    status, first = await api("POST", "sessions", body={"name": "a", "kernel_id": persons_kernel})
    assert status == 201, first
    status, error = await api("POST", "sessions", body={"name": "b", "kernel_id": persons_kernel})
    assert (status, error["error"]) == (409, "SessionConflict")
    assert first["id"] in error["message"]
    # A kernel a session started for itself cannot be taken over either.
    own = session["kernel"]["id"]
    status, error = await api("POST", "sessions", body={"name": "c", "kernel_id": own})
    assert (status, error["error"]) == (409, "SessionConflict")
    assert session["id"] in error["message"]
    assert len((await api("GET", "sessions"))[1]) == 2
    await api("DELETE", "sessions", first["id"])
    assert persons_kernel in await _kernels(jp_fetch)


async def test_an_attached_session_restored_onto_a_snapshot_still_spares_the_persons_kernel(
    api: Api, jp_fetch: Any, jp_serverapp: Any, persons_kernel: str
) -> None:
    """A restore moves the session onto a kernel of its own: that one it owns, not the first."""
    status, model = await api("POST", "sessions", body={"kernel_id": persons_kernel})
    assert status == 201, model
    sid = model["id"]
    assert (await api("POST", "sessions", sid, "execute", body={"code": "z = 1"}))[0] == 200
    status, checkpoint = await api("POST", "sessions", sid, "checkpoints", body={"name": "one"})
    assert status == 201, checkpoint
    assert (await api("POST", "sessions", sid, "execute", body={"code": "z = 2"}))[0] == 200
    status, restored = await api("POST", "sessions", sid, "checkpoints", "one", "restore")
    assert status == 200, restored
    assert restored["kernel"]["id"] != persons_kernel
    assert restored["owns_kernel"] is True
    assert persons_kernel in await _kernels(jp_fetch)  # not retired with the swap
    assert (await api("DELETE", "sessions", sid))[0] == 204
    assert await _kernels(jp_fetch) == [persons_kernel]
    assert (await run_as_person(jp_serverapp, persons_kernel, "assert z == 2"))["status"] == "ok"
