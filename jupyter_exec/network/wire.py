"""HTTP/1 on the proxy's streams: the few pieces the plain proxy and the TLS interception share.

A request head is rewritten (hop-by-hop headers dropped, the policy's secret headers put in
place of any the kernel sent under the same names, ``Connection: close``); a refusal is a short
response whose reason phrase names the host and the policy (it is what ``urllib`` shows for a
refused ``CONNECT``); bytes are piped until either side ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from urllib.parse import urlsplit

__all__ = ["CHUNK", "host_of", "pipe", "printable", "read_request", "refuse", "request_head"]

CHUNK = 65536
_HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
                "trailer", "upgrade"}  # fmt: skip


def printable(text: str) -> str:
    """``text`` safe to put in a reason phrase or a log line: one line, at most 300 characters."""
    return "".join(c if c.isprintable() and c not in "\r\n" else "?" for c in text)[:300]


def request_head(
    method: str,
    path: str,
    version: str,
    headers: Iterable[str],
    secret: Iterable[tuple[str, str]] = (),
) -> bytes:
    """The origin-form request head sent on: the kernel's headers, minus hop-by-hop ones and
    any named like a secret header, plus the secret headers and ``Connection: close``."""
    added = dict(secret)
    replaced = {name.lower() for name in added}
    kept = [
        line
        for line in headers
        if line and line.partition(":")[0].strip().lower() not in _HOP_HEADERS | replaced
    ]
    extra = [f"{name}: {value}" for name, value in added.items()]
    lines = [f"{method} {path} {version}", *kept, *extra, "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


def host_of(headers: Iterable[str]) -> str | None:
    """The host name a request's ``Host`` header names (no port), or None without one."""
    for line in headers:
        name, _, value = line.partition(":")
        if name.strip().lower() == "host":
            try:
                return urlsplit(f"//{value.strip()}").hostname or ""
            except ValueError:
                return value.strip()
    return None


async def read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float, refusal: str
) -> tuple[str, str, str, list[str]] | None:
    """A request's head, read within ``timeout``: its method, target and version, and its
    header lines. ``None`` once a 400 (its body ``refusal``) answered a first line that is not
    an HTTP request line."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        await refuse(writer, 400, "Bad Request", refusal)
        return None
    method, target, version = parts
    return method, target, version, lines[1:]


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
