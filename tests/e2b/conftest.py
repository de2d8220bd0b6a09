"""Fixtures: a real E2B server per test module, and the SDK's settings pointing at it.

The SDK reads its settings from the environment when a call is made, so each
test sets them with ``monkeypatch``: debug mode, or API mode with a key, and
in both cases ``E2B_SANDBOX_URL`` pointing at the server's free port (every
route is served on every port, so this one URL carries code, files and
commands).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("e2b_code_interpreter")

from e2b_server_helpers import API_KEY, Running, run_server

from jupyter_exec.e2b import E2BConfig


@pytest.fixture(scope="module")
def debug_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A debug-mode server (the SDK's E2B_DEBUG=true sandbox, no token)."""
    root = tmp_path_factory.mktemp("e2b-debug")
    yield from run_server(E2BConfig(root_dir=root, ports=(0,), debug=True, api_key=API_KEY))


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """An API-mode server: sandboxes made through E2B_API_URL, each with its own token."""
    root = tmp_path_factory.mktemp("e2b-api")
    yield from run_server(E2BConfig(root_dir=root, ports=(0,), debug=False, api_key=API_KEY))


@pytest.fixture
def debug_env(debug_server: Running, monkeypatch: pytest.MonkeyPatch) -> Running:
    """The SDK in debug mode, its sandbox traffic sent to the test's server."""
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", debug_server.url)
    monkeypatch.delenv("E2B_API_URL", raising=False)
    monkeypatch.setenv("E2B_API_KEY", API_KEY)
    return debug_server


@pytest.fixture
def api_env(api_server: Running, monkeypatch: pytest.MonkeyPatch) -> Running:
    """The SDK in API mode against the test's server (no debug)."""
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    monkeypatch.setenv("E2B_API_URL", api_server.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", api_server.url)
    monkeypatch.setenv("E2B_API_KEY", API_KEY)
    return api_server
