"""Who may open which route of the E2B server: the route table and the one decision over it.

Every route declares the credentials that open it and the largest body it
takes, in :data:`ROUTES`; :func:`decide` is the only place that reads a
credential, and the handlers' base runs it for every request, from
``prepare()``, after the headers and before a byte of the body is read::

    route            opens with                      body
    /execute         sandbox token                   CODE_BODY
    /contexts...     sandbox token                   SMALL_BODY
    /files           sandbox token, file signature   the server's upload limit
    /filesystem.*    sandbox token                   SMALL_BODY
    /process.*       sandbox token                   CODE_BODY
    /sandboxes...    API key                         SMALL_BODY (fork, snapshots too; metrics: none)
    /snapshots       API key                         none
    /templates/{id}  API key (DELETE of a snapshot)  none
    /health          nothing (about the server); a sandbox it names: its token
    any other path   API key or sandbox token        none: answered 404 or 501 from
                                                     the headers (e2b/unserved.py)

The credentials:

* ``api_key`` - ``X-API-KEY`` is the server's key (no key configured: any);
* ``sandbox_token`` - ``E2b-Sandbox-Id`` names a live sandbox and
  ``X-Access-Token`` or ``E2B-Traffic-Access-Token`` is its token (the
  debug-mode sandbox, which exists only in debug mode on loopback, has none);
* ``file_signature`` - the query of a ``download_url()`` / ``upload_url()``:
  a signature made from one sandbox's token over one path and one operation
  (read for GET, write for POST), until its expiry. The :class:`Grant` it
  yields names that path and operation, and the files route acts on that
  path only. A signature sent to any other route is no credential there;
* ``public`` - nothing: the route tells nothing about any sandbox.

Whatever opens a route yields a :class:`Grant`; a request that carries
nothing the route accepts is refused with :class:`~jupyter_exec.e2b.errors.Unauthorized`
(401), saying what to send.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from jupyter_exec.e2b.errors import SandboxGone, Unauthorized
from jupyter_exec.exceptions import SessionNotFound

if TYPE_CHECKING:
    from jupyter_exec.e2b.sandboxes import Sandbox, Sandboxes

DEBUG_SANDBOX_ID = "debug_sandbox_id"
"""The one sandbox of the SDK's debug mode (see :mod:`jupyter_exec.e2b.sandboxes`)."""

__all__ = [
    "API_KEY",
    "CODE_BODY",
    "CREDENTIALS",
    "FILE_SIGNATURE",
    "PUBLIC",
    "SANDBOX_TOKEN",
    "SMALL_BODY",
    "Credential",
    "Grant",
    "Request",
    "RouteAuth",
    "decide",
    "file_signature",
    "new_api_key",
]

Credential = Literal["api_key", "sandbox_token", "file_signature", "public"]
API_KEY: Credential = "api_key"
SANDBOX_TOKEN: Credential = "sandbox_token"
FILE_SIGNATURE: Credential = "file_signature"
PUBLIC: Credential = "public"
CREDENTIALS: frozenset[str] = frozenset({API_KEY, SANDBOX_TOKEN, FILE_SIGNATURE, PUBLIC})

SMALL_BODY = 1 << 20
"""Largest body of a control route (create a sandbox, a context, a filesystem call): 1 MiB."""
CODE_BODY = 16 << 20
"""Largest body of a route that carries code or a command's input: 16 MiB."""


API_KEY_PREFIX = "e2b_"
"""How E2B's API keys begin (``e2b_`` and 40 hex digits): the form the server makes its own in,
so a client or tool that checks a key's form takes it. Any key the server is given is accepted
as it is (``E2B_API_KEY=my-key`` included): the server compares, it does not parse."""


def new_api_key() -> str:
    """A new API key in E2B's form: ``e2b_`` and 40 hex digits (160 random bits)."""
    return API_KEY_PREFIX + secrets.token_hex(20)


@dataclass(frozen=True)
class RouteAuth:
    """What one route declares: the credentials that open it and the largest body it takes."""

    opens_with: frozenset[Credential]
    max_body: int

    def __post_init__(self) -> None:
        unknown = set(self.opens_with) - CREDENTIALS
        if not self.opens_with or unknown:
            raise ValueError(f"a route opens with some of {sorted(CREDENTIALS)}, not {unknown}")


@dataclass(frozen=True)
class Grant:
    """What a request was let in with: the credential, its sandbox, and a signature's reach."""

    credential: Credential
    sandbox: Sandbox | None = None
    path: str | None = None
    """A file signature's path: the one path the request may act on (else any)."""
    operation: str | None = None
    """A file signature's operation, ``read`` or ``write``."""


@dataclass(frozen=True)
class Request:
    """What :func:`decide` reads of a request: its method, headers and query, nothing else."""

    method: str
    header: Callable[[str], str | None]
    query: Callable[[str], str]


def file_signature(path: str, operation: str, user: str, token: str, expiration: str) -> str:
    """The signature of a file URL, as the SDK makes it from the sandbox's token."""
    raw = f"{path}:{operation}:{user}:{token}" + (f":{expiration}" if expiration else "")
    digest = hashlib.sha256(raw.encode()).digest()
    return "v1_" + base64.b64encode(digest).rstrip(b"=").decode("ascii")


def _operation(method: str) -> str | None:
    return {"GET": "read", "POST": "write"}.get(method.upper())


def _signed_by(sandbox: Sandbox, request: Request) -> Grant | None:
    """The grant of the request's file signature if ``sandbox``'s token made it, else None."""
    signature = request.query("signature")
    operation = _operation(request.method)
    if not signature or sandbox.token is None or operation is None:
        return None
    expiration = request.query("signature_expiration")
    if expiration and (not expiration.isdigit() or int(expiration) < time.time()):
        return None
    path = request.query("path")
    user = request.query("username")
    expected = file_signature(path, operation, user, sandbox.token, expiration)
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        return None
    return Grant(FILE_SIGNATURE, sandbox, path=path, operation=operation)


def _named_sandbox(sandboxes: Sandboxes, sandbox_id: str) -> Sandbox:
    try:
        return sandboxes.get(sandbox_id)
    except SessionNotFound as exc:
        raise SandboxGone(str(exc)) from None


def _by_token(sandbox: Sandbox, request: Request) -> Grant | None:
    for name in ("X-Access-Token", "E2B-Traffic-Access-Token"):
        if sandbox.allows(request.header(name)):
            return Grant(SANDBOX_TOKEN, sandbox)
    return None


_KEY_WORDS = (
    "the server's API key (X-API-KEY): set E2B_API_KEY to the key the server was given "
    "(`jupyter-exec e2b` prints it)"
)


def decide(
    opens_with: frozenset[Credential],
    request: Request,
    sandboxes: Sandboxes,
    api_key: str | None,
) -> Grant:
    """The grant for ``request`` on a route that opens with ``opens_with``; else Unauthorized.

    Only the credentials the route declares are looked at: a file signature
    on ``/execute``, or a sandbox's token on the API, is no credential there.
    A route that declares several is opened by any of them.
    """
    if API_KEY in opens_with:
        if api_key is None or hmac.compare_digest(
            (request.header("X-API-KEY") or "").encode(), api_key.encode()
        ):
            return Grant(API_KEY)
        if opens_with == {API_KEY}:
            raise Unauthorized(f"send {_KEY_WORDS}")
    sandbox_id = request.header("E2b-Sandbox-Id")
    if not sandbox_id and FILE_SIGNATURE in opens_with and request.query("signature"):
        for sandbox in sandboxes.every():  # a file URL names no sandbox: its signature does
            grant = _signed_by(sandbox, request)
            if grant is not None:
                return grant
        raise Unauthorized(
            "the file URL's signature is wrong or has expired, or is for another path or "
            "operation: ask the sandbox for a new download_url() / upload_url()"
        )
    if not sandbox_id and sandboxes.debug and SANDBOX_TOKEN in opens_with:
        sandbox_id = DEBUG_SANDBOX_ID  # the SDK's debug mode sends no id (and no token)
    if sandbox_id and opens_with & {SANDBOX_TOKEN, FILE_SIGNATURE}:
        sandbox = _named_sandbox(sandboxes, sandbox_id)
        grant = _by_token(sandbox, request) if SANDBOX_TOKEN in opens_with else None
        if grant is None and FILE_SIGNATURE in opens_with:
            grant = _signed_by(sandbox, request)
        if grant is not None:
            return grant
        raise Unauthorized(f"this request does not carry sandbox {sandbox_id!r}'s access token")
    if PUBLIC in opens_with:
        return Grant(PUBLIC)
    either = f"{_KEY_WORDS}, or " if API_KEY in opens_with else ""
    raise Unauthorized(
        f"this route needs {either}a sandbox's credentials: the E2b-Sandbox-Id header and its "
        "access token (X-Access-Token), as the SDK sends them"
    )
