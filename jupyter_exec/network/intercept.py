"""One intercepted HTTPS connection: the proxy ends the kernel's TLS with the session's
certificate for the host, adds the host's secret headers, and speaks TLS again to the real host,
verifying *its* certificate.

Used only for a ``CONNECT`` to a host that has secrets (every other HTTPS host is tunnelled, its
TLS untouched). The order is what makes failures clear:

1. connect to the real host and verify its certificate (system trust, plus the policy's
   ``extra_ca``). An invalid certificate refuses the ``CONNECT`` with a ``502`` whose reason
   names the host and the verification error: the kernel's client shows it
   (``Tunnel connection failed: 502 the certificate of api.example.org:443 is not valid ...``);
2. accept the ``CONNECT`` and do the TLS handshake with the kernel as that host;
3. read one request, strictly (:func:`~jupyter_exec.network.wire.read_head`: no bare LF, no
   second ``Host``, no ``TRACE``...); the kernel's TLS server name (SNI), its ``Host`` and an
   absolute-form target must all name the host that was decided (the secret goes to the host
   it is for, not to another name the same server or CDN answers: ``421`` otherwise); rewrite
   its head with the secret headers and ``Connection: close``; relay the body and the
   response. One request per connection, each recorded with ``secret=True``.

This module needs no ``cryptography``: the contexts come from :mod:`jupyter_exec.network.tls`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import sys
from collections.abc import Callable

from jupyter_exec.network.policy import Decision
from jupyter_exec.network.rules import normalise_host
from jupyter_exec.network.wire import (
    BadRequest,
    Head,
    check_host,
    connect_first,
    host_header,
    pipe,
    printable,
    read_head,
    refuse,
    request_head,
)

__all__ = ["intercept"]

HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 15.0

Record = Callable[[Decision, bool], None]


async def intercept(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    host: str,
    port: int,
    addresses: list[str],
    reason: str,
    headers: tuple[tuple[str, str], ...],
    server: ssl.SSLContext,
    upstream: ssl.SSLContext,
    record: Record,
) -> None:
    """Serve one ``CONNECT host:port`` the policy allowed, for a host with secret ``headers``."""
    shown = f"{host}:{port}"
    try:
        opened = await connect_first(
            addresses, port, CONNECT_TIMEOUT, tls=upstream, server_hostname=host
        )
    except ssl.SSLCertVerificationError as exc:
        why = f"the certificate of {shown} is not valid ({exc.verify_message})"
        await _fail(writer, record, why)
        return
    except (ssl.SSLError, asyncio.TimeoutError) as exc:
        why = f"TLS with {shown} failed ({printable(str(exc)) or 'timed out'})"
        await _fail(writer, record, why)
        return
    if opened is None:
        record(Decision(True, f"{reason}; could not connect"), False)
        await refuse(writer, 502, f"cannot reach {shown}", f"cannot reach {shown}")
        return
    up_reader, up_writer = opened
    try:
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        try:
            writer = await _accept_tls(reader, writer, server)
        except (ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
            why = printable(str(exc)) or "timed out"
            record(Decision(True, f"{reason}; the kernel did not complete TLS ({why})"), False)
            return
        await _relay(reader, writer, up_reader, up_writer, host, port, reason, headers, record)
    finally:
        up_writer.close()
        writer.close()


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    host: str,
    port: int,
    reason: str,
    headers: tuple[tuple[str, str], ...],
    record: Record,
) -> None:
    try:
        head = await read_head(reader, HEAD_TIMEOUT)
        path = _checked(head, writer, host, port)
    except asyncio.IncompleteReadError:
        return  # the kernel closed without a request: nothing was sent, nothing to record
    except BadRequest as exc:
        why = f"inside the tunnel to {host}:{port}: {exc}"
        record(Decision(False, why), False)
        phrase = "Misdirected Request" if exc.status == 421 else str(exc)
        await refuse(writer, exc.status, phrase, f"{why}: refused by the network proxy")
        return
    up_writer.write(
        request_head(
            head.method, path, head.version, head.lines, headers, host=host_header(host, port, 443)
        )
    )
    record(Decision(True, f"{reason}; HTTPS intercepted"), True)
    body = asyncio.ensure_future(pipe(reader, up_writer))
    try:
        await pipe(up_reader, writer)  # ends when the host closes (it was told Connection: close)
    finally:
        body.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await body


def _checked(head: Head, writer: asyncio.StreamWriter, host: str, port: int) -> str:
    """The request's path once the kernel's TLS server name (SNI), its ``Host`` and an
    absolute-form target all name ``host``; :class:`BadRequest` (421) otherwise."""
    from jupyter_exec.network.tls import server_name  # loaded: this connection used it

    sni = server_name(writer.get_extra_info("ssl_object"))
    if sni is None or _name(sni) != host:
        shown = "no name" if sni is None else repr(printable(sni))
        raise BadRequest(f"the TLS server name (SNI) is {shown}, not {host!r}", 421)
    return check_host(head, host, port)


def _name(text: str) -> str:
    try:
        return normalise_host(text)
    except ValueError:
        return text


async def _fail(writer: asyncio.StreamWriter, record: Record, why: str) -> None:
    record(Decision(False, why), False)
    await refuse(writer, 502, why, f"refused by the session's network proxy: {why}")


async def _accept_tls(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, context: ssl.SSLContext
) -> asyncio.StreamWriter:
    """The server side of TLS on an accepted stream; the writer to use from now on."""
    if sys.version_info >= (3, 11):
        await writer.start_tls(context, ssl_handshake_timeout=HEAD_TIMEOUT)
        return writer
    loop = asyncio.get_running_loop()  # Python 3.10: StreamWriter.start_tls is 3.11+
    protocol = writer.transport.get_protocol()
    transport = await loop.start_tls(
        writer.transport, protocol, context, server_side=True, ssl_handshake_timeout=HEAD_TIMEOUT
    )
    return asyncio.StreamWriter(transport, protocol, reader, loop)  # type: ignore[arg-type]
