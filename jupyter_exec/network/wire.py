"""HTTP/1 on the proxy's streams: the few pieces the plain proxy and the TLS interception share.

A request head is read strictly (:func:`read_head`): the proxy adds credentials to a request,
so it must read the request exactly as the server behind it will, and anything two HTTP
parsers could read two ways is refused rather than guessed at: a header line that does not end
in CRLF (a bare LF or a lone CR), a folded line (obs-fold), NUL and other control characters, a
space before a header's colon, two ``Host`` headers, ``Content-Length`` with
``Transfer-Encoding`` (or two lengths, or a coding other than ``chunked``), an HTTP version
other than 1.0 and 1.1, and ``TRACE``/``TRACK`` (which echo the request, injected headers
included, back to the kernel). :func:`check_host` holds the request's ``Host`` (and an
absolute-form target's host) to the host the policy decided.

A request head is then rewritten (hop-by-hop headers dropped, the policy's secret headers put
in place of any the kernel sent under the same names, ``Connection: close``); a refusal is a
short response whose reason phrase names the host and the policy (it is what ``urllib`` shows
for a refused ``CONNECT``); bytes are piped until either side ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from jupyter_exec.boundary.replies import printable  # what a kernel sent, shown to a person
from jupyter_exec.exceptions import InvalidArgument
from jupyter_exec.network.rules import normalise_host

__all__ = [
    "CHUNK",
    "BadRequest",
    "Head",
    "check_host",
    "connect_first",
    "host_header",
    "pipe",
    "printable",
    "read_head",
    "refuse",
    "request_head",
]

CHUNK = 65536
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
MAX_HEAD = 64 * 1024
"""The longest request head, all lines together (a longer one is a ``431``)."""
MAX_LINES = 200
_HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
                "trailer", "upgrade"}  # fmt: skip
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_VALUE = re.compile(r"^[\t\x20-\x7e\x80-\xff]*$")  # no control character but HTAB
_TARGET = re.compile(r"^[\x21-\x7e\x80-\xff]+$")
_DIGITS = re.compile(r"^[0-9]{1,18}$")
_VERSIONS = ("HTTP/1.0", "HTTP/1.1")
_ECHOING = {"TRACE", "TRACK"}


class BadRequest(InvalidArgument):
    """A request the proxy will not pass on; its text is the reason the kernel is answered
    with (it quotes the kernel's own request, never a secret), ``status`` the answer's."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Head:
    """A request's head as read: its request line and its header lines (``Name: value``,
    exactly as sent, each checked)."""

    method: str
    target: str
    version: str
    lines: tuple[str, ...]

    def values(self, name: str) -> list[str]:
        """The values of every header called ``name`` (case-insensitive), in order."""
        wanted = name.lower()
        return [
            line.partition(":")[2].strip(" \t")
            for line in self.lines
            if line.partition(":")[0].lower() == wanted
        ]


async def read_head(reader: asyncio.StreamReader, timeout: float) -> Head:
    """A request's head, read within ``timeout`` and checked (see the module docstring).

    :class:`BadRequest` says why a head is refused; ``asyncio.IncompleteReadError`` means the
    client closed first (nothing to answer).
    """
    raw = await asyncio.wait_for(_read_lines(reader), timeout)
    request_line, *lines = raw
    parts = request_line.split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not _TARGET.match(parts[1]):
        raise BadRequest("not an HTTP request line")
    method, target, version = parts
    if version not in _VERSIONS:
        raise BadRequest(f"HTTP version {printable(version)!r} is not served (HTTP/1.1 only)")
    if method.upper() in _ECHOING:
        raise BadRequest(f"{method} is refused: it would echo the request back", 405)
    for line in lines:
        _check_line(line)
    head = Head(method, target, version, tuple(lines))
    _check_framing(head)
    return head


async def _read_lines(reader: asyncio.StreamReader) -> list[str]:
    """The head's lines, up to the empty one; every line must end in CRLF."""
    lines: list[str] = []
    size = 0
    while True:
        line = await reader.readuntil(b"\n")
        size += len(line)
        if size > MAX_HEAD or len(lines) >= MAX_LINES:
            raise BadRequest("the request head is too large", 431)
        if not line.endswith(b"\r\n"):
            raise BadRequest("a line of the request head ends in a bare LF, not CRLF")
        text = line[:-2].decode("latin-1")
        if "\r" in text:
            raise BadRequest("a line of the request head holds a lone CR")
        if "\0" in text:
            raise BadRequest("the request head holds a NUL byte")
        if not text:
            if not lines:
                raise BadRequest("not an HTTP request line")
            return lines
        lines.append(text)


def _check_line(line: str) -> None:
    if line[0] in " \t":
        raise BadRequest("a folded header line (obs-fold) is refused")
    name, colon, value = line.partition(":")
    if not colon or not _TOKEN.match(name):
        raise BadRequest(f"{printable(line[:60])!r} is not a header line ('Name: value')")
    if not _VALUE.match(value):
        raise BadRequest(f"the {printable(name)} header holds a control character")


def _check_framing(head: Head) -> None:
    """One way to read where the body ends, and one ``Host``."""
    if len(head.values("host")) > 1:
        raise BadRequest("the request has two Host headers")
    lengths = head.values("content-length")
    codings = head.values("transfer-encoding")
    if lengths and codings:
        raise BadRequest("the request has both Content-Length and Transfer-Encoding")
    if len(lengths) > 1 or (lengths and not _DIGITS.match(lengths[0])):
        raise BadRequest("the request's Content-Length is not one number")
    if codings and (head.version != "HTTP/1.1" or [c.lower() for c in codings] != ["chunked"]):
        raise BadRequest("the request's Transfer-Encoding is not 'chunked' alone (HTTP/1.1)")


def check_host(head: Head, host: str, port: int) -> str:
    """The request's path (origin form), once its ``Host`` and an absolute-form target's host
    name ``host`` (the host the policy decided; a port, if named, must be ``port``).

    :class:`BadRequest` (``421``) names what the request named instead.
    """
    named: list[str] = list(head.values("host"))
    path = head.target
    if not head.target.startswith("/"):
        if head.target == "*" and head.method == "OPTIONS":
            path = "*"
        else:
            url = urlsplit(head.target)
            if url.scheme.lower() not in ("http", "https") or not url.netloc:
                raise BadRequest(f"bad request target {printable(head.target)!r}")
            named.append(url.netloc)
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    if head.version == "HTTP/1.1" and not head.values("host"):
        raise BadRequest("an HTTP/1.1 request without a Host header")
    for authority in named:
        if not _same(authority, host, port):
            raise BadRequest(
                f"the request to {host}:{port} names {printable(authority)!r}; "
                "it must name the host it was decided for",
                421,
            )
    return path


def _same(authority: str, host: str, port: int) -> bool:
    """Whether ``authority`` (``name[:port]``, no userinfo) is ``host`` (and ``port``)."""
    if "@" in authority:
        return False
    try:
        url = urlsplit(f"//{authority}")
        named, named_port = url.hostname, url.port
    except ValueError:
        return False
    if not named:
        return False
    try:
        name = normalise_host(named)
    except ValueError:
        return False
    return name == host and named_port in (None, port)


def host_header(host: str, port: int, default: int) -> str:
    """The ``Host`` header value for ``host`` (a normalised name or address) and ``port``."""
    shown = f"[{host}]" if ":" in host else host
    return shown if port == default else f"{shown}:{port}"


def request_head(
    method: str,
    path: str,
    version: str,
    headers: Iterable[str],
    secret: Iterable[tuple[str, str]] = (),
    host: str = "",
) -> bytes:
    """The origin-form request head sent on: the kernel's headers, minus hop-by-hop ones and
    any named like a secret header, plus the secret headers and ``Connection: close``; a
    ``Host`` header (``host``) when the kernel sent none."""
    added = dict(secret)
    replaced = {name.lower() for name in added}
    kept = [
        line
        for line in headers
        if line and line.partition(":")[0].strip().lower() not in _HOP_HEADERS | replaced
    ]
    if host and not any(line.partition(":")[0].lower() == "host" for line in kept):
        kept.insert(0, f"Host: {host}")
    extra = [f"{name}: {value}" for name, value in added.items()]
    lines = [f"{method} {path} {version}", *kept, *extra, "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


async def refuse(writer: asyncio.StreamWriter, status: int, phrase: str, body: str) -> None:
    data = (body + "\n").encode()
    writer.write(
        f"HTTP/1.1 {status} {printable(phrase)}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
        + data
    )
    with contextlib.suppress(OSError):
        await writer.drain()


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until ``reader`` ends, then half-close ``writer`` where the transport can."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


async def connect_first(
    addresses: Iterable[str],
    port: int,
    timeout: float,
    *,
    tls: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> Streams | None:
    """A connection to the first of ``addresses`` (one name's checked addresses, connected
    to as checked) that answers within ``timeout``; None when none does.

    With ``tls`` it speaks TLS to ``server_hostname``, the handshake getting ``timeout`` of
    its own; a TLS error (an invalid certificate) is raised at once rather than tried on the
    next address, which would most likely present the same certificate.
    """
    handshake = {} if tls is None else {"ssl_handshake_timeout": timeout}
    for address in addresses:
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(
                    address,
                    port,
                    ssl=tls,
                    server_hostname=server_hostname,
                    limit=CHUNK,
                    **handshake,
                ),
                timeout if tls is None else 2 * timeout,
            )
        except ssl.SSLError:
            raise
        except (OSError, asyncio.TimeoutError):
            continue
    return None
