"""A network policy given in the REST session body: checked before any kernel starts, enforced
for a real Docker kernel, undecided hosts held as pending approvals that REST lists and
answers, and the policy's secret never in any response, log line or notebook.

The Docker tests need a real engine and the kernel image (as ``tests/docker`` does): skipped
without one locally, failed under ``CI=true``. A test HTTP server on this machine's loopback
is reached by names mapped in the proxy's own resolver (the proxy runs in this process).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server_helpers import install_docker_kernelspec
from traitlets.config import Config

from jupyter_exec.docker.engine import connect
from jupyter_exec.network import NetworkRequest
from jupyter_exec.server.approvals import ApprovalNotFound, Approvals
from tests.conftest import docker_engine
from tests.tls_servers import answering, fetch_code, https_echo

TEST_IMAGE = os.environ.get("JX_TEST_IMAGE", "jupyter-exec/kernel:latest")
SECRET = "Bearer jx-rest-4d2b8e-secret"
APPROVAL_TIMEOUT = 8.0

Api = Any


@pytest.fixture
def jp_server_config() -> Config:
    return Config(
        {
            "ServerApp": {"jpserver_extensions": {"jupyter_exec.server": True}},
            "JupyterExecApp": {"timeout": 120.0, "approval_timeout": APPROVAL_TIMEOUT},
        }
    )


@pytest.fixture
def seen(api: Api, caplog: pytest.LogCaptureFixture) -> Iterator[list[str]]:
    """Every response body of the test (through ``api``) and the log: none may hold the secret."""
    caplog.set_level("DEBUG")
    bodies: list[str] = []
    yield bodies
    assert all(SECRET not in body for body in bodies)
    assert SECRET not in caplog.text
    assert SECRET[7:] not in caplog.text


@pytest.fixture
def call(api: Api, seen: list[str]) -> Api:
    async def wrapped(*args: Any, **kwargs: Any) -> tuple[int, Any]:
        status, body = await api(*args, **kwargs)
        seen.append(json.dumps(body))
        return status, body

    return wrapped


# -- checked before anything starts (no Docker needed) ---------------------------------------

MALFORMED = [
    ("a list", [], "'network' must be an object"),
    ("an unknown key", {"allow": [], "allowed": ["x"]}, "unknown 'network' key(s) 'allowed'"),
    ("allow as a string", {"allow": "pypi.org"}, "'network.allow' must be an array"),
    ("a number as a rule", {"deny": [1]}, "'network.deny' must be an array"),
    ("a URL as a rule", {"allow": ["https://pypi.org/"]}, "not a URL"),
    ("a bad wildcard", {"allow": ["py*.org"]}, "a wildcard may only be a whole first label"),
    ("ask as a string", {"ask": "yes"}, "'network.ask' must be true or false"),
    ("secrets as a list", {"secrets": [SECRET]}, "'network.secrets' must map host names"),
    ("a secret on an address", {"secrets": {"10.0.0.1": {"X-Key": SECRET}}}, "a host name"),
    ("a secret that is a number", {"secrets": {"a.test": {"X-Key": 1}}}, "'network.secrets'"),
    ("a secret on two lines", {"secrets": {"a.test": {"X-Key": SECRET + "\n"}}}, "one line"),
    ("a bad header name", {"secrets": {"a.test": {"X Key": SECRET}}}, "is not a header name"),
    ("a lone surrogate", {"secrets": {"a.test": {"X-Key": "\ud800" + SECRET}}}, "'network"),
]


async def test_malformed_policies_are_refused_before_any_kernel_starts(
    call: Api, jp_serverapp: Any, root: Path
) -> None:
    kernels = set(jp_serverapp.kernel_manager.list_kernel_ids())
    for what, network, says in MALFORMED:
        status, error = await call(
            "POST", "sessions", body={"backend": "docker", "name": "p", "network": network}
        )
        assert (status, error["error"]) == (400, "InvalidRequest"), what
        assert says in error["message"], (what, error["message"])
    # A local kernel cannot be held to a policy: the engine's own refusal.
    status, error = await call("POST", "sessions", body={"name": "p", "network": {"allow": []}})
    assert (status, error["error"]) == (400, "InvalidRequest")
    assert "network= is enforced only for Docker kernels" in error["message"]
    assert set(jp_serverapp.kernel_manager.list_kernel_ids()) == kernels
    assert not list(root.rglob("p.ipynb"))
    assert (await call("GET", "sessions"))[1] == []


async def test_answering_unknown_approvals(call: Api) -> None:
    assert await call("GET", "approvals") == (200, [])
    status, error = await call("POST", "approvals", "nope", body={"allow": True})
    assert (status, error["error"]) == (404, "ApprovalNotFound")
    status, error = await call("POST", "approvals", "nope", body={"allow": "yes"})
    assert (status, error["error"]) == (400, "InvalidRequest")
    status, error = await call("GET", "sessions", "nope", "approvals")
    assert (status, error["error"]) == (404, "SessionNotFound")


async def test_approvals_time_out_as_denied_and_a_closing_session_denies_its_own() -> None:
    approvals = Approvals(timeout=0.5)
    request = NetworkRequest("web.test", 80, "agent", 3)
    assert await approvals.wait("s1", request) is False  # nobody answered
    assert approvals.list() == []

    approvals.timeout = 60.0
    waiting = [asyncio.ensure_future(approvals.wait(s, request)) for s in ("s1", "s2")]
    while len(approvals.list()) < 2:
        await asyncio.sleep(0.01)
    assert [p.session for p in approvals.list("s2")] == ["s2"]
    approvals.deny_all("s1")
    assert await waiting[0] is False
    assert not waiting[1].done()
    pending = approvals.list()[0]
    assert pending.model()["cell"] == 3
    approvals.answer(pending.id, True)
    assert await waiting[1] is True
    with pytest.raises(ApprovalNotFound):
        approvals.answer(pending.id, False)


# -- a real Docker kernel ------------------------------------------------------------------


# ``/echo`` quotes the request's Authorization header: the secret the proxy adds comes back.
_Handler = answering("hello through the policy")


@pytest.fixture
def web_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The test server over TLS (a host with secrets is reached over HTTPS only). A REST policy
    names no ``extra_ca``, so the proxy (in this process) trusts the server's authority through
    ``SSL_CERT_FILE``; the kernel trusts the session's authority through its bundle."""
    with https_echo(_Handler, tmp_path / "ca", "web.test", "evil.test", "slow.test") as served:
        monkeypatch.setenv("SSL_CERT_FILE", str(served[1]))
        yield served[0]


@pytest.fixture
def docker_kernelspec(jp_data_dir: Path) -> str:
    """The server's ``python3-docker`` kernelspec, on the test image; skipped without Docker."""
    docker_engine().close()
    return install_docker_kernelspec(jp_data_dir, TEST_IMAGE)


FETCH = fetch_code(60)


async def _pending(call: Api, host: str) -> dict[str, Any]:
    """The pending approval for ``host``, once the kernel's request is waiting."""
    for _ in range(600):
        status, waiting = await call("GET", "approvals")
        assert status == 200
        found = [a for a in waiting if a["host"] == host]
        if found:
            return dict(found[0])
        await asyncio.sleep(0.1)
    raise AssertionError(f"no pending approval for {host} appeared")


@pytest.mark.docker
async def test_ask_is_answered_over_rest_and_no_secret_is_ever_shown(
    call: Api, docker_kernelspec: str, web_port: int, root: Path, seen: list[str]
) -> None:
    network = {
        "allow": ["127.0.0.1"],  # the address the test names resolve to; the names are asked
        "secrets": {"web.test": {"Authorization": SECRET}},
        "ask": True,
    }
    status, model = await call(
        "POST", "sessions", body={"name": "net", "backend": "docker", "network": network}
    )
    assert status == 201, model
    sid = model["id"]
    assert model["network"] == {
        "allow": ["127.0.0.1"],
        "deny": [],
        "secrets": {"web.test": ["Authorization"]},
        "ask": True,
    }
    assert (await call("POST", "sessions", sid, "execute", body={"code": FETCH}))[0] == 200

    async def fetch(host: str, path: str = "/") -> Any:
        scheme = "https" if host == "web.test" else "http"  # refused ones: the 403 body shows
        code = f"print(json.dumps(fetch('{scheme}://{host}:{web_port}{path}')))"
        return await call("POST", "sessions", sid, "execute", body={"code": code})

    # An undecided host waits as a pending approval; allowed over REST, the request goes on.
    running = asyncio.ensure_future(fetch("web.test"))
    pending = await _pending(call, "web.test")
    assert set(pending) == {"id", "session", "host", "port", "cell", "since", "expires"}
    assert (pending["session"], pending["port"], pending["cell"]) == (sid, web_port, 1)
    assert (await call("GET", "sessions", sid, "approvals"))[1] == [pending]
    status, answered = await call("POST", "approvals", pending["id"], body={"allow": True})
    assert (status, answered["allow"], answered["host"]) == (200, True, "web.test")
    status, out = await running
    assert (status, json.loads(out["stdout"])) == (200, [200, "hello through the policy"])
    assert _Handler.seen[-1]["Authorization"] == SECRET  # added by the proxy, on the host
    assert [(c["host"], c["decision"]) for c in out["connections"]] == [("web.test", "allowed")]
    assert (await call("GET", "approvals"))[1] == []
    status, error = await call("POST", "approvals", pending["id"], body={"allow": False})
    assert (status, error["error"]) == (404, "ApprovalNotFound")  # answered once only

    # Denied over REST: the kernel's request fails with the policy's message.
    running = asyncio.ensure_future(fetch("evil.test"))
    pending = await _pending(call, "evil.test")
    assert (await call("POST", "approvals", pending["id"], body={"allow": False}))[0] == 200
    status, out = await running
    code, message = json.loads(out["stdout"])
    assert code == 403
    assert message.startswith(
        f"connection to evil.test:{web_port} denied by the session's network policy"
    )
    assert "denied when asked" in message

    # Nobody answers: denied once the app's approval_timeout has passed.
    status, out = await fetch("slow.test")
    assert json.loads(out["stdout"])[0] == 403
    assert (await call("GET", "approvals"))[1] == []

    # The secret reaches the server but not the kernel; an echo of it is redacted.
    code = "import os\nprint(any('jx-rest' in v for v in os.environ.values()))"
    assert (await call("POST", "sessions", sid, "execute", body={"code": code}))[1][
        "stdout"
    ] == "False\n"
    status, out = await fetch("web.test", "/echo")
    assert "[secret redacted]" in out["stdout"]
    for listing in (await call("GET", "sessions"), await call("GET", "sessions", sid)):
        assert SECRET not in json.dumps(listing)
    notebook = root / model["notebook"]["path"]
    assert (await call("DELETE", "sessions", sid))[0] == 204
    assert SECRET not in notebook.read_text()
    assert SECRET[7:] not in notebook.read_text()
    assert len(seen) > 10


def _our_containers() -> int:
    from jupyter_exec.docker.reap import L_PID, LABEL

    client = connect()
    try:
        found = client.containers.list(
            ignore_removed=True,
            all=True,
            filters={"label": [f"{LABEL}=1", f"{L_PID}={os.getpid()}"]},
        )
        return len(found)
    finally:
        client.close()


@pytest.mark.docker
async def test_docker_forks_and_undo_keep_the_policy_and_end_with_their_session(
    call: Api, docker_kernelspec: str, web_port: int, root: Path, jp_fetch: Any
) -> None:
    before = _our_containers()
    network = {
        "allow": ["web.test", "127.0.0.1"],
        "secrets": {"web.test": {"Authorization": SECRET}},
    }
    status, model = await call(
        "POST",
        "sessions",
        body={"name": "box", "backend": "docker", "network": network, "undo_steps": 2},
    )
    assert status == 201, model
    sid = model["id"]
    first_kernel = model["kernel"]["id"]

    async def run(session_id: str, code: str) -> dict[str, Any]:
        status, out = await call("POST", "sessions", session_id, "execute", body={"code": code})
        assert status == 200, out
        return dict(out)

    await run(sid, FETCH)
    await run(sid, "x = 1")
    await run(sid, "x = 2")
    echo = f"print(fetch('https://web.test:{web_port}/echo'))"

    # A fork runs in the session's container, behind the same proxy: allowed, recorded, redacted.
    status, forks = await call("POST", "sessions", sid, "fork", body={})
    assert status == 201, forks
    fork = forks[0]
    assert fork["network"] == model["network"]
    out = await run(fork["id"], echo)
    assert out["stdout"].strip() == "[200, 'you sent [secret redacted]']"
    assert [c["decision"] for c in out["connections"]] == ["allowed"]
    await run(fork["id"], "x = 'fork'")
    status, error = await call("POST", "sessions", fork["id"], "restart")
    assert (status, error["error"]) == (409, "ForkError")
    assert "cannot be restarted" in error["message"]
    assert (await run(sid, "x"))["text"] == "2"

    # Undo: a kernel from the snapshot serves the session; the container's first kernel stays.
    status, undone = await call("POST", "sessions", sid, "undo", body={"n": 2})
    assert status == 200, undone
    assert (await run(sid, "x"))["text"] == "1"
    kernels = {k["id"] for k in json.loads((await jp_fetch("api", "kernels")).body)}
    assert {undone["kernel"]["id"], first_kernel, fork["kernel"]["id"]} <= kernels
    bound = {
        s["path"]: s["kernel"]["id"] for s in json.loads((await jp_fetch("api", "sessions")).body)
    }
    assert bound[model["notebook"]["path"]] == undone["kernel"]["id"] != first_kernel
    out = await run(sid, echo)
    assert out["stdout"].strip() == "[200, 'you sent [secret redacted]']"

    # The session ends: its Docker forks end with it, every kernel and the container go.
    assert (await call("DELETE", "sessions", sid))[0] == 204
    assert (await call("GET", "sessions", fork["id"]))[0] == 404
    kernels = {k["id"] for k in json.loads((await jp_fetch("api", "kernels")).body)}
    assert kernels.isdisjoint({undone["kernel"]["id"], first_kernel, fork["kernel"]["id"]})
    for _ in range(100):
        if _our_containers() == before:
            break
        await asyncio.sleep(0.1)
    assert _our_containers() == before
    for notebook in (model["notebook"]["path"], fork["notebook"]["path"]):
        text = (root / notebook).read_text()
        assert SECRET not in text
        assert SECRET[7:] not in text
