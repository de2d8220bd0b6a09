"""Every route of the extension, refused without credentials, from a foreign Origin or Host.

The routes come from the handlers' own table (``default_handlers``), so a new
route is covered the day it is added. Each refusal is checked to have done
nothing: no session made or deleted, no code run, no kernel restarted, no file
written. An authorizer that denies the ``exec`` resource gets 403 everywhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from jupyter_server.auth import Authorizer
from server_helpers import SPEC, call_path, spec_operations
from tornado.httpclient import HTTPResponse
from tornado.websocket import WebSocketHandler
from traitlets.config import Config

from jupyter_exec.server.handlers import ExecAPIHandler, default_handlers

Api = Callable[..., Awaitable[tuple[int, Any]]]


def _routes() -> list[tuple[str, str, type[ExecAPIHandler]]]:
    found = []
    for pattern, handler in default_handlers:
        path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern)
        for method in handler.allowed_methods():
            found.append((path, method, handler))
    return found


ROUTES = _routes()

# What each route would do if the refusal let it through; its trace is checked to be absent.
_BODIES = {
    "/api/exec/sessions": {"name": "intruder"},
    "/api/exec/sessions/{session_id}/execute": {"code": "open('pwned', 'w').write('x')"},
    "/api/exec/sessions/{session_id}/execute/stream": {"code": "open('pwned', 'w').write('x')"},
    "/api/exec/replay": {"notebook": "replay-me.ipynb"},
    "/api/exec/sessions/{session_id}/fork": {"name": "intruder"},
    "/api/exec/sessions/{session_id}/undo": {"n": 1},
    "/api/exec/sessions/{session_id}/checkpoints": {"name": "intruder"},
    "/api/exec/approvals/{approval_id}": {"allow": True},
}


def test_the_extension_serves_no_websocket_these_tests_do_not_cover() -> None:
    assert ROUTES
    for _, _, handler in ROUTES:
        assert not issubclass(handler, WebSocketHandler), f"{handler}: cover it here"


async def _browser_cookies(http_server_client: Any, jp_base_url: str, token: str) -> dict[str, str]:
    """What a logged-in browser holds: the login cookie and the ``_xsrf`` cookie, by name."""
    cookies: dict[str, str] = {}
    for path, headers in (("api/status", {"Authorization": f"token {token}"}), ("login", {})):
        response = await http_server_client.fetch(f"{jp_base_url}{path}", headers=headers)
        for header in response.headers.get_list("Set-Cookie"):
            name, _, value = header.split(";", 1)[0].partition("=")
            cookies["login" if name.startswith("username-") else name] = f"{name}={value}"
    assert {"login", "_xsrf"} <= set(cookies), cookies
    return cookies


def _browser(cookies: dict[str, str], origin: str | None) -> dict[str, str]:
    """Headers of a browser's request: its cookies, the XSRF token a same-site page would send."""
    headers = {
        "Cookie": f"{cookies['login']}; {cookies['_xsrf']}",
        "X-XSRFToken": cookies["_xsrf"].split("=", 1)[1],
    }
    if origin is not None:
        headers["Origin"] = origin
    return headers


def _refused(response: HTTPResponse, statuses: tuple[int, ...]) -> str | None:
    if response.code not in statuses:
        return f"status {response.code}, wanted one of {statuses}"
    if not response.headers.get("Content-Type", "").startswith("application/json"):
        return f"{response.code} is not JSON"
    body = json.loads(response.body)
    if not (body.get("error") and body.get("message")):
        return f"{response.code} without error and message: {body}"
    return None


@pytest.mark.parametrize(
    ("path", "method"), [(p, m) for p, m, _ in ROUTES], ids=[f"{m} {p}" for p, m, _ in ROUTES]
)
async def test_every_route_refuses_strangers_and_does_nothing(
    api: Api,
    session: dict[str, Any],
    root: Path,
    jp_serverapp: Any,
    http_server_client: Any,
    jp_base_url: str,
    path: str,
    method: str,
) -> None:
    (root / "replay-me.ipynb").write_text(
        json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )
    sid = session["id"]
    assert (await api("POST", "sessions", sid, "execute", body={"code": "kept = 1"}))[0] == 200
    token = jp_serverapp.identity_provider.token
    auth = {"Authorization": f"token {token}"}
    cookies = await _browser_cookies(http_server_client, jp_base_url, token)
    here = f"http://127.0.0.1:{jp_serverapp.port}"
    # A browser sends its cookies to this server from any site; only the Origin tells them apart.
    # (A token-authenticated request skips Jupyter's Origin check: a foreign site has no token.)
    assert (
        await http_server_client.fetch(
            f"{jp_base_url}api/exec/sessions", headers=_browser(cookies, here)
        )
    ).code == 200  # the same browser, from this server's own page: let through
    strangers: list[tuple[str, dict[str, str], tuple[int, ...]]] = [
        ("no credentials", {}, (401, 403)),
        ("a wrong token", {"Authorization": "token not-the-token"}, (401, 403)),
        ("a wrong token in the query", {"X-Query": "?token=not-the-token"}, (401, 403)),
        ("a forged login cookie", {"Cookie": cookies["login"][:-12] + 'forged00"'}, (401, 403)),
        # jupyter_server answers a cross-origin API request 404, as if the route did not exist.
        ("a browser on a foreign Origin", _browser(cookies, "http://evil.example"), (403, 404)),
        ("a browser on a foreign Origin, null", _browser(cookies, "null"), (403, 404)),
        ("a foreign Host", {**auth, "Host": "evil.example"}, (403,)),
        ("a foreign Host with a port", {**auth, "Host": "evil.example:80"}, (403,)),
        (
            "a browser on a foreign Host",
            {**_browser(cookies, None), "Host": "evil.example"},
            (403,),
        ),
    ]
    if method != "GET":  # a browser's cookie without the XSRF token: cross-site request forgery
        strangers.append(("a login cookie without XSRF", {"Cookie": cookies["login"]}, (403,)))
    body = json.dumps(_BODIES.get(path, {})).encode() if method == "POST" else None
    url = f"{jp_base_url}{call_path(path).lstrip('/').replace('0' * 32, sid)}"
    problems = []
    for who, headers, statuses in strangers:
        query = headers.pop("X-Query", "")
        response = await http_server_client.fetch(
            url + query,
            method=method,
            body=body,
            headers=headers,
            raise_error=False,
            follow_redirects=False,
            allow_nonstandard_methods=True,
        )
        why = _refused(response, statuses)
        if why is not None:
            problems.append(f"{who}: {why}")
    assert not problems, f"{method} {path}:\n" + "\n".join(problems)
    # Nothing happened: the one session is there, untouched, its kernel state kept.
    assert [s["id"] for s in (await api("GET", "sessions"))[1]] == [sid]
    status, model = await api("GET", "sessions", sid)
    assert (status, model["cells"]) == (200, 1)
    status, out = await api("POST", "sessions", sid, "execute", body={"code": "kept"})
    assert (status, out["text"]) == (200, "1")  # neither restarted nor interrupted away
    assert not list(root.rglob("pwned"))
    assert not list(root.rglob("*.replayed.ipynb"))
    assert not list(root.rglob("intruder*"))
    assert await api("GET", "sessions", sid, "checkpoints") == (200, [])
    assert model["kernel"]["id"] == session["kernel"]["id"]  # no undo or restore swapped it


def test_the_spec_documents_every_refusal() -> None:
    """Each operation lists 403 and a default error (the Error schema: error, message)."""

    spec = yaml.safe_load(SPEC.read_text())
    assert spec["components"]["schemas"]["Error"]["required"] == ["error", "message"]
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method in ("get", "post", "delete"):
                responses = operation["responses"]
                assert "403" in responses, (path, method)
                assert "default" in responses, (path, method)


class DenyExec(Authorizer):
    """Allows everything except the jupyter-exec resource."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource != "exec"


class DenyKernelExecute(Authorizer):
    """A user who may use jupyter-exec, and read kernels, but not run code on kernels."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return not (resource == "kernels" and action == "execute")


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest) -> Config:
    """The extension enabled; for the test named ``*denied*``, an authorizer denying ``exec``,
    and for ``*kernels*``, one denying ``execute`` on ``kernels``."""
    config: dict[str, Any] = {"ServerApp": {"jpserver_extensions": {"jupyter_exec.server": True}}}
    if "denied" in request.node.name:
        config["ServerApp"]["authorizer_class"] = DenyExec
    if "kernels" in request.node.name:
        config["ServerApp"]["authorizer_class"] = DenyKernelExecute
    return Config(config)


async def test_f10_attaching_to_a_kernel_needs_execute_on_kernels(
    api: Api, jp_fetch: Any, root: Path
) -> None:
    """Finding 10 of issue 20: an agent attached to a person's kernel runs code on it, so the
    attach is authorised as JupyterLab's kernel websocket is (``execute`` on ``kernels``), not
    on ``exec`` alone."""
    body = {"path": "mine.ipynb", "type": "notebook", "name": "mine.ipynb", "kernel": {}}
    response = await jp_fetch("api", "sessions", method="POST", body=json.dumps(body))
    persons_kernel = str(json.loads(response.body)["kernel"]["id"])
    status, error = await api(
        "POST", "sessions", body={"name": "helper", "kernel_id": persons_kernel}
    )
    assert status == 403, error
    assert "execute on kernels" in error["message"]
    assert (await api("GET", "sessions"))[1] == []  # nothing attached
    # The same user may still start sessions of their own (exec is allowed): the refusal is
    # the kernel's, not the route's.
    status, model = await api("POST", "sessions", body={"name": "own"})
    assert status == 201, model
    assert model["kernel"]["id"] != persons_kernel
    await api("DELETE", "sessions", model["id"])


async def test_every_endpoint_is_denied_by_an_authorizer_that_denies_exec(jp_fetch: Any) -> None:
    assert (await jp_fetch("api", "status")).code == 200  # authenticated, other resources allowed
    for path, method in sorted(spec_operations()):
        response = await jp_fetch(
            *call_path(path).strip("/").split("/"),
            method=method,
            body=b"{}" if method == "POST" else None,
            raise_error=False,
        )
        assert response.code == 403, (path, method, response.code)
        assert json.loads(response.body)["error"] == "Forbidden"
