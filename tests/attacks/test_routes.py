"""Every route of every server, walked by a client holding the wrong thing (issue 20, finding 4).

The routes come from each server's own table, so a route added tomorrow is
walked too, and one that declares no credential fails here:

* the E2B server: its tornado app's rules (:data:`jupyter_exec.e2b.app.ROUTES`),
  each Connect service expanded to every ``rpc_*`` method its handler serves;
* the MCP server's HTTP transport: :data:`jupyter_exec.mcp.server.ROUTES`, and
  paths it does not serve;
* the REST extension: :data:`jupyter_exec.server.handlers.default_handlers`.

Each route is asked with no credential, a wrong one, another sandbox's token,
and a file URL's signature (each in the places a server might look: headers
and query). Only the credential the route declares opens it: everything else
is 401 or 403 with a reason, never a 2xx and never a 5xx, and the asset behind
it is untouched. A body sent to a route by a stranger is refused on its
headers, before it is read.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import API_KEY, Running
from server_helpers import JupyterProcess, free_port
from tornado.web import RequestHandler

from jupyter_exec.e2b.auth import CREDENTIALS, FILE_SIGNATURE, PUBLIC, RouteAuth
from jupyter_exec.e2b.web import E2BHandler
from jupyter_exec.mcp.server import MAX_BODY
from jupyter_exec.mcp.server import ROUTES as MCP_ROUTES
from jupyter_exec.server.handlers import ExecAPIHandler, default_handlers
from tests.attacks.raw import status_line
from tests.cli_helpers import stop_process

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

METHODS = ("get", "post", "put", "patch", "delete")


def _served(handler: type[RequestHandler], base: type[RequestHandler]) -> list[str]:
    """The HTTP methods a handler class (or a class between it and ``base``) defines."""
    found = []
    for method in METHODS:
        for cls in handler.__mro__:
            if cls is base or cls is RequestHandler:
                break
            if method in vars(cls):
                found.append(method.upper())
                break
    return found


def _refusal(answer: httpx.Response) -> str | None:
    """None when ``answer`` is a 401/403 with a reason; else what is wrong with it."""
    if answer.status_code not in (401, 403):
        return f"{answer.status_code} {answer.text[:160]}"
    try:
        body = answer.json()
    except ValueError:
        return f"{answer.status_code} is not JSON: {answer.text[:160]}"
    if not (body.get("message") or body.get("error")):
        return f"{answer.status_code} without a reason: {body}"
    return None


def _head_refused(url: str, path: str, headers: str = "", length: int = 1 << 40) -> bytes:
    """The status line answering a POST that announces a body (1 TiB) and sends none of it."""
    parts = urlsplit(url)
    assert parts.hostname
    assert parts.port
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(
            (
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{parts.port}\r\n{headers}"
                f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
            ).encode()
        )
        return status_line(sock)


# -- the E2B server ----------------------------------------------------------------------------


def _e2b_routes(running: Running) -> list[tuple[str, str, RouteAuth]]:
    """(method, path pattern, declared auth) for every route of the running app."""
    app = running.server.make_app()
    found = []
    for rule in app.wildcard_router.rules:
        handler = rule.target
        auth = (rule.target_kwargs or {}).get("auth")
        assert isinstance(auth, RouteAuth), f"{rule.matcher.regex.pattern}: declares no credential"
        assert auth.opens_with <= CREDENTIALS
        pattern = rule.matcher.regex.pattern.rstrip("$")
        for method in _served(handler, E2BHandler):
            if "(?P<method>" in pattern:
                for name in sorted(n[4:] for n in dir(handler) if n.startswith("rpc_")):
                    found.append((method, re.sub(r"\(\?P<method>[^)]*\)", name, pattern), auth))
            else:
                found.append((method, pattern, auth))
    return found


def test_every_e2b_route_declares_what_opens_it(api_server: Running) -> None:
    routes = _e2b_routes(api_server)
    assert len(routes) > 20  # every RPC method, each its own route
    assert {auth.opens_with for _, _, auth in routes} >= {
        frozenset({"sandbox_token"}),
        frozenset({"api_key"}),
        frozenset({"sandbox_token", "file_signature"}),
    }
    signed = {path for _, path, auth in routes if FILE_SIGNATURE in auth.opens_with}
    assert signed == {"/files"}  # a file URL's signature opens the files route and no other
    with pytest.raises(TypeError, match="overrides"):

        class Sneaky(E2BHandler):  # a handler that would authenticate itself
            def prepare(self) -> None:
                pass


def _fill(pattern: str, sandbox_id: str) -> str:
    path = pattern.replace("\\", "")
    path = re.sub(r"\(\?P<sandbox_id>[^)]*\)", sandbox_id, path)
    path = re.sub(r"\(\?P<context_id>[^)]*\)", "default", path)
    return re.sub(r"\(\?:v2/\)\?", "", path)


def test_f4_every_e2b_route_refuses_all_but_its_own_credential(
    api_env: Running, caplog: pytest.LogCaptureFixture
) -> None:
    victim = Sandbox.create()
    attacker = Sandbox.create()
    victim.run_code("state = 'kept'")
    victim.files.write("precious.txt", "do not touch")
    home = api_env.root / victim.sandbox_id
    theirs = attacker._envd_access_token
    assert theirs
    urls = (victim.download_url("precious.txt"), victim.upload_url("precious.txt"))
    signed = [dict(parse_qsl(urlsplit(url).query)) for url in urls]
    sid = {"E2b-Sandbox-Id": victim.sandbox_id}
    holdings: list[tuple[str, dict[str, str], dict[str, str], str | None]] = [
        ("nothing", {}, {}, None),
        ("nothing, naming the sandbox", sid, {}, None),
        ("a wrong token", {**sid, "X-Access-Token": "wrong", "X-API-KEY": "wrong"}, {}, None),
        ("a wrong traffic token", {**sid, "E2B-Traffic-Access-Token": "wrong"}, {}, None),
        ("another sandbox's token", {**sid, "X-Access-Token": theirs}, {}, None),
        ("another sandbox's traffic token", {**sid, "E2B-Traffic-Access-Token": theirs}, {}, None),
        ("a sandbox token as the API key", {"X-API-KEY": theirs}, {}, None),
        ("the API key as a sandbox token", {**sid, "X-Access-Token": API_KEY}, {}, None),
        ("a token in the query", {}, {"access_token": theirs, "X-Access-Token": theirs}, None),
        *[(f"a file signature ({q['signature'][:8]})", named, q, FILE_SIGNATURE)
          for q in signed for named in ({}, sid)],
    ]  # fmt: skip
    problems = []
    walked = 0
    with httpx.Client(base_url=api_env.url, timeout=60) as client:
        for method, pattern, auth in _e2b_routes(api_env):
            path = _fill(pattern, victim.sandbox_id)
            for who, headers, query, credential in holdings:
                if credential in auth.opens_with:
                    continue  # the route's own credential (its reach is test_e2b_boundary's)
                content = b"{}" if method in ("POST", "PUT", "PATCH") else None
                if "Process/" in path or "Filesystem/" in path:
                    headers = {**headers, "Content-Type": "application/json"}
                answer = client.request(method, path, params=query, content=content,
                                        headers=headers)  # fmt: skip
                walked += 1
                if PUBLIC in auth.opens_with and "E2b-Sandbox-Id" not in headers:
                    if answer.status_code != 204 or answer.content:
                        problems.append(f"{method} {path} public: {answer.status_code}")
                    continue
                why = _refusal(answer)
                if why:
                    problems.append(f"{method} {path} with {who}: {why}")
    assert walked > 200
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "/execute" in logged  # the access log is captured, and holds no credential
    for credential in (theirs, *(q["signature"] for q in signed)):
        assert credential not in logged
    assert not problems, f"{len(problems)} let through:\n" + "\n".join(problems[:40])
    # The victim is as it was: its kernel state, its files, alive.
    assert victim.is_running()
    assert victim.run_code("state").text == "kept"
    assert (home / "precious.txt").read_text() == "do not touch"
    kept = [p.name for p in home.iterdir() if ".ipynb" not in p.name]  # the record aside,
    assert sorted(n for n in kept if not n.endswith("_state")) == ["precious.txt"]  # its state
    for sandbox in (victim, attacker):
        sandbox.kill()


def test_f8_every_e2b_route_refuses_a_strangers_body_unread(api_env: Running) -> None:
    victim = Sandbox.create()
    for method, pattern, _ in _e2b_routes(api_env):
        if method != "POST":
            continue
        path = _fill(pattern, victim.sandbox_id)
        status = _head_refused(api_env.url, path, f"E2b-Sandbox-Id: {victim.sandbox_id}\r\n")
        assert status.split()[1] in (b"401", b"413"), (path, status)
    victim.kill()


# -- the MCP server's HTTP transport ------------------------------------------------------------

MCP_TOKEN = "mcp-routes-token-0123456789"


@pytest.fixture(scope="module")
def mcp_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    work = tmp_path_factory.mktemp("mcp-routes")
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter_exec.mcp", "--transport", "http",
         "--port", str(port), "--work-dir", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "JUPYTER_EXEC_MCP_TOKEN": MCP_TOKEN},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert process.poll() is None, "the MCP server exited"
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process)


HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def test_f4_every_mcp_path_refuses_all_but_its_token(mcp_url: str) -> None:
    assert set(MCP_ROUTES) == {"/mcp"}
    assert {credential for credential, _ in MCP_ROUTES.values()} == {"bearer_token"}
    paths = [*MCP_ROUTES, "/", "/mcp/", "/mcp/x", "/sse", "/messages/", "/docs", "/.well-known/x"]
    holdings: list[tuple[str, dict[str, str], dict[str, str]]] = [
        ("nothing", {}, {}),
        ("a wrong token", {"Authorization": "Bearer wrong"}, {}),
        ("the token, not as a bearer", {"Authorization": MCP_TOKEN}, {}),
        ("the token as basic auth", {"Authorization": f"Basic {MCP_TOKEN}"}, {}),
        ("the token in another header", {"X-API-KEY": MCP_TOKEN, "X-Access-Token": MCP_TOKEN}, {}),
        ("the token in the query", {}, {"token": MCP_TOKEN, "access_token": MCP_TOKEN}),
        ("a Jupyter token", {"Authorization": f"token {MCP_TOKEN}"}, {}),
        ("a file signature", {}, {"signature": "v1_x", "path": "x"}),
    ]
    problems = []
    with httpx.Client(base_url=mcp_url, timeout=30) as client:
        for path in paths:
            for method in ("GET", "POST", "DELETE", "PUT"):
                for who, headers, query in holdings:
                    answer = client.request(method, path, params=query, json=HELLO,
                                            headers={**ACCEPT, **headers})  # fmt: skip
                    why = _refusal(answer)
                    if why:
                        problems.append(f"{method} {path} with {who}: {why}")
        good = {**ACCEPT, "Authorization": f"Bearer {MCP_TOKEN}"}
        # The walk is not one that cannot fail: the token opens /mcp, and nothing else.
        assert client.post("/mcp", json=HELLO, headers=good).status_code == 200
        assert client.post("/elsewhere", json=HELLO, headers=good).status_code == 404
    assert not problems, "\n".join(problems)


def test_f8_mcp_refuses_a_strangers_body_unread(mcp_url: str) -> None:
    assert _head_refused(mcp_url, "/mcp").split()[1] == b"401"
    good = f"Authorization: Bearer {MCP_TOKEN}\r\n"
    assert _head_refused(mcp_url, "/mcp", good, MAX_BODY + 1).split()[1] == b"413"


# -- the REST extension -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterProcess]:
    with JupyterProcess(tmp_path_factory.mktemp("rest-routes")) as server:
        yield server


def _rest_routes() -> list[tuple[str, str]]:
    found = []
    for pattern, handler in default_handlers:
        assert issubclass(handler, ExecAPIHandler), pattern
        path = re.sub(r"\(\?P<session_id>[^)]*\)", "0" * 32, pattern)
        path = re.sub(r"\(\?P<\w+>[^)]*\)", "probe", path)
        for method in _served(handler, ExecAPIHandler):
            assert method in handler.actions, f"{method} {pattern}: no declared action"
            found.append((method, path))
    return found


def test_every_rest_route_declares_its_action() -> None:
    assert len(_rest_routes()) >= 16
    with pytest.raises(TypeError, match="declares no action"):

        class Undeclared(ExecAPIHandler):  # a method nobody authorises
            async def post(self) -> None:
                pass

    with pytest.raises(TypeError, match="overrides"):

        class Sneaky(ExecAPIHandler):
            async def prepare(self) -> None:
                pass


def test_f4_every_rest_route_refuses_all_but_the_servers_token(jupyter: JupyterProcess) -> None:
    holdings: list[tuple[str, dict[str, str], dict[str, str]]] = [
        ("nothing", {}, {}),
        ("a wrong token", {"Authorization": "token wrong"}, {}),
        ("a wrong bearer token", {"Authorization": "Bearer wrong"}, {}),
        ("a wrong token in the query", {}, {"token": "wrong"}),
        (
            "the token in an E2B header",
            {"X-API-KEY": jupyter.token, "X-Access-Token": jupyter.token},
            {},
        ),
        ("a file signature", {}, {"signature": "v1_x", "path": "x"}),
    ]
    problems = []
    with httpx.Client(base_url=jupyter.url, timeout=60) as client:
        for method, path in _rest_routes():
            for who, headers, query in holdings:
                content = json.dumps({"code": "open('pwned', 'w')"}) if method == "POST" else None
                answer = client.request(method, path, params=query, content=content,
                                        headers=headers)  # fmt: skip
                why = _refusal(answer)
                if why:
                    problems.append(f"{method} {path} with {who}: {why}")
        listed = client.get("/api/exec/sessions", headers=jupyter.headers)
        assert listed.status_code == 200  # the token opens it: the walk can fail
        assert listed.json() == []
    assert not problems, "\n".join(problems)
    assert not list(jupyter.root.rglob("pwned"))


def test_f8_every_rest_route_refuses_a_strangers_body_unread(jupyter: JupyterProcess) -> None:
    for method, path in _rest_routes():
        if method == "POST":
            status = _head_refused(jupyter.url, path)
            assert status.split()[1] in (b"401", b"403"), (path, status)
    good = f"Authorization: token {jupyter.token}\r\n"
    status = _head_refused(jupyter.url, "/api/exec/sessions", good, (1 << 20) + 1)
    assert status.split()[1] == b"413"


def test_rest_bodies_still_work(jupyter: JupyterProcess) -> None:
    """The streamed, bounded body is the body: a session made and run over plain REST."""
    with httpx.Client(base_url=jupyter.url, headers=jupyter.headers, timeout=120) as client:
        made = client.post("/api/exec/sessions", json={"name": "walker"})
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        ran = client.post(f"/api/exec/sessions/{sid}/execute", json={"code": "6 * 7"})
        assert ran.json()["text"] == "42"
        assert client.delete(f"/api/exec/sessions/{sid}").status_code == 204
