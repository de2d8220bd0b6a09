"""Fixtures for the server-extension tests: pytest-jupyter's real servers, on pytest-asyncio's loop.

pytest-jupyter is meant to be enabled with ``pytest_plugins =
["pytest_jupyter.jupyter_server"]``, but pytest refuses ``pytest_plugins`` in
a conftest below the root, and the plugin's own hooks would run every async
test on a loop of their own, fighting pytest-asyncio (the suite's runner).
So this conftest takes the plugin's *fixtures* only (conftest fixtures apply
to this folder alone) and hands pytest-jupyter the loop pytest-asyncio runs
each test on: the server, its kernels and the test then share one loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_helpers import jupyter_lab
from pytest_jupyter import jupyter_server as _plugin
from server_helpers import JupyterProcess
from tornado.httpclient import HTTPResponse
from traitlets.config import Config

_FixtureType = type(pytest.fixture(lambda: None))
globals().update(
    {name: obj for name, obj in vars(_plugin).items() if isinstance(obj, _FixtureType)}
)

Fetch = Callable[..., Awaitable[HTTPResponse]]


@pytest.fixture
async def jp_asyncio_loop() -> asyncio.AbstractEventLoop:
    """The loop this test runs on (pytest-jupyter would otherwise make its own)."""
    return asyncio.get_running_loop()


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest) -> Config:
    """The extension enabled by name, as its ``jupyter_server_config.d`` file does, plus a
    test's own configuration when it parametrizes this fixture (``indirect``)."""
    config: dict[str, Any] = {
        "ServerApp": {"jpserver_extensions": {"jupyter_exec.server": True}},
        "JupyterExecApp": {"timeout": 60.0},
    }
    for section, values in getattr(request, "param", {}).items():
        config.setdefault(section, {}).update(values)
    return Config(config)


@pytest.fixture
def api(jp_fetch: Fetch) -> Callable[..., Awaitable[tuple[int, Any]]]:
    """``await api(method, *path_parts, body=None, **kw)`` -> (status, decoded JSON or None).

    Errors do not raise: tests look at the status and the JSON error body.
    """

    async def call(method: str, *parts: str, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
        if body is not None and not isinstance(body, (str, bytes)):
            body = json.dumps(body)
        if method == "POST" and body is None:
            body = b""
        response = await jp_fetch(
            "api", "exec", *parts, method=method, body=body, raise_error=False, **kwargs
        )
        text = response.body.decode() if response.body else ""
        return response.code, json.loads(text) if text.strip() else None

    return call


@pytest.fixture
async def session(
    api: Callable[..., Awaitable[tuple[int, Any]]],
) -> AsyncIterator[dict[str, Any]]:
    """A session created over REST (name ``agent``, default work dir), deleted afterwards."""
    status, model = await api("POST", "sessions", body={"name": "agent"})
    assert status == 201, model
    yield model
    await api("DELETE", "sessions", model["id"])


@pytest.fixture
def root(jp_root_dir: Path) -> Path:
    return Path(jp_root_dir)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[JupyterProcess]:
    """A real ``jupyter lab`` of the browser tests (see :func:`lab_helpers.jupyter_lab`)."""
    with jupyter_lab(tmp_path) as server:
        yield server
