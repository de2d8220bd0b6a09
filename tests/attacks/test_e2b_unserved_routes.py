"""Attacks on the E2B server's unserved routes: probing paths it has no handler for.

An attacker without the API key or any sandbox's token probes paths the server
does not serve (made-up ones, and E2B's own ``refreshes``, ``logs``,
``templates``...): to learn what is served, to reach a victim's sandbox
through a route that skips the credential, or to make the server read and
keep a huge body. Every such request must be refused for its missing
credential first (401, saying nothing of the routes), a body sent to a path
that is not served is never read, whoever sends it, and the victim's sandbox
keeps running with its state.
"""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import API_KEY, Running

from tests.attacks.raw import status_line

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

PROBES = (
    "/no/such/route",
    "/sandboxes/{sid}/refreshes",
    "/sandboxes/{sid}/network",
    "/sandboxes/{sid}/logs",
    "/templates/base/builds/x",
    "/admin",
)
"""Paths the server does not serve: invented ones, and E2B's routes it lacks."""


def _rss() -> int:
    """This process's resident memory in bytes (the server runs in a thread of it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _victim() -> Sandbox:
    victim = Sandbox.create()
    victim.run_code("secret = 'the victim keeps this'")
    return victim


def _untouched(victim: Sandbox) -> None:
    assert victim.is_running()
    assert victim.run_code("secret").text == "the victim keeps this"


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE"])
def test_without_a_credential_every_unserved_path_is_401_and_names_no_route(
    api_env: Running, method: str
) -> None:
    victim = _victim()
    try:
        for probe in PROBES:
            path = probe.format(sid=victim.sandbox_id)
            guessed = {"E2b-Sandbox-Id": victim.sandbox_id, "X-Access-Token": "guess"}
            for headers in ({}, {"X-API-KEY": "guess"}, guessed):
                answer = httpx.request(method, api_env.url + path, headers=headers, content=b"{}")
                assert answer.status_code == 401, (method, path, headers, answer.text[:200])
                message = answer.json()["message"]
                assert message
                assert "/execute" not in message
                assert "not served" not in message
                assert "not supported" not in message
        _untouched(victim)
    finally:
        victim.kill()


def _huge_body(url: str, path: str, headers: str) -> tuple[bytes, int]:
    """Announce a 1 TiB body on ``path``, then send up to 256 MiB of it.

    The status line the server answered, and how many bytes it let us send
    before it hung up.
    """
    host, port = urlsplit(url).hostname, urlsplit(url).port
    assert host
    assert port
    chunk = b"\0" * (1 << 20)
    sent = 0
    with socket.create_connection((host, port), timeout=30) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}"
            f"Content-Type: application/json\r\nContent-Length: {1 << 40}\r\n\r\n"
        )
        sock.sendall(head.encode())
        status = status_line(sock)  # answered on the headers alone
        try:
            for _ in range(256):
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
    return status, sent


@pytest.mark.parametrize("credential", ["none", "api key", "sandbox token"])
def test_a_huge_body_to_an_unserved_path_is_answered_from_the_headers_and_never_read(
    api_env: Running, credential: str
) -> None:
    victim = _victim()
    token = victim._envd_access_token
    assert token
    headers = {
        "none": "",
        "api key": f"X-API-KEY: {API_KEY}\r\n",
        "sandbox token": f"E2b-Sandbox-Id: {victim.sandbox_id}\r\nX-Access-Token: {token}\r\n",
    }[credential]
    expected = {"none": {b"401"}, "api key": {b"404", b"501"}, "sandbox token": {b"404", b"501"}}
    before = _rss()
    try:
        for probe in PROBES:
            path = probe.format(sid=victim.sandbox_id)
            status, sent = _huge_body(api_env.url, path, headers)
            assert status.split()[1:2], (path, status)
            assert status.split()[1] in expected[credential], (path, status)
            assert sent < 256 << 20, f"the server read 256 MiB of a body sent to {path}"
        assert _rss() - before < 64 << 20, "memory grew with bodies sent to unserved paths"
        _untouched(victim)
    finally:
        victim.kill()


def test_the_api_key_alone_does_not_make_an_unserved_path_act_on_a_sandbox(
    api_env: Running,
) -> None:
    """With the key, the victim's unserved routes are refused as unsupported: nothing
    happens."""
    victim = _victim()
    try:
        for route in ("refreshes", "network", "logs"):
            answer = httpx.post(f"{api_env.url}/sandboxes/{victim.sandbox_id}/{route}",
                                headers={"X-API-KEY": API_KEY}, json={"count": 50})  # fmt: skip
            assert answer.status_code == 501, (route, answer.text[:200])
        listed = httpx.get(f"{api_env.url}/sandboxes", headers={"X-API-KEY": API_KEY}).json()
        assert [s["sandboxID"] for s in listed if s["sandboxID"] == victim.sandbox_id] == [
            victim.sandbox_id
        ]
        assert len(listed) < 50, "a refused route made sandboxes"
        _untouched(victim)
    finally:
        victim.kill()
