"""Many sandboxes through E2B_API_URL: tokens, list, connect, kill; Host and Origin checks."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from e2b import AuthenticationException, SandboxQuery, TimeoutException
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import API_KEY, Running, run_server

from jupyter_exec.e2b import E2BConfig, E2BServer
from jupyter_exec.exceptions import InvalidArgument


def _raw(running: Running, method: str, path: str, **kwargs: object) -> httpx.Response:
    return httpx.request(method, running.url + path, **kwargs)  # type: ignore[arg-type]


def test_create_run_and_per_sandbox_tokens(api_env: Running) -> None:
    a = Sandbox.create(metadata={"owner": "a"})
    b = Sandbox.create(metadata={"owner": "b"})
    assert a.sandbox_id != b.sandbox_id
    assert a.sandbox_id.startswith("sbx-")
    a.run_code("who = 'a'")
    b.run_code("who = 'b'")
    assert a.run_code("who").text == "a"
    assert b.run_code("who").text == "b"
    b.files.write("private.txt", "b's secret")
    token_a = a._envd_access_token
    assert token_a
    assert token_a != b._envd_access_token
    as_a = {"E2b-Sandbox-Id": b.sandbox_id, "X-Access-Token": token_a}
    for headers in (as_a, {"E2b-Sandbox-Id": b.sandbox_id}):
        got = _raw(api_env, "GET", "/files", params={"path": "private.txt"}, headers=headers)
        assert got.status_code == 401
        assert "private" not in got.text
        ran = _raw(api_env, "POST", "/execute", json={"code": "who"}, headers=headers)
        assert ran.status_code == 401
    forged = b.download_url("private.txt").replace("signature=v1_", "signature=v1_x")
    assert httpx.get(forged).status_code == 401
    assert httpx.get(b.download_url("private.txt")).content == b"b's secret"
    for sandbox in (a, b):
        assert sandbox.kill()


def test_list_connect_and_info(api_env: Running) -> None:
    sandbox = Sandbox.create(metadata={"purpose": "listing"})
    sandbox.run_code("remembered = 7")
    listed = Sandbox.list(query=SandboxQuery(metadata={"purpose": "listing"})).next_items()
    assert [s.sandbox_id for s in listed] == [sandbox.sandbox_id]
    assert listed[0].metadata == {"purpose": "listing"}
    again = Sandbox.connect(sandbox.sandbox_id)
    assert again.run_code("remembered").text == "7"
    assert Sandbox.get_info(sandbox.sandbox_id).sandbox_id == sandbox.sandbox_id
    assert sandbox.kill()


def test_kill_ends_the_sandbox(api_env: Running) -> None:
    sandbox = Sandbox.create()
    sandbox.run_code("1")
    assert sandbox.is_running()
    assert sandbox.kill()
    assert not sandbox.is_running()
    assert not Sandbox.kill(sandbox.sandbox_id)  # already gone
    with pytest.raises(Exception, match="was not found"):
        sandbox.run_code("1")
    assert sandbox.sandbox_id not in [s.sandbox_id for s in Sandbox.list().next_items()]


def test_sandbox_timeout_ends_it(api_env: Running) -> None:
    sandbox = Sandbox.create(timeout=1)
    deadline = time.monotonic() + 60
    while sandbox.is_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not sandbox.is_running()


def test_api_needs_the_key(api_env: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("E2B_API_KEY", "wrong")
    with pytest.raises(AuthenticationException):
        Sandbox.create()
    assert _raw(api_env, "GET", "/v2/sandboxes").status_code == 401
    assert _raw(api_env, "GET", "/v2/sandboxes", headers={"X-API-KEY": API_KEY}).status_code == 200


def test_debug_sandbox_only_in_debug_mode(api_env: Running) -> None:
    headers = {"E2b-Sandbox-Id": "debug_sandbox_id"}
    answer = _raw(api_env, "POST", "/execute", json={"code": "1"}, headers=headers)
    assert answer.status_code == 502
    assert "was not found" in answer.text


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.example"},
        {"Origin": "http://evil.example"},
        {"Host": "127.0.0.1.evil.example"},
    ],
)
def test_foreign_host_or_origin_is_refused(debug_server: Running, headers: dict[str, str]) -> None:
    answer = _raw(debug_server, "POST", "/execute", json={"code": "1"},
                  headers={"E2b-Sandbox-Id": "debug_sandbox_id", **headers})  # fmt: skip
    assert answer.status_code == 403


def test_debug_mode_is_loopback_only(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="loopback"):
        E2BServer(E2BConfig(root_dir=tmp_path, host="0.0.0.0", debug=True, api_key="k"))
    with pytest.raises(InvalidArgument, match="API key"):
        E2BServer(E2BConfig(root_dir=tmp_path, host="0.0.0.0"))


def test_sandbox_envs_reach_code_and_commands(api_env: Running) -> None:
    sandbox = Sandbox.create(envs={"SANDBOX_VAR": "from-create"})
    assert sandbox.run_code("import os; os.environ['SANDBOX_VAR']").text == "from-create"
    assert sandbox.commands.run("echo $SANDBOX_VAR").stdout == "from-create\n"
    assert sandbox.kill()


def test_create_takes_a_warm_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = E2BConfig(root_dir=tmp_path / "pooled", ports=(0,), api_key=API_KEY, pool_size=1)
    for running in run_server(config):
        running.call(running.server.manager.wait_for_pools())
        monkeypatch.delenv("E2B_DEBUG", raising=False)
        monkeypatch.setenv("E2B_API_URL", running.url)
        monkeypatch.setenv("E2B_SANDBOX_URL", running.url)
        monkeypatch.setenv("E2B_API_KEY", API_KEY)
        sandbox = Sandbox.create()
        infos = running.server.manager.list()
        assert [(i.name, i.from_pool) for i in infos] == [(sandbox.sandbox_id, True)]
        assert sandbox.run_code("1 + 1").text == "2"


def test_set_timeout_moves_the_end(api_env: Running) -> None:
    sandbox = Sandbox.create(timeout=3600)
    before = Sandbox.get_info(sandbox.sandbox_id).end_at
    sandbox.set_timeout(1)
    assert Sandbox.get_info(sandbox.sandbox_id).end_at < before
    deadline = time.monotonic() + 60
    while sandbox.is_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not sandbox.is_running()


def test_kill_during_run_code_says_killed(api_env: Running) -> None:
    sandbox = Sandbox.create()
    sandbox.run_code("1")
    failure: list[BaseException] = []

    def run() -> None:
        try:
            sandbox.run_code("import time; time.sleep(300)", timeout=300)
        except BaseException as exc:
            failure.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    deadline = time.monotonic() + 60
    while not any(i.busy for i in api_env.server.manager.list()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert Sandbox.kill(sandbox.sandbox_id)
    runner.join(60)
    assert len(failure) == 1
    assert isinstance(failure[0], TimeoutException)
    assert "killed" in str(failure[0])


def test_the_servers_key_never_reaches_a_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key the server was started with (``E2B_API_KEY``) stays out of a local sandbox's
    kernels and commands, which would otherwise inherit this process's environment."""
    monkeypatch.setenv("E2B_API_KEY", API_KEY)
    for running in run_server(E2BConfig(root_dir=tmp_path, ports=(0,), debug=True,
                                        api_key=API_KEY)):  # fmt: skip
        monkeypatch.setenv("E2B_DEBUG", "true")
        monkeypatch.setenv("E2B_SANDBOX_URL", running.url)
        sandbox = Sandbox.create()
        seen = sandbox.run_code("import os; os.environ.get('E2B_API_KEY', 'absent')")
        assert seen.text == "absent"
        context = sandbox.create_code_context()
        assert sandbox.run_code("import os; 'E2B_API_KEY' in os.environ", context=context).text == (
            "False"
        )
        assert sandbox.commands.run("echo ${E2B_API_KEY:-absent}").stdout == "absent\n"
        assert sandbox.run_code("import os; os.environ['PATH']").text  # the rest is inherited
