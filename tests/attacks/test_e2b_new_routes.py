"""Attacks on the E2B routes served since issue 34 - terminals, folder watches, metrics - made
as a client holding another sandbox's token, or a path that leaves its own sandbox.

Each attack must be refused (4xx, or a Connect stream that ends in an error)
and the asset untouched: the victim's terminal never runs what the attacker
typed (a file it would have made is not there, and typing into it still
works for its owner), a watch never lists or reports a file outside the
sandbox, and a sandbox's token never reads any sandbox's metrics.
"""

from __future__ import annotations

import base64
import json
import struct
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b import Sandbox as BaseSandbox
from e2b.sandbox.commands.command_handle import PtySize
from e2b_server_helpers import API_KEY, Running

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

RPC = {"Content-Type": "application/json"}
STREAM = {"Content-Type": "application/connect+json"}


def _as(sandbox: BaseSandbox, sandbox_id: str | None = None) -> dict[str, str]:
    """Headers that carry ``sandbox``'s token, naming ``sandbox_id`` (default: its own)."""
    return {"E2b-Sandbox-Id": sandbox_id or sandbox.sandbox_id,
            "X-Access-Token": str(sandbox._envd_access_token)}  # fmt: skip


def _envelope(message: dict[str, Any]) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


def _stream_error(answer: httpx.Response) -> str | None:
    """The error a Connect stream ended with (None: it ended without one, or is no stream)."""
    body, found = answer.content, None
    while len(body) >= 5:
        flags, size = struct.unpack(">BI", body[:5])
        message = json.loads(body[5 : 5 + size] or b"{}")
        if flags & 2 and message.get("error"):
            found = str(message["error"].get("message"))
        body = body[5 + size :]
    return found


def _until_seen(handle: Any, name: str) -> list[Any]:
    """A watcher's events, collected until one names ``name`` (a minute at most)."""
    seen: list[Any] = []
    deadline = time.monotonic() + 60
    while name not in [e.name for e in seen]:
        assert time.monotonic() < deadline, seen
        seen += handle.get_new_events()
        time.sleep(0.05)
    return seen


def test_typing_into_another_sandboxs_terminal_is_refused(api_env: Running) -> None:
    victim, attacker = BaseSandbox.create(), BaseSandbox.create()
    terminal = victim.pty.create(PtySize(cols=80, rows=24))
    keys = base64.b64encode(b"touch pwned-by-attacker\n").decode()
    request = {"process": {"pid": terminal.pid}, "input": {"pty": keys}}
    resize = {"process": {"pid": terminal.pid}, "pty": {"size": {"cols": 1, "rows": 1}}}
    with httpx.Client(base_url=api_env.url, timeout=60) as client:
        # the victim's id with the attacker's token: not the victim's token
        for path, body in (
            ("SendInput", request),
            ("Update", resize),
            ("SendSignal", {"process": {"pid": terminal.pid}, "signal": "SIGNAL_SIGKILL"}),
        ):
            answer = client.post(f"/process.Process/{path}", json=body,
                                 headers={**RPC, **_as(attacker, victim.sandbox_id)})  # fmt: skip
            assert answer.status_code == 401, (path, answer.text)
            # its own id and token, the victim's pid: no such process in its sandbox
            answer = client.post(f"/process.Process/{path}", json=body,
                                 headers={**RPC, **_as(attacker)})  # fmt: skip
            assert answer.status_code == 404, (path, answer.text)
        answer = client.post("/process.Process/Connect",
                             content=_envelope({"process": {"pid": terminal.pid}}),
                             headers={**STREAM, **_as(attacker)})  # fmt: skip
        assert _stream_error(answer) is not None  # the victim's output is not followed

    output: list[bytes] = []
    victim.pty.send_stdin(terminal.pid, b"tput cols; ls; exit\n")
    assert terminal.wait(on_pty=output.append).exit_code == 0
    shown = b"".join(output)
    assert b"80" in shown  # never resized
    assert not victim.files.exists("pwned-by-attacker")
    assert not attacker.files.exists("pwned-by-attacker")
    victim.kill()
    attacker.kill()


OUTSIDE = ["/etc", "/home/user/../..", "../", "/proc/self", "/home/user/link-out"]


def test_watching_a_path_outside_the_sandbox_is_refused(api_env: Running, tmp_path: Path) -> None:
    secret = tmp_path / "outside"
    secret.mkdir()
    sandbox = BaseSandbox.create()
    sandbox.commands.run(f"ln -s {secret} link-out")  # planted by code in the sandbox
    with httpx.Client(base_url=api_env.url, timeout=60) as client:
        for path in OUTSIDE:
            made = client.post("/filesystem.Filesystem/CreateWatcher", json={"path": path},
                               headers={**RPC, **_as(sandbox)})  # fmt: skip
            assert 400 <= made.status_code < 500, (path, made.text)
            assert made.json()["message"]
            streamed = client.post("/filesystem.Filesystem/WatchDir",
                                   content=_envelope({"path": path, "recursive": True}),
                                   headers={**STREAM, **_as(sandbox)})  # fmt: skip
            assert _stream_error(streamed) is not None, (path, streamed.content[:200])
            assert b'"filesystem"' not in streamed.content
    (secret / "new-outside.txt").write_text("x")
    handle = sandbox.files.watch_dir(".", recursive=True)  # its own home: the link not entered
    (secret / "later.txt").write_text("y")
    sandbox.files.write("inside.txt", "z")
    seen = _until_seen(handle, "inside.txt")
    assert not [e for e in seen if "later" in e.name or "outside" in e.name]
    handle.stop()
    sandbox.kill()


def test_another_sandboxs_watcher_cannot_be_read_or_removed(api_env: Running) -> None:
    victim, attacker = BaseSandbox.create(), BaseSandbox.create()
    handle = victim.files.watch_dir(".")
    watcher_id = handle._watcher_id
    with httpx.Client(base_url=api_env.url, timeout=60) as client:
        for method in ("GetWatcherEvents", "RemoveWatcher"):
            answer = client.post(f"/filesystem.Filesystem/{method}", json={"watcherId": watcher_id},
                                 headers={**RPC, **_as(attacker)})  # fmt: skip
            assert answer.status_code == 404, (method, answer.text)
            answer = client.post(f"/filesystem.Filesystem/{method}", json={"watcherId": watcher_id},
                                 headers={**RPC, **_as(attacker, victim.sandbox_id)})  # fmt: skip
            assert answer.status_code == 401, (method, answer.text)
    victim.files.write("still-watched.txt", "x")
    _until_seen(handle, "still-watched.txt")  # the victim's watcher still runs, events kept
    handle.stop()
    victim.kill()
    attacker.kill()


def test_a_sandbox_token_reads_no_sandboxs_metrics(api_env: Running) -> None:
    victim, attacker = BaseSandbox.create(), BaseSandbox.create()
    with httpx.Client(base_url=api_env.url, timeout=60) as client:
        for target in (victim.sandbox_id, attacker.sandbox_id):
            answer = client.get(f"/sandboxes/{target}/metrics", headers=_as(attacker))
            assert answer.status_code == 401, answer.text
            assert "API key" in answer.json()["message"]
        answer = client.get(f"/sandboxes/{victim.sandbox_id}/metrics",
                            headers={"X-API-KEY": "e2b_" + "0" * 40})  # fmt: skip
        assert answer.status_code == 401
        answer = client.get(f"/sandboxes/{victim.sandbox_id}/metrics",
                            headers={"X-API-KEY": API_KEY})  # fmt: skip
        assert answer.status_code == 200
    assert victim.is_running()
    victim.kill()
    attacker.kill()
