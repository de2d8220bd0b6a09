"""A REST session's network policy: the body's ``"network"`` object made a checked policy.

``{"allow": [...], "deny": [...], "secrets": {host: {header: value}}, "ask": true}`` is
checked here before any kernel starts: its shape, and the rules of the policy value itself
(:class:`~jupyter_exec.network.NetworkPolicy`). Whether the session may have one (not a
local kernel) is the engine's option rule, checked with the others where the request's
:class:`~jupyter_exec.options.SessionOptions` is made
(:func:`~jupyter_exec.server.create.request_options`). ``"ask": true`` becomes the
server's pending approvals (:mod:`~jupyter_exec.server.approvals`). Messages name
fields, hosts and header names, never a secret's value; :func:`policy_model` is what
responses show of a policy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from jupyter_exec.network import NetworkPolicy, NetworkRequest
from jupyter_exec.server.bodies import InvalidRequest

__all__ = ["checked_policy", "policy_model"]

_KEYS = ("allow", "deny", "secrets", "ask")


def _text(value: Any) -> bool:
    """A string that is valid text (no lone surrogate)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shape(value: Any) -> None:
    """The policy object's shape; a mistake names the key, never a secret's value."""
    if not isinstance(value, dict):
        raise InvalidRequest(
            "'network' must be an object: "
            '{"allow": [hosts], "deny": [hosts], "secrets": {host: {header: value}}, "ask": bool}'
        )
    unknown = [k for k in value if k not in _KEYS]
    if unknown:
        shown = ", ".join(repr(k[:40]) if _text(k) else "(not text)" for k in unknown[:5])
        raise InvalidRequest(f"unknown 'network' key(s) {shown}; accepted: {', '.join(_KEYS)}")
    for key in ("allow", "deny"):
        rules = value.get(key, [])
        if not isinstance(rules, list) or not all(_text(r) for r in rules):
            raise InvalidRequest(f"'network.{key}' must be an array of host rules (strings)")
    secrets = value.get("secrets", {})
    if not isinstance(secrets, dict) or not all(
        _text(host)
        and isinstance(headers, dict)
        and all(_text(k) and _text(v) for k, v in headers.items())
        for host, headers in secrets.items()
    ):
        raise InvalidRequest(
            "'network.secrets' must map host names to objects of header names to text values"
        )
    if not isinstance(value.get("ask", False), bool):
        raise InvalidRequest("'network.ask' must be true or false")


def checked_policy(value: Any, ask: Callable[[NetworkRequest], Awaitable[bool]]) -> NetworkPolicy:
    """The policy ``value`` describes; :class:`InvalidRequest` when it is malformed.

    ``ask`` is the session's pending-approval callback, used when ``value["ask"]`` is true.
    """
    _shape(value)
    try:
        policy = NetworkPolicy(
            allow=value.get("allow", ()),
            deny=value.get("deny", ()),
            secrets=value.get("secrets") or None,
            ask=ask if value.get("ask") else None,
        )
    except ValueError as exc:  # InvalidArgument: the policy's own message, secrets unquoted
        raise InvalidRequest(f"'network': {exc}") from None
    return policy


def policy_model(policy: NetworkPolicy | None) -> dict[str, Any] | None:
    """What a response shows of a policy: rules, secret header *names*, whether it asks."""
    return None if policy is None else policy.to_dict()
