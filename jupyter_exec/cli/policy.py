"""Network policy files: the JSON form of a ``NetworkPolicy``, with secrets from the environment.

``--network-policy FILE`` names a JSON object of the mapping form
:meth:`~jupyter_exec.NetworkPolicy.from_value` takes, one format for every
command (``run``, ``demo``, ``mcp``, ``e2b``)::

    {
      "allow": ["pypi.org", "files.pythonhosted.org", "api.example.org"],
      "deny": ["*.internal"],
      "secrets": {
        "api.example.org": {"Authorization": {"env": "EXAMPLE_TOKEN", "prefix": "Bearer "}}
      }
    }

A secret header's value is either text written in the file, or a reference
``{"env": "NAME"}`` (with an optional ``"prefix"``) read from this process's
environment when the file is loaded, so the file itself can be shared and
committed. Secrets never come from the command line: argv is visible to every
user of the machine (``ps``). ``ask`` is a Python callable and has no file form.

Every fault is an :class:`~jupyter_exec.InvalidArgument` that names the file
(and, for JSON, the line and column) and never quotes a secret's value, raised
before any kernel starts.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jupyter_exec.exceptions import InvalidArgument
from jupyter_exec.network import NetworkPolicy

__all__ = ["load_policy_file", "merged", "policy_from"]

MAX_POLICY_BYTES = 1024 * 1024
"""A policy file is a few lines; anything this big is the wrong file."""

_KEYS = ("allow", "deny", "secrets")


def _read(path: Path) -> tuple[Any, int]:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_POLICY_BYTES + 1)
            mode = os.fstat(handle.fileno()).st_mode
    except FileNotFoundError:
        raise InvalidArgument(f"--network-policy {path}: no such file") from None
    except IsADirectoryError:
        raise InvalidArgument(f"--network-policy {path}: a folder, not a JSON file") from None
    except OSError as exc:
        raise InvalidArgument(f"--network-policy {path}: cannot read it ({exc.strerror})") from None
    if len(data) > MAX_POLICY_BYTES:
        raise InvalidArgument(f"--network-policy {path}: larger than 1 MiB; not a policy file")
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            f"--network-policy {path}: not UTF-8 text (byte {exc.start})"
        ) from None
    except json.JSONDecodeError as exc:
        raise InvalidArgument(
            f"--network-policy {path}: not valid JSON: {exc.msg} at line {exc.lineno}, "
            f"column {exc.colno}"
        ) from None
    return value, mode


def _secret_value(value: Any, where: str) -> str:
    """A header value: text as written, or ``{"env": NAME, "prefix": ...}`` read now."""
    if isinstance(value, str):
        return value
    if not isinstance(value, Mapping) or not isinstance(value.get("env"), str):
        raise InvalidArgument(
            f'{where} must be text or {{"env": "VARIABLE"}} (optionally with "prefix")'
        )
    unknown = sorted(set(value) - {"env", "prefix"})
    if unknown:
        raise InvalidArgument(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
                              "known: env, prefix")  # fmt: skip
    prefix = value.get("prefix", "")
    if not isinstance(prefix, str):
        raise InvalidArgument(f"{where}: prefix must be text")
    name = value["env"]
    found = os.environ.get(name)
    if not found:
        raise InvalidArgument(f"{where} reads ${name}, which is not set (or empty)")
    return prefix + found


def _secrets(value: Any, origin: str) -> dict[str, dict[str, str]] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{origin}: secrets must map a host name to its headers")
    result: dict[str, dict[str, str]] = {}
    for host, headers in value.items():
        if not isinstance(headers, Mapping):
            raise InvalidArgument(f"{origin}: secrets[{host!r}] must map header names to values")
        result[host] = {
            header: _secret_value(text, f"{origin}: secrets[{host!r}][{header!r}]")
            for header, text in headers.items()
        }
    return result


def policy_from(value: Any, origin: str) -> NetworkPolicy:
    """A policy from the parsed JSON ``value``; ``origin`` names it in errors (the file)."""
    if not isinstance(value, Mapping):
        raise InvalidArgument(
            f"{origin}: a policy is a JSON object with allow, deny and secrets, "
            f"not {type(value).__name__}"
        )
    if "ask" in value:
        raise InvalidArgument(
            f"{origin}: 'ask' is a Python callable (NetworkPolicy(ask=...)); it has no file form"
        )
    unknown = sorted(set(value) - set(_KEYS))
    if unknown:
        raise InvalidArgument(
            f"{origin}: unknown key(s) {', '.join(map(repr, unknown))}; known: {', '.join(_KEYS)}"
        )
    for key in ("allow", "deny"):
        rules = value.get(key, [])
        if not isinstance(rules, list):
            raise InvalidArgument(f'{origin}: {key} must be a list of rules, like ["pypi.org"]')
    mapping = {
        "allow": value.get("allow", []),
        "deny": value.get("deny", []),
        "secrets": _secrets(value.get("secrets"), origin),
    }
    try:
        return NetworkPolicy.from_value(mapping)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{origin}: {exc}") from None


def load_policy_file(path: str | os.PathLike[str]) -> NetworkPolicy:
    """The policy in the JSON file ``path`` (see the module docstring for its form).

    A file holding secret values written out is expected to be private: when
    other users may read it, a warning says so (the values are not shown).
    """
    file = Path(path).expanduser()
    value, mode = _read(file)
    policy = policy_from(value, f"--network-policy {file}")
    if _written_secrets(value) and mode & (stat.S_IRGRP | stat.S_IROTH):
        print(
            f"[jupyter-exec] warning: {file} holds secret values and other users may read it; "
            f'chmod 600 it, or use {{"env": "VARIABLE"}} references',
            file=sys.stderr,
            flush=True,
        )
    return policy


def _written_secrets(value: Any) -> bool:
    secrets = value.get("secrets") if isinstance(value, Mapping) else None
    if not isinstance(secrets, Mapping):
        return False
    headers: Iterable[Any] = (
        text for h in secrets.values() if isinstance(h, Mapping) for text in h.values()
    )
    return any(isinstance(text, str) for text in headers)


def merged(
    policy: NetworkPolicy | None, allow: Iterable[str], deny: Iterable[str]
) -> NetworkPolicy | None:
    """``policy`` (from a file, or none) with the rules of ``--allow`` / ``--deny`` added."""
    allow, deny = list(allow), list(deny)
    if policy is None and not allow and not deny:
        return None
    base = policy if policy is not None else NetworkPolicy()
    try:
        return NetworkPolicy(
            allow=[*base.allow, *allow], deny=[*base.deny, *deny], secrets=base.secrets
        )
    except InvalidArgument as exc:
        raise InvalidArgument(f"--allow/--deny: {exc}") from None
