"""Attacks on ``jupyter-exec gateway``: a client without the token, a listener elsewhere, a leak.

The gateway is the real command on the loopback cluster (tests/cluster_hosts.py),
with one kernel of the rightful user running. The attacker is any local process
or user that can reach the gateway's port: it knows the routes but not the
token; it may try the token's usual places with wrong values, open the
kernel's websocket directly, ask for another kernelspec (one that would run on
the gateway's own machine), or read the gateway's log and a kernel's
environment hoping to find the token. Each attack must fail with a 401/403 and
leave the kernel and the gateway as they were.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from jupyter_exec import Session
from tests.cluster.conftest import loopback_cluster  # noqa: F401  (the cluster's fixture)
from tests.cluster_gateway import RunningGateway
from tests.cluster_hosts import Cluster


@pytest.fixture(scope="module")
def victim(gateway: RunningGateway, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """The rightful user's session, with state an attacker would like to reach."""
    work = tmp_path_factory.mktemp("victim")
    with Session(backend="remote", url=gateway.url, token=gateway.token, work_dir=work) as s:
        s.execute("secret = 'the victim state'")
        yield s


def _call(
    gateway: RunningGateway, method: str, path: str, headers: dict[str, str], body: bytes | None
) -> tuple[int, str]:
    request = urllib.request.Request(gateway.url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode("utf-8", "replace")


def _owner(gateway: RunningGateway) -> dict[str, str]:
    return {"Authorization": f"token {gateway.token}"}


def _kernel_ids(gateway: RunningGateway) -> list[str]:
    status, body = _call(gateway, "GET", "/api/kernels", _owner(gateway), None)
    assert status == 200, body
    return sorted(k["id"] for k in json.loads(body))


def _server(gateway: RunningGateway) -> psutil.Process:
    """The gateway's server process (the command's child)."""
    (server,) = psutil.Process(gateway.process.pid).children()
    return server


def test_every_gateway_route_refuses_a_client_without_the_token_or_with_a_wrong_one(
    gateway: RunningGateway, victim: Session
) -> None:
    kernel_id = victim.kernel_id
    assert kernel_id
    before = _kernel_ids(gateway)
    routes = [
        ("GET", "/api", None),
        ("GET", "/api/kernelspecs", None),
        ("GET", "/api/kernelspecs/python3", None),
        ("GET", "/kernelspecs/python3/kernel.json", None),
        ("GET", "/api/kernels", None),
        ("GET", f"/api/kernels/{kernel_id}", None),
        ("POST", "/api/kernels", b"{}"),
        ("POST", f"/api/kernels/{kernel_id}/interrupt", b""),
        ("POST", f"/api/kernels/{kernel_id}/restart", b""),
        ("DELETE", f"/api/kernels/{kernel_id}", None),
        ("GET", "/api/sessions", None),
        ("POST", "/api/sessions", b'{"path": "x", "type": "notebook", "kernel": {}}'),
    ]
    forged = [
        ("no token", {}, ""),
        ("a wrong token", {"Authorization": "token not-the-token"}, ""),
        ("a wrong token in the URL", {}, "?token=not-the-token"),
        ("the token's prefix", {"Authorization": f"token {gateway.token[:8]}"}, ""),
        ("another scheme", {"Authorization": f"Bearer {gateway.token}x"}, ""),
    ]
    for method, path, body in routes:
        for what, headers, query in forged:
            status, text = _call(gateway, method, path + query, headers, body)
            assert status in (401, 403), (method, path, what, status, text)
    # The victim's kernel is untouched (not deleted, restarted or interrupted), none was added.
    assert _kernel_ids(gateway) == before
    assert victim.execute("secret").text == "'the victim state'"


def test_the_public_api_description_holds_nothing_of_this_gateway(
    gateway: RunningGateway,
    victim: Session,
    loopback_cluster: Cluster,  # noqa: F811
) -> None:
    # Kernel Gateway serves its static API description without a token; it is the
    # only route that answers, and it must not tell an attacker about this gateway.
    for path in ("/api/swagger.yaml", "/api/swagger.json"):
        status, text = _call(gateway, "GET", path, {}, None)
        assert status == 200
        assert gateway.token not in text
        assert victim.kernel_id not in text
        for host in loopback_cluster.hosts:
            assert host not in text
        assert str(loopback_cluster.remote_dir) not in text


def test_the_kernel_websocket_refuses_a_client_without_the_token(
    gateway: RunningGateway, victim: Session
) -> None:
    ws_url = gateway.url.replace("http://", "ws://") + f"/api/kernels/{victim.kernel_id}/channels"

    async def connect(url: str, headers: dict[str, str]) -> int:
        try:
            conn = await websocket_connect(
                HTTPRequest(url, headers=headers, connect_timeout=30, request_timeout=60)
            )
        except HTTPClientError as exc:
            return exc.code
        conn.close()
        return 101

    async def attempts() -> list[int]:
        return [
            await connect(ws_url, {}),
            await connect(ws_url, {"Authorization": "token not-the-token"}),
            await connect(ws_url + "?token=not-the-token", {}),
            await connect(ws_url, _owner(gateway)),  # the rightful client gets in
        ]

    no_token, wrong, wrong_in_url, owner = asyncio.run(attempts())
    assert no_token in (401, 403)
    assert wrong in (401, 403)
    assert wrong_in_url in (401, 403)
    assert owner == 101
    assert victim.execute("secret").text == "'the victim state'"


def test_the_gateway_and_its_response_port_listen_on_loopback_only(
    gateway: RunningGateway,
    victim: Session,
    loopback_cluster: Cluster,  # noqa: F811
) -> None:
    assert victim.kernel_id  # a kernel has started: the response port is open now
    listening = [
        c.laddr for c in _server(gateway).net_connections("inet") if c.status == psutil.CONN_LISTEN
    ]
    assert len(listening) >= 2, listening  # the HTTP port and the response port
    for address in listening:
        assert address.ip == "127.0.0.1", listening
    # The kernel's five ports and its launcher's listener are on its host's address; nothing
    # of the kernel listens on every interface. (ipykernel also opens one socket of its own on
    # 127.0.0.1, which only that host can reach.)
    kernel_listening = [
        c.laddr
        for p in loopback_cluster.kernel_processes(victim.kernel_id)
        for c in p.net_connections("inet")
        if c.status == psutil.CONN_LISTEN
    ]
    on_host = [a for a in kernel_listening if a.ip in loopback_cluster.hosts]
    assert len({a.ip for a in on_host}) == 1, kernel_listening
    assert len(on_host) >= 6, kernel_listening
    for address in kernel_listening:
        assert ipaddress.ip_address(address.ip).is_loopback, kernel_listening


def test_the_token_is_not_in_the_gateway_log_nor_in_a_kernel_environment(
    gateway: RunningGateway,
    victim: Session,
    loopback_cluster: Cluster,  # noqa: F811
) -> None:
    # A client that puts the right token in the URL (as a browser's websocket must): the
    # gateway logs the request, never the token.
    status, _ = _call(gateway, "GET", f"/api/kernels?token={gateway.token}", {}, None)
    assert status == 200
    deadline = time.monotonic() + 30  # the server logs a request after answering it
    while "GET /api/kernels?token=[token]" not in gateway.log():  # logged, scrubbed
        assert time.monotonic() < deadline, gateway.log()[-3000:]
        time.sleep(0.05)
    assert gateway.token not in gateway.log()
    assert gateway.printed().count(gateway.token) == 1  # printed once, for the user
    # Nor can the kernel's code find it: not in its environment, nor its launcher's.
    found = victim.execute(
        "import os; [k for k, v in os.environ.items() if "
        f"{gateway.token!r} in v or {gateway.token!r} in k]"
    )
    assert found.text == "[]"
    processes = loopback_cluster.kernel_processes(victim.kernel_id)
    assert processes
    for process in processes:
        assert all(gateway.token not in v for v in process.environ().values())
        assert gateway.token not in " ".join(process.cmdline())
    # Nor is it left on disk in the gateway's private dir.
    server = _server(gateway)
    config = Path(server.cmdline()[-1].split("=", 1)[1])
    private = config.parent.parent
    assert not (private / "token").exists()
    for path in private.rglob("*"):
        if path.is_file():
            assert gateway.token not in path.read_text(encoding="utf-8", errors="replace"), path


def test_a_client_cannot_start_a_kernelspec_other_than_the_cluster_one(
    gateway: RunningGateway, victim: Session
) -> None:
    before = _kernel_ids(gateway)
    server = _server(gateway)
    children = {p.pid for p in server.children(recursive=True)}
    # ipykernel's built-in spec jupyter_client falls back to, a spec of this venv, made-up ones
    for name in ("python2", "jupyter-exec-docker", "bash", "../python3", "python3/../x"):
        for path, body in (
            ("/api/kernels", {"name": name}),
            ("/api/sessions", {"path": "a", "type": "notebook", "kernel": {"name": name}}),
        ):
            status, text = _call(gateway, "POST", path, _owner(gateway), json.dumps(body).encode())
            refused = f"this gateway runs only the kernelspec 'python3', not {name!r}"
            if path == "/api/kernels":
                assert status == 403, (name, status, text)
            else:
                # Kernel Gateway's sessions route wraps every refusal in a 500; the reason is ours.
                assert status == 500, (name, status, text)
            assert refused in json.loads(text)["reason" if status == 403 else "message"]
    assert _kernel_ids(gateway) == before
    # Nothing was started on the gateway's own machine either.
    assert {p.pid for p in server.children(recursive=True)} <= children
    assert victim.execute("secret").text == "'the victim state'"


def test_a_client_naming_another_kernel_username_or_a_host_outside_the_list_is_refused(
    gateway: RunningGateway,
    victim: Session,
    loopback_cluster: Cluster,  # noqa: F811
) -> None:
    before = _kernel_ids(gateway)
    processes = {p.pid for p in loopback_cluster.kernel_processes()}
    attempts = [
        ({"KERNEL_USERNAME": "mallory"}, 403, "'mallory' is not in the set of users authorized"),
        ({"KERNEL_REMOTE_HOST": "127.0.0.1"}, 400, "127.0.0.1"),
        ({"KERNEL_REMOTE_HOST": "127.0.0.9"}, 400, "127.0.0.9"),
    ]
    for env, status, words in attempts:
        code, text = _call(
            gateway, "POST", "/api/kernels", _owner(gateway), json.dumps({"env": env}).encode()
        )
        assert code == status, (env, code, text)
        answer = json.loads(text)
        assert words in answer["reason"], answer
        assert "Traceback" not in text  # the refusal, not the server's insides
    assert _kernel_ids(gateway) == before
    assert {p.pid for p in loopback_cluster.kernel_processes()} == processes
    assert victim.execute("secret").text == "'the victim state'"
