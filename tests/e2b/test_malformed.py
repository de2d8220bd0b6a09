"""Malformed requests get a 4xx that says what is wrong, never a 500, and the server goes on."""

from __future__ import annotations

import httpx
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import Running

SBX = {"E2b-Sandbox-Id": "debug_sandbox_id"}
RPC = {**SBX, "Content-Type": "application/json"}
STREAM = {**SBX, "Content-Type": "application/connect+json"}

CASES: list[tuple[str, str, dict[str, str], bytes]] = [
    ("POST", "/execute", SBX, b"not json"),
    ("POST", "/execute", SBX, b"[1, 2]"),
    ("POST", "/execute", SBX, b'{"code": 5}'),
    ("POST", "/execute", SBX, b'{"code": "1", "env_vars": {"A": 1}}'),
    ("POST", "/execute", SBX, b'{"code": "1", "env_vars": "A=1"}'),
    ("POST", "/execute", SBX, b'{"code": "1", "context_id": "nope"}'),
    ("POST", "/execute", SBX, b'{"code": "1", "language": "cobol"}'),
    ("POST", "/execute", {"E2b-Sandbox-Id": "../../etc"}, b'{"code": "1"}'),
    ("POST", "/execute", {"E2b-Sandbox-Id": "x" * 5000}, b'{"code": "1"}'),
    ("POST", "/contexts", SBX, b'{"cwd": "/home/user/\\u0000"}'),
    ("POST", "/contexts", SBX, b'{"cwd": "/home/user/../.."}'),
    ("DELETE", "/contexts/unknown", SBX, b""),
    ("POST", "/contexts/unknown/restart", SBX, b""),
    ("GET", "/files?path=", SBX, b""),
    ("GET", "/files?path=%2Fproc%2Fself%2Fenviron", SBX, b""),
    ("GET", "/files?path=..%2F..%2Fetc%2Fpasswd", SBX, b""),
    ("POST", "/files", {**SBX, "Content-Type": "application/octet-stream"}, b"data"),
    (
        "POST",
        "/files?path=x",
        {**SBX, "Content-Type": "multipart/form-data; boundary=zz"},
        b"--zz--",
    ),
    ("POST", "/filesystem.Filesystem/Stat", RPC, b"{oops"),
    ("POST", "/filesystem.Filesystem/Stat", RPC, b'{"path": "/etc"}'),
    ("POST", "/filesystem.Filesystem/ListDir", RPC, b'{"path": "a/../../.."}'),
    ("POST", "/filesystem.Filesystem/Remove", RPC, b'{"path": "/home/user"}'),
    ("POST", "/filesystem.Filesystem/Move", RPC, b'{"source": "nope", "destination": "x"}'),
    ("POST", "/filesystem.Filesystem/WatchDir", STREAM, b"\x00\x00\x00\x00\x02{}"),
    ("POST", "/filesystem.Filesystem/NoSuch", RPC, b"{}"),
    ("POST", "/process.Process/Start", STREAM, b"\x00\x00\x00"),
    (
        "POST",
        "/process.Process/SendSignal",
        RPC,
        b'{"process": {"pid": 1}, "signal": "SIGNAL_SIGKILL"}',
    ),
    (
        "POST",
        "/process.Process/SendInput",
        RPC,
        b'{"process": {"pid": 1}, "input": {"stdin": "@@"}}',
    ),
    ("POST", "/process.Process/Connect", STREAM, b"\x00\x00\x00\x00\x02{}"),
    ("GET", "/sandboxes/nope", {"X-API-KEY": "wrong"}, b""),
    ("POST", "/sandboxes", {"X-API-KEY": "wrong"}, b"{}"),
]


def test_malformed_requests_are_refused_cleanly(debug_env: Running) -> None:
    statuses = []
    with httpx.Client(base_url=debug_env.url, timeout=60) as client:
        for method, path, headers, body in CASES:
            answer = client.request(method, path, headers=headers, content=body)
            statuses.append((path, answer.status_code))
            if answer.status_code != 200:  # Connect streams carry their error in the body
                assert answer.json()["message"], (path, answer.text)
    assert all(status < 500 or status in (501, 502) for _, status in statuses), statuses
    assert Sandbox.create().run_code("'still up'").text == "still up"
