"""The server's API key: made in E2B's form (``e2b_`` and 40 hex digits) when none is given, and
any key given taken as it is, the documented ``my-key`` included, by both SDKs.

Each test starts ``jupyter-exec e2b`` as a user does, reads the key it prints,
and drives it with the Python SDK and, through node, the JavaScript SDK
(:mod:`js_sdk`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from e2b import AuthenticationException
from e2b_code_interpreter import Sandbox
from js_sdk import run_js

from jupyter_exec.e2b.auth import new_api_key
from tests.cli_helpers import stop_process

KEY_FORM = re.compile(r"e2b_[0-9a-f]{40}")


@contextmanager
def e2b_command(root: Path, key: str | None) -> Iterator[tuple[str, str]]:
    """``jupyter-exec e2b`` in API mode with ``key`` (None: it makes one); its URL and key."""
    env = {k: v for k, v in os.environ.items() if k not in ("E2B_API_KEY", "JUPYTER_EXEC_API_KEY")}
    env.pop("E2B_DEBUG", None)
    if key is not None:
        env["E2B_API_KEY"] = key
    command = [sys.executable, "-m", "jupyter_exec", "e2b", "--no-debug", "--port", "0",
               "--envd-port", "0", "--root-dir", str(root / "sandboxes")]  # fmt: skip
    log = root / "e2b.log"
    with log.open("wb") as out:
        server = subprocess.Popen(command, env=env, stderr=out, stdout=subprocess.DEVNULL)
    try:
        found = None
        deadline = time.monotonic() + 90
        while found is None and time.monotonic() < deadline:
            assert server.poll() is None, log.read_text()
            found = re.search(r"E2B_API_KEY=(.+?) E2B_API_URL=(\S+)", log.read_text())
            time.sleep(0.1)
        assert found is not None, log.read_text()
        yield found.group(2), key if key is not None else found.group(1)
    finally:
        stop_process(server)


def sdk_env(url: str, key: str) -> dict[str, str]:
    return {"E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": key}


def test_a_new_key_has_e2b_form() -> None:
    keys = {new_api_key() for _ in range(50)}
    assert len(keys) == 50
    assert all(KEY_FORM.fullmatch(key) for key in keys)


def test_the_key_the_server_makes_opens_it_to_both_sdks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with e2b_command(tmp_path, None) as (url, key):
        assert KEY_FORM.fullmatch(key), key
        assert run_js("run_code.cjs", sdk_env(url, key), "6 * 7")["text"] == "42"
        _python_sdk(monkeypatch, url, key)
        _refused(monkeypatch, url, "e2b_" + "0" * 40)  # the form alone opens nothing


def test_the_documented_key_opens_it_to_both_sdks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with e2b_command(tmp_path, "my-key") as (url, key):
        assert run_js("run_code.cjs", sdk_env(url, key), "6 * 7")["text"] == "42"
        _python_sdk(monkeypatch, url, key)
        _refused(monkeypatch, url, "my-kez")


def _python_sdk(monkeypatch: pytest.MonkeyPatch, url: str, key: str) -> None:
    for name, value in sdk_env(url, key).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    sandbox = Sandbox.create()
    try:
        assert sandbox.run_code("6 * 7").text == "42"
    finally:
        sandbox.kill()


def _refused(monkeypatch: pytest.MonkeyPatch, url: str, key: str) -> None:
    for name, value in sdk_env(url, key).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(AuthenticationException):
        Sandbox.create()
