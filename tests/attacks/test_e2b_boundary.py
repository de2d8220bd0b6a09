"""Attacks on the E2B server's boundary, as a client holding less than it needs would make them.

The real E2B SDK makes the sandboxes and the signed file URLs; the attacker then
replays what it holds (a file URL's query, another sandbox's token, nothing) on
routes it does not open, sends bodies before any credential, sends malformed
JSON, and asks for sandboxes that never end. Each attack must be refused with a
4xx that says why, and the asset (the sandbox's kernel, its files) must be
untouched. Findings of issue 20: 4 (a signed file URL opening the whole
sandbox; a multipart upload writing where its parts say), 8 (the body buffered
before authentication) and 10 (bad input answering 500, a timeout of NaN or
Infinity, the API key in ``ps``, a taken port reported as an internal error).
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import API_KEY, Running

from jupyter_exec.e2b.auth import SMALL_BODY
from tests.attacks.raw import status_line

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def _query(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query))


def _envelope(message: dict[str, Any]) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


STREAM = {"Content-Type": "application/connect+json"}
RPC = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def standing_victim(api_server: Running) -> Iterator[Sandbox]:
    """One sandbox for the attacks that only aim at *a* sandbox (its id, its token) and then
    check that it still runs: one kernel per module rather than one per case. The attacks that
    write into a sandbox's home, make contexts in it or list its files take one of their own."""
    with pytest.MonkeyPatch.context() as env:  # the SDK's settings, as ``api_env`` sets them
        env.delenv("E2B_DEBUG", raising=False)
        env.setenv("E2B_API_URL", api_server.url)
        env.setenv("E2B_SANDBOX_URL", api_server.url)
        env.setenv("E2B_API_KEY", API_KEY)
        victim = Sandbox.create(timeout=3600)  # outlives the module's cases
        try:
            yield victim
        finally:
            victim.kill()


def _refused(answer: httpx.Response) -> str | None:
    if answer.status_code not in (401, 403):
        return f"{answer.status_code} {answer.text[:200]}"
    if not answer.json().get("message"):
        return f"{answer.status_code} without a reason"
    return None


def test_f4_upload_url_query_replayed_on_execute_process_and_filesystem(api_env: Running) -> None:
    victim = Sandbox.create()
    victim.run_code("state = 'kept'")
    victim.files.write("precious.txt", "do not touch")
    home = api_env.root / victim.sandbox_id
    upload = _query(victim.upload_url("precious.txt"))
    download = _query(victim.download_url("precious.txt"))
    assert upload["signature"]
    assert download["signature"]
    pwned = "open('/tmp/jx-attack-pwned', 'w').write('x'); open('pwned', 'w').write('x')"
    attempts: list[tuple[str, str, dict[str, str], bytes]] = [
        ("POST", "/execute", {}, json.dumps({"code": pwned}).encode()),
        ("POST", "/contexts", {}, b"{}"),
        ("GET", "/contexts", {}, b""),
        ("POST", "/process.Process/Start", STREAM,
         _envelope({"process": {"cmd": "/bin/sh", "args": ["-c", "touch pwned"]}})),
        ("POST", "/process.Process/List", RPC, b"{}"),
        ("POST", "/filesystem.Filesystem/ListDir", RPC, b'{"path": "/home/user"}'),
        ("POST", "/filesystem.Filesystem/Remove", RPC, b'{"path": "precious.txt"}'),
        ("POST", "/filesystem.Filesystem/Move", RPC,
         b'{"source": "precious.txt", "destination": "moved.txt"}'),
        ("GET", f"/sandboxes/{victim.sandbox_id}", {}, b""),
        ("DELETE", f"/sandboxes/{victim.sandbox_id}", {}, b""),
    ]  # fmt: skip
    problems = []
    with httpx.Client(base_url=api_env.url, timeout=60) as client:
        for query in (upload, download):
            for named in ({}, {"E2b-Sandbox-Id": victim.sandbox_id}):
                for method, path, headers, body in attempts:
                    answer = client.request(method, path, params=query, content=body,
                                            headers={**headers, **named})  # fmt: skip
                    why = _refused(answer)
                    if why:
                        problems.append(f"{method} {path} {sorted(named)}: {why}")
        # On the files route itself, a signature opens only its own path and operation.
        other_path = {**download, "path": "other.txt"}
        misuse = [
            ("GET", {**download, "path": "precious.txt.bak"}, b""),  # another path
            ("POST", download, b"overwritten"),  # a read URL used to write
            ("GET", upload, b""),  # a write URL used to read
            ("POST", {**upload, "path": "elsewhere.txt"}, b"x"),  # the write URL, another path
            ("POST", other_path, b"x"),
            ("GET", {**download, "signature_expiration": "1"}, b""),  # expired
        ]
        for method, query, body in misuse:
            octets = {"Content-Type": "application/octet-stream"}
            answer = client.request(method, "/files", params=query, content=body, headers=octets)
            why = _refused(answer)
            if why:
                problems.append(f"{method} /files {query.get('path')}: {why}")
        # The URLs still do what they were made for (the refusals are not a broken route).
        assert client.get("/files", params=download).content == b"do not touch"
    assert not problems, "\n".join(problems)
    assert not (home / "pwned").exists()
    assert not Path("/tmp/jx-attack-pwned").exists()
    assert (home / "precious.txt").read_text() == "do not touch"
    assert not (home / "moved.txt").exists()
    assert not (home / "elsewhere.txt").exists()
    assert victim.run_code("state").text == "kept"
    assert victim.is_running()
    victim.kill()


def test_f4_signed_multipart_upload_writes_only_its_signed_path(api_env: Running) -> None:
    victim = Sandbox.create()
    home = api_env.root / victim.sandbox_id
    url = victim.upload_url("target.txt")
    with httpx.Client(timeout=60) as client:
        for name in ("../../escaped.txt", "other.txt", "/home/user/other.txt"):
            answer = client.post(url, files={"file": (name, b"payload of " + name.encode())})
            assert answer.status_code == 200, answer.text
            assert [entry["path"] for entry in answer.json()] == ["/home/user/target.txt"]
            assert (home / "target.txt").read_bytes() == b"payload of " + name.encode()
        two = [("file", ("a.txt", b"a")), ("file", ("b.txt", b"b"))]
        answer = client.post(url, files=two)
        assert answer.status_code == 400, answer.text
        assert "'file' parts" in answer.json()["message"]
    assert sorted(p.name for p in home.iterdir() if p.suffix == ".txt") == ["target.txt"]
    assert not (api_env.root / "escaped.txt").exists()
    assert not (api_env.root.parent / "escaped.txt").exists()
    victim.kill()


def _rss() -> int:
    """This process's resident memory in bytes (the server runs in a thread of it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/execute", ""),
        ("/files?path=big.bin", "E2b-Sandbox-Id: {sid}\r\nX-Access-Token: wrong\r\n"),
        ("/sandboxes", "X-API-KEY: wrong\r\n"),
        ("/process.Process/Start", "E2b-Sandbox-Id: {sid}\r\n"),
        ("/no/such/route", ""),
    ],
)
def test_f8_a_stranger_body_is_refused_before_it_is_read(
    api_env: Running, standing_victim: Sandbox, path: str, headers: str
) -> None:
    victim = standing_victim
    host, port = urlsplit(api_env.url).hostname, urlsplit(api_env.url).port
    assert host
    assert port
    before = _rss()
    chunk = b"\0" * (1 << 20)
    sent = 0
    with socket.create_connection((host, port), timeout=30) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            + headers.format(sid=victim.sandbox_id)
            + f"Content-Type: application/octet-stream\r\nContent-Length: {1 << 40}\r\n\r\n"
        )
        sock.sendall(head.encode())
        status = status_line(sock)  # answered on the headers alone: no body was needed
        assert status.split()[1] in (b"401", b"404", b"413"), status
        try:  # the body that follows is not kept: the server hangs up on it
            for _ in range(256):
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
    assert sent < 256 * len(chunk), "the server read 256 MiB of a refused body"
    assert _rss() - before < 64 << 20, "memory grew with a refused body"
    assert victim.is_running()


def test_f8_an_admitted_body_over_its_route_limit_is_refused_unread(
    api_env: Running, standing_victim: Sandbox
) -> None:
    victim = standing_victim
    token = victim._envd_access_token
    assert token
    host, port = urlsplit(api_env.url).hostname, urlsplit(api_env.url).port
    assert host
    assert port
    for path, headers in (
        ("/contexts", f"E2b-Sandbox-Id: {victim.sandbox_id}\r\nX-Access-Token: {token}\r\n"),
        ("/sandboxes", f"X-API-KEY: {API_KEY}\r\n"),
    ):
        with socket.create_connection((host, port), timeout=30) as sock:
            length = f"Content-Length: {SMALL_BODY + 1}\r\n"
            head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}{length}\r\n"
            sock.sendall(head.encode())
            assert status_line(sock).split()[1] == b"413", path
    assert victim.run_code("1 + 1").text == "2"


def _malformed_bodies() -> list[bytes]:
    deep = b"[" * 100_000 + b"]" * 100_000
    return [
        b"null", b"[]", b"5", b'"text"', b"{oops", b"\xff\xfe", deep,
        b'{"a": ' + b"9" * 5000 + b"}", b'{"x": NaN}', b'{"x": Infinity}',
    ]  # fmt: skip


def _swapped(fields: list[str]) -> list[dict[str, Any]]:
    """Each field given each wrong type."""
    wrong: list[Any] = [None, True, -1, 10**30, 1.5, "abc", [], [1, "x"], {}, {"pid": "x"},
                        {"a": {"b": []}}]  # fmt: skip
    return [{name: value} for name in fields for value in wrong]


JSON_ROUTES: list[tuple[str, str, list[str], dict[str, str]]] = [
    ("POST", "/execute", ["code", "context_id", "language", "env_vars"], {}),
    ("POST", "/contexts", ["language", "cwd"], {}),
    ("POST", "/filesystem.Filesystem/Stat", ["path"], RPC),
    ("POST", "/filesystem.Filesystem/ListDir", ["path", "depth"], RPC),
    ("POST", "/filesystem.Filesystem/MakeDir", ["path"], RPC),
    ("POST", "/filesystem.Filesystem/Move", ["source", "destination"], RPC),
    ("POST", "/filesystem.Filesystem/Remove", ["path"], RPC),
    ("POST", "/process.Process/List", [], RPC),
    ("POST", "/process.Process/SendSignal", ["process", "signal"], RPC),
    ("POST", "/process.Process/SendInput", ["process", "input"], RPC),
    ("POST", "/process.Process/CloseStdin", ["process"], RPC),
    ("POST", "/process.Process/Connect", ["process"], STREAM),
    ("POST", "/process.Process/Start", ["process", "tag", "stdin"], STREAM),
    ("POST", "/sandboxes", ["templateID", "timeout", "metadata", "envVars"], {}),
    ("POST", "/sandboxes/{sid}/timeout", ["timeout"], {}),
    ("POST", "/sandboxes/{sid}/connect", ["timeout"], {}),
]


def test_f10_malformed_input_is_a_4xx_with_a_reason_never_a_500(api_env: Running) -> None:
    victim = Sandbox.create()
    decoy = Sandbox.create()  # the API's timeout routes: a well-formed swap (1.5) ends it
    token = victim._envd_access_token
    assert token
    auth = {"E2b-Sandbox-Id": victim.sandbox_id, "X-Access-Token": token, "X-API-KEY": API_KEY}
    problems: list[str] = []
    before = {s.sandbox_id for s in Sandbox.list().next_items()}
    with httpx.Client(base_url=api_env.url, timeout=120) as client:
        for method, path, fields, headers in JSON_ROUTES:
            path = path.format(sid=decoy.sandbox_id)
            bodies = _malformed_bodies() + [json.dumps(b).encode() for b in _swapped(fields)]
            bodies += [
                json.dumps({"process": {"cmd": "true", "args": "abc", "envs": []}}).encode(),
                json.dumps({"process": {"cmd": "true", "cwd": 5}}).encode(),
                json.dumps({"code": "1", "context_id": {"id": "default"}}).encode(),
            ]
            for body in bodies:
                content = body
                if headers is STREAM:
                    content = struct.pack(">BI", 0, len(body)) + body
                answer = client.request(method, path, content=content,
                                        headers={**auth, **headers})  # fmt: skip
                status = answer.status_code
                shown = f"{method} {path} {body[:60]!r}"
                if status >= 500 and status not in (501, 502):
                    problems.append(f"{shown}: {status} {answer.text[:200]}")
                elif status >= 400 and not answer.json().get("message"):
                    problems.append(f"{shown}: {status} without a reason")
                elif status == 200 and headers is STREAM and b'"internal"' in answer.content:
                    problems.append(f"{shown}: the stream ended with an internal error")
    assert not problems, f"{len(problems)} answers:\n" + "\n".join(problems[:40])
    # None of it made a sandbox, or broke the one there.
    created = {s.sandbox_id for s in Sandbox.list().next_items()} - before
    for sandbox_id in created | {decoy.sandbox_id}:  # well-formed creates among the swaps
        Sandbox.kill(sandbox_id)
    assert victim.run_code("'still up'").text == "still up"
    victim.kill()


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "-1", "1e300", "true",
                                   '"60"', "86401", "1" + "0" * 400])  # fmt: skip
def test_f10_a_sandbox_that_never_ends_is_refused(
    api_env: Running, standing_victim: Sandbox, value: str
) -> None:
    """A timeout the reaper can never reach (NaN, Infinity, past the maximum) is a 400, and
    the sandbox it was aimed at still ends when it was set to."""
    victim = standing_victim
    set_end = api_env.server.sandboxes.get(victim.sandbox_id).end
    assert set_end is not None
    before = {s.sandbox_id for s in Sandbox.list().next_items()}
    key = {"X-API-KEY": API_KEY, "Content-Type": "application/json"}
    body = f'{{"templateID": "code-interpreter-v1", "timeout": {value}}}'
    with httpx.Client(base_url=api_env.url, timeout=60) as client:
        for path in ("/sandboxes", f"/sandboxes/{victim.sandbox_id}/timeout",
                     f"/sandboxes/{victim.sandbox_id}/connect"):  # fmt: skip
            answer = client.post(path, content=body, headers=key)
            assert answer.status_code == 400, (path, answer.text)
            assert re.search("timeout|not a JSON number", answer.json()["message"]), answer.text
    assert {s.sandbox_id for s in Sandbox.list().next_items()} == before
    end = api_env.server.sandboxes.get(victim.sandbox_id).end
    assert end is not None
    assert end == set_end
    assert end <= time.time() + 3601
    assert victim.is_running()


def test_f10_the_longest_timeout_is_reaped_and_a_short_one_ends(api_env: Running) -> None:
    longest = Sandbox.create(timeout=int(api_env.server.config.max_sandbox_timeout))
    assert api_env.server.sandboxes.get(longest.sandbox_id).end is not None
    longest.kill()
    short = Sandbox.create(timeout=60)
    short.set_timeout(0)  # ends at the reaper's next look
    deadline = time.monotonic() + 60
    while short.is_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not short.is_running()


# -- the command line ------------------------------------------------------------------------


def _jupyter_exec(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "jupyter_exec", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _finish(process: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str]:
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        raise AssertionError(f"still running after {timeout} s: {err}") from None
    return process.returncode, err


@pytest.mark.parametrize("which", ["--port", "--envd-port", "mcp"])
def test_f10_a_taken_port_is_one_line_naming_it_and_the_option(tmp_path: Path, which: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        if which == "mcp":
            argv = ["mcp", "--transport", "http", "--port", str(port),
                    "--work-dir", str(tmp_path)]  # fmt: skip
            flag = "--port"
        else:
            ports = ["--port", str(port), "--envd-port", "0"]
            if which == "--envd-port":
                ports = ["--port", "0", "--envd-port", str(port)]
            argv = ["e2b", *ports, "--root-dir", str(tmp_path)]
            flag = which
        status, err = _finish(_jupyter_exec(*argv, env={"JUPYTER_EXEC_MCP_TOKEN": "t"}))
    lines = [line for line in err.splitlines() if not line.startswith("[jupyter-exec] token")]
    assert status == 2, err
    assert len(lines) == 1, err
    assert f"port {port}" in lines[0], err
    assert flag in lines[0], err
    assert "internal error" not in err
    assert "Traceback" not in err


def _started_e2b(process: subprocess.Popen[str]) -> tuple[int, list[str]]:
    """The port of a ``jupyter-exec e2b --port 0`` once it listens, and what it printed."""
    assert process.stderr is not None
    seen: list[str] = []
    while not any("API mode" in line for line in seen):
        line = process.stderr.readline()
        assert line, f"the server did not start: {''.join(seen)}"
        seen.append(line)
    match = re.search(r"ports \[(\d+)", "".join(seen))
    assert match, seen
    return int(match.group(1)), seen


@pytest.mark.parametrize("given", ["file", "env", "flag"])
def test_f10_the_api_key_stays_out_of_ps(tmp_path: Path, given: str) -> None:
    key = "attack-test-key-0123456789"
    argv = ["e2b", "--port", "0", "--envd-port", "0", "--no-debug",
            "--root-dir", str(tmp_path / "root")]  # fmt: skip
    env = {"E2B_API_KEY": "", "JUPYTER_EXEC_API_KEY": ""}
    if given == "file":
        (tmp_path / "key").write_text(key + "\n")
        argv += ["--api-key-file", str(tmp_path / "key")]
    elif given == "env":
        env["E2B_API_KEY"] = key
    else:
        argv += ["--api-key", key]
    process = _jupyter_exec(*argv, env=env)
    try:
        port, printed = _started_e2b(process)
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().replace(b"\0", b" ")
        url = f"http://127.0.0.1:{port}/sandboxes"
        assert httpx.get(url, headers={"X-API-KEY": key}, timeout=30).status_code == 200
        assert httpx.get(url, headers={"X-API-KEY": "wrong"}, timeout=30).status_code == 401
    finally:
        process.terminate()
        _status, rest = _finish(process)
    output = "".join(printed) + rest
    assert key not in output  # a key the person gave is never printed back
    if given == "flag":
        assert key.encode() in cmdline  # what the warning is about
        assert "--api-key shows the key to every user" in output
        assert "E2B_API_KEY" in output
        assert "--api-key-file" in output
    else:
        assert key.encode() not in cmdline
        assert "warning" not in output
