"""What the server does not serve, said plainly: E2B's routes it lacks answer 501, others 404.

The SDK's ``update_network()`` and template calls reach routes this server does not serve
yet. Each must fail with the SDK's own exception saying the server does not
support it (not
"sandbox not found", not a body-size refusal), and leave the sandbox running;
a path E2B does not have either answers 404 naming what is served. Both keep
the E2B error body, ``{"code": ..., "message": ...}``.
"""

from __future__ import annotations

import re

import httpx
import pytest
from e2b import SandboxException, SandboxNotFoundException
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import API_KEY, Running

from jupyter_exec.e2b.app import ROUTES
from jupyter_exec.e2b.unserved import NOT_SERVED, pattern_of

NOT_SUPPORTED = "not supported by this server"

SDK_CALLS = {
    "update_network": lambda sandbox: sandbox.update_network({}),
}


@pytest.mark.parametrize("call", sorted(SDK_CALLS))
def test_the_sdk_is_told_the_feature_is_not_supported_yet(api_env: Running, call: str) -> None:
    sandbox = Sandbox.create()
    try:
        with pytest.raises(SandboxException) as refused:
            SDK_CALLS[call](sandbox)
        assert not isinstance(refused.value, SandboxNotFoundException)
        assert "501" in str(refused.value)
        assert NOT_SUPPORTED in str(refused.value)
        assert "larger than this route takes" not in str(refused.value)
        assert sandbox.run_code("1 + 1").text == "2"  # untouched, still running
    finally:
        sandbox.kill()


def test_an_unserved_route_answers_501_with_what_it_is(api_env: Running) -> None:
    answer = httpx.post(
        f"{api_env.url}/sandboxes/sbx-anything/refreshes",
        headers={"X-API-KEY": API_KEY},
        json={"duration": 2},
    )
    assert answer.status_code == 501
    body = answer.json()
    assert set(body) == {"code", "message"}
    assert body["code"] == 501
    assert body["message"].startswith("refreshing a sandbox's life")
    assert NOT_SUPPORTED in body["message"]


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_an_unknown_route_answers_404_naming_what_is_served(api_env: Running, method: str) -> None:
    answer = httpx.request(
        method, f"{api_env.url}/no/such/route", headers={"X-API-KEY": API_KEY}, content=b"{}"
    )
    assert answer.status_code == 404
    body = answer.json()
    assert set(body) == {"code", "message"}
    assert body["code"] == 404
    message = body["message"]
    assert f"{method} /no/such/route is not served here" in message
    for served in ("/execute", "/files", "sandboxes/{sandbox_id}/connect", "/health"):
        assert served in message


def test_a_sandbox_token_opens_an_unknown_route_too(api_env: Running) -> None:
    sandbox = Sandbox.create()
    try:
        headers = {"E2b-Sandbox-Id": sandbox.sandbox_id,
                   "X-Access-Token": sandbox._envd_access_token or ""}  # fmt: skip
        answer = httpx.get(f"{api_env.url}/watch/anything", headers=headers)
        assert answer.status_code == 404
        assert "is not served here" in answer.json()["message"]
    finally:
        sandbox.kill()


def test_body_limits_still_apply_on_routes_that_exist(api_env: Running) -> None:
    answer = httpx.post(f"{api_env.url}/health", content=b"x")
    assert answer.status_code == 413


def _example(pattern: str) -> str:
    """A path ``pattern`` matches: each segment group given an id, optional parts left out."""
    path = re.sub(r"\(\?P<\w+>[^)]*\)", "sbx-1", pattern)
    path = re.sub(r"\(\?:[^)]*\)\?", "", path)
    return path.replace("\\", "")


def test_no_route_is_both_served_and_listed_as_not_served() -> None:
    """A feature that comes to be served leaves NOT_SERVED in the same change."""
    for written, _ in NOT_SERVED:
        example = _example(pattern_of(written))
        assert re.fullmatch(pattern_of(written), example), written
        served = [p for p, _, _ in ROUTES if re.fullmatch(p, example)]
        assert not served, f"{written} is served by {served}: drop it from NOT_SERVED"
