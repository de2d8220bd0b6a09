"""Refusals: no token, paths escaping the root, bad bodies, unknown ids, and every malformed
request of :mod:`malformed` answered with a 4xx whose JSON says what to fix.

Also checks that the routes the server actually serves and ``server_extension/openapi.yaml``
describe the same API.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from malformed import Probe, bad_notebooks, probes
from server_helpers import call_path, served_operations, spec_operations
from tornado.httpclient import HTTPResponse

from jupyter_exec.exceptions import (
    DockerUnavailable,
    InvalidArgument,
    KernelNotAliveError,
    KernelStartError,
    NotebookError,
    SessionConflict,
    SessionLimitError,
    SessionNotFound,
    StorageError,
    WorkDirError,
)


async def test_served_routes_match_the_openapi_spec(jp_serverapp) -> None:
    served = served_operations(jp_serverapp)
    assert served, "no /api/exec routes are served"
    assert served == spec_operations()


@pytest.mark.parametrize(("path", "method"), sorted(spec_operations()))
async def test_every_endpoint_needs_a_token(jp_fetch, path: str, method: str) -> None:
    response = await jp_fetch(
        *call_path(path).strip("/").split("/"),
        method=method,
        body=b"{}" if method == "POST" else None,
        headers={"Authorization": ""},
        raise_error=False,
        follow_redirects=False,
    )
    assert response.code in (401, 403), (path, method, response.code)


@pytest.mark.parametrize(
    "work_dir",
    ["..", "../outside", "a/../../outside", "/etc", "~", "~root", "a\\..\\..", ".hidden", "a/.git"],
)
async def test_work_dirs_outside_the_root_are_refused(api, root: Path, work_dir: str) -> None:
    status, error = await api("POST", "sessions", body={"work_dir": work_dir})
    assert (status, error["error"]) == (400, "WorkDirError"), error
    assert not (root.parent / "outside").exists()


async def test_symlinks_out_of_the_root_and_bad_names_are_refused(
    api, root: Path, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    status, error = await api("POST", "sessions", body={"work_dir": "link/sub"})
    assert (status, error["error"]) == (400, "WorkDirError")
    assert "symlink" in error["message"]
    assert list((tmp_path / "elsewhere").iterdir()) == []
    for name in ("../evil", "a/b", ".hidden", "", "x" * 101):
        status, error = await api("POST", "sessions", body={"name": name})
        assert (status, error["error"]) == (400, "InvalidRequest"), name
    assert (await api("GET", "sessions"))[1] == []  # nothing was started


BAD_BODIES = [
    ("{", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"code": "1", "timout": 3}', "unknown field(s) 'timout'"),
    ("{}", "'code' is required"),
    ('{"code": 1}', "'code' must be a string"),
    ('{"code": "1", "timeout": "soon"}', "'timeout' must be a number, not a string"),
    ('{"code": "1", "timeout": -1}', "above 0"),
    ('{"code": "1", "timeout": true}', "'timeout' must be a number, not a boolean"),
]


async def test_bad_execute_bodies_get_400(api, session) -> None:
    for body, says in BAD_BODIES:
        for route in (("execute",), ("execute", "stream")):
            status, error = await api("POST", "sessions", session["id"], *route, body=body)
            assert (status, error["error"]) == (400, "InvalidRequest"), body
            assert says in error["message"], error


async def test_unknown_sessions_and_bad_creates(api, session, jp_serverapp) -> None:
    for method, *parts in [
        ("GET", "sessions", "nope"),
        ("DELETE", "sessions", "nope"),
        ("POST", "sessions", "nope", "execute"),
        ("POST", "sessions", "nope", "execute", "stream"),
        ("POST", "sessions", "nope", "interrupt"),
        ("POST", "sessions", "nope", "restart"),
        ("POST", "sessions", "nope", "fork"),
        ("POST", "sessions", "nope", "undo"),
        ("GET", "sessions", "nope", "checkpoints"),
        ("POST", "sessions", "nope", "checkpoints"),
        ("POST", "sessions", "nope", "checkpoints", "any", "restore"),
        ("GET", "sessions", "nope", "approvals"),
    ]:
        body = {"code": "1"} if parts[-1] in ("execute", "stream") else None
        status, error = await api(method, *parts, body=body)
        assert (status, error["error"]) == (404, "SessionNotFound"), parts
        assert "no session with id 'nope'" in error["message"]

    status, error = await api("POST", "sessions", body={"name": "agent"})
    assert (status, error["error"]) == (409, "SessionConflict")
    status, error = await api("POST", "sessions", body={"backend": "cloud"})
    assert (status, error["error"]) == (400, "InvalidRequest")
    status, error = await api("POST", "sessions", body={"kernel_name": "no-such-kernel"})
    assert (status, error["error"]) == (400, "InvalidRequest")
    assert "no kernelspec named 'no-such-kernel'" in error["message"]
    status, error = await api("POST", "sessions", body="{nope")
    assert (status, error["error"]) == (400, "InvalidRequest")

    jp_serverapp.web_app.settings["jupyter_exec_sessions"].max_sessions = 1
    status, error = await api("POST", "sessions", body={"name": "second"})
    assert (status, error["error"]) == (429, "SessionLimitReached")


def _files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _unclean(response: HTTPResponse) -> str | None:
    """Why a response to a malformed request is not a clean refusal, or ``None`` if it is."""
    if not 400 <= response.code < 500:
        return f"status {response.code}"
    if not response.headers.get("Content-Type", "").startswith("application/json"):
        return f"{response.code} with Content-Type {response.headers.get('Content-Type')!r}"
    try:
        body = json.loads(response.body)
    except ValueError:
        return f"{response.code} with a body that is not JSON: {response.body[:80]!r}"
    if not isinstance(body, dict):
        return f"{response.code} with JSON that is not an object"
    error, message = body.get("error"), body.get("message")
    if not (isinstance(error, str) and error and isinstance(message, str) and message):
        return f"{response.code} without 'error' and 'message': {body}"
    if message in (response.reason, "Unhandled error") or len(message) < 20:
        return f"{response.code} {error}: a message that says nothing ({message!r})"
    if len(message) > 2_100:
        return f"{response.code} {error}: a message of {len(message):,} characters"
    return None


_NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": 1,
            "id": "a1",
            "metadata": {},
            "outputs": [],
            "source": "x = 1",
        }
    ],
    "metadata": {},
    "nbformat": 4,
    "nbformat_minor": 5,
}


async def test_every_malformed_request_gets_a_4xx_that_says_what_to_fix(
    api, session, root: Path, jp_serverapp, http_server_client, jp_auth_header, jp_base_url
) -> None:
    (root / "replay-me.ipynb").write_text(json.dumps(_NOTEBOOK))
    valid = {
        "/api/exec/sessions/{session_id}/execute": {"code": "1"},
        "/api/exec/sessions/{session_id}/execute/stream": {"code": "1"},
        "/api/exec/replay": {"notebook": "replay-me.ipynb"},
        "/api/exec/sessions/{session_id}/fork": {"n": 1, "name": "probe-fork"},
        "/api/exec/sessions/{session_id}/undo": {"n": 1},
        "/api/exec/sessions/{session_id}/checkpoints": {"name": "probe"},
        "/api/exec/approvals/{approval_id}": {"allow": True},
    }
    replays = []
    for what, name, content in bad_notebooks():
        (root / name).write_bytes(content)
        body = json.dumps({"notebook": name}).encode()
        replays.append(Probe(f"a notebook that is {what}", "POST", "replay", body))
    (root / "folder.ipynb").mkdir()
    replays.append(Probe("a folder", "POST", "replay", b'{"notebook": "folder.ipynb"}'))
    files = _files_under(root)
    kernels = set(jp_serverapp.kernel_manager.list_kernel_ids())
    tried, unclean = 0, []
    for probe in [*probes(session["id"], valid), *replays]:
        tried += 1
        response = await http_server_client.fetch(
            f"{jp_base_url}api/exec/{probe.path}",
            method=probe.method,
            body=probe.body,
            headers=dict(jp_auth_header),
            raise_error=False,
            allow_nonstandard_methods=True,
            request_timeout=60,
        )
        why = _unclean(response)
        if why is not None:
            unclean.append(f"{probe}: {why}")
    print(f"\nmalformed requests: {tried} tried, {tried - len(unclean)} clean")
    assert not unclean, f"{len(unclean)} of {tried} not clean:\n" + "\n".join(unclean)
    assert tried > 300  # the generator really covers every route
    # Nothing was started or written by any of them; the session still works.
    assert [s["id"] for s in (await api("GET", "sessions"))[1]] == [session["id"]]
    assert set(jp_serverapp.kernel_manager.list_kernel_ids()) == kernels
    assert _files_under(root) == files
    assert await api("GET", "sessions", session["id"], "checkpoints") == (200, [])
    status, out = await api("POST", "sessions", session["id"], "execute", body={"code": "6 * 7"})
    assert (status, out["text"]) == (200, "42")


@pytest.mark.parametrize(
    ("raised", "status", "error"),
    [
        (SessionNotFound("no session with id 'x'"), 404, "SessionNotFound"),
        (InvalidArgument("a bad value: use another"), 400, "InvalidArgument"),
        (WorkDirError("'a/b' leaves the root"), 400, "WorkDirError"),
        (SessionConflict("'a.ipynb' exists already"), 409, "SessionConflict"),
        (KernelNotAliveError("the kernel was shut down"), 409, "KernelNotAliveError"),
        (SessionLimitError("20 sessions at most"), 429, "SessionLimitError"),
        (StorageError("could not write the notebook: No space left", 28), 507, "StorageError"),
        (
            KernelStartError("could not start kernel 'python3': no such file"),
            503,
            "KernelStartError",
        ),
        (DockerUnavailable("no Docker engine answers"), 503, "DockerUnavailable"),
        (NotebookError("the notebook could not be saved"), 500, "NotebookError"),
        (RuntimeError("a bug, with a secret path /root/x"), 500, "InternalError"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
async def test_every_exception_becomes_its_status_and_json_at_one_seam(
    api,
    jp_serverapp,
    monkeypatch: pytest.MonkeyPatch,
    raised: BaseException,
    status: int,
    error: str,
) -> None:
    sessions = jp_serverapp.web_app.settings["jupyter_exec_sessions"]

    def fail(*args: object, **kwargs: object) -> None:
        raise raised

    monkeypatch.setattr(sessions, "list", fail)
    got, body = await api("GET", "sessions")
    assert (got, body["error"]) == (status, error)
    if error == "InternalError":  # a bug's details stay in the server log
        assert "secret" not in body["message"]
        assert "server log" in body["message"]
    else:
        assert body["message"] == str(raised)
