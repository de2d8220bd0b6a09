"""Refusals: no token, a denying authorizer, paths escaping the root, bad bodies, unknown ids.

Also checks that the routes the server actually serves and ``server_extension/openapi.yaml``
describe the same API.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from server_helpers import call_path, served_operations, spec_operations


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
    ('{"code": "1", "timout": 3}', "unknown field(s) timout"),
    ("{}", "'code' is required"),
    ('{"code": 1}', "'code' must be a string"),
    ('{"code": "1", "timeout": "soon"}', "'timeout' must be a number"),
    ('{"code": "1", "timeout": -1}', "positive number"),
    ('{"code": "1", "timeout": true}', "'timeout' must be a number"),
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
