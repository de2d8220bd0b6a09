"""The gateway's response port: an accept loop of our own, so no connection can hold it.

Each launcher reports its kernel's connection info on one TCP port of the gateway
(gateway_provisioners' ``ResponseManager``). That class serves the port from one periodic
callback that reads one connection to its end, with no deadline and no size limit: one idle
connection stopped every launch, and a flood grew the gateway by what was sent. This subclass
keeps its keys, its registry and its payload format, and replaces how the port is served:

* the port is bound exactly where ``GP_RESPONSE_IP``/``GP_RESPONSE_PORT`` say, once, when the
  manager is made (the generated config makes it as the server starts): a port another process
  holds is a :class:`~jupyter_exec.exceptions.BackendError` naming it, never a silent move to
  another port, and the port is never announced to a launcher before it is ours;
* every connection is a task of its own, with one deadline (:data:`DEADLINE`) for all of it;
* the first line must be ``jupyter-exec-response/1 <kernel id> <tag>`` (at most
  :data:`HEADER_LIMIT` bytes), where the tag is the launch's one-time tag
  (:func:`~jupyter_exec.cluster.launcher.response_tag`, from the nonce only the provisioner and
  its launcher know); a connection without it is closed after those few bytes;
* the payload that follows is read to its end, at most :data:`PAYLOAD_LIMIT` bytes;
* at most :data:`MAX_UNPROVEN` connections may wait for their first line; a new one closes
  the oldest of them, so idle connections cost a bounded number of descriptors.

The launch nonce inside the encrypted payload is still checked by the provisioner: the tag
only says who may be read at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import socket
from typing import Any

from gateway_provisioners import response_manager as _gp  # type: ignore[import-untyped]

from jupyter_exec.boundary import ports
from jupyter_exec.cluster.launcher import RESPONSE_HEADER, response_tag
from jupyter_exec.exceptions import BackendError

__all__ = ["DEADLINE", "HEADER_LIMIT", "MAX_UNPROVEN", "PAYLOAD_LIMIT", "BoundedResponseManager"]

DEADLINE = 10.0
"""Seconds a connection may take, from accept to its last byte."""

HEADER_LIMIT = 256
"""Bytes of the first line (``jupyter-exec-response/1 <uuid> <64 hex>`` is ~125)."""

PAYLOAD_LIMIT = 64 * 1024
"""Bytes of the encrypted connection info (a real one is ~2 KiB)."""

MAX_UNPROVEN = 64
"""Connections that may wait for their first line at once; a new one closes the oldest."""


class BoundedResponseManager(_gp.ResponseManager):  # type: ignore[misc]
    """gateway_provisioners' ResponseManager, its port served by :meth:`_serve_one` per connection.

    Made once per server (a traitlets singleton: ``ResponseManager.instance()`` returns it, so
    gateway_provisioners' provisioners use it too). Launches call :meth:`expect` with their
    nonce before the launcher starts and :meth:`forget` when they give up.
    """

    _response_socket: socket.socket | None

    def __init__(self, **kwargs: Any) -> None:
        self._tags: dict[str, str] = {}
        self._unproven: dict[asyncio.StreamWriter, None] = {}
        self._server: asyncio.AbstractServer | None = None
        self._serving: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        super().__init__(**kwargs)

    # -- the port: bound once, exactly where configured --------------------------------------

    def _prepare_response_socket(self) -> None:
        ip = _gp.local_ip if _gp.response_ip is None else _gp.response_ip
        port = int(_gp.desired_response_port)
        try:
            sock = ports.listen(ip, port)
        except ports.PortUnavailable as exc:
            raise BackendError(
                f"the gateway's response port {ip}:{port} "
                + ("is held by another process" if exc.taken else f"cannot be bound: {exc.reason}")
                + ": refusing to start (launchers would report to it)"
            ) from exc
        sock.setblocking(False)
        self._response_socket = sock
        self._response_port = port
        self._response_ip = ip
        self.log.info("Response port bound on %s:%s", ip, port)

    def _start_response_manager(self) -> None:
        """Bind now; the accept loop starts on the server's loop, at the first launch (the
        kernel queues connections until then)."""
        if self._response_socket is None:
            self._prepare_response_socket()
        with contextlib.suppress(RuntimeError):
            self._ensure_serving(asyncio.get_running_loop())

    def _ensure_serving(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._serving is not None and self._loop is loop:
            return
        self._loop = loop
        self._serving = loop.create_task(self._start_server())

    async def _start_server(self) -> None:
        self._server = await asyncio.start_server(
            self._serve_one, sock=self._response_socket, limit=HEADER_LIMIT
        )

    def stop_response_manager(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._serving is not None:
            self._serving.cancel()
            self._serving = None
        for writer in list(self._unproven):
            writer.transport.abort()
        self._unproven.clear()
        if self._response_socket is not None:
            with contextlib.suppress(OSError):
                self._response_socket.close()
            self._response_socket = None

    # -- launches -----------------------------------------------------------------------------

    def register_event(self, kernel_id: str) -> None:
        self._ensure_serving(asyncio.get_running_loop())
        super().register_event(kernel_id)

    def expect(self, kernel_id: str, nonce: str) -> None:
        """The launch of ``kernel_id`` gave its launcher ``nonce``: accept its report only."""
        self._tags[kernel_id] = response_tag(nonce, kernel_id)

    def forget(self, kernel_id: str) -> None:
        """The launch gave up: a late report is refused, nothing is kept for it."""
        self._tags.pop(kernel_id, None)
        self._response_registry.pop(kernel_id, None)

    # -- one connection -----------------------------------------------------------------------

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read one report within DEADLINE and the limits, or close the connection."""
        peer = writer.get_extra_info("peername")
        while len(self._unproven) >= MAX_UNPROVEN:
            oldest = next(iter(self._unproven))
            del self._unproven[oldest]
            oldest.transport.abort()
        self._unproven[writer] = None
        try:
            await asyncio.wait_for(self._read_report(reader, writer), DEADLINE)
        except asyncio.TimeoutError:
            self.log.warning("Response port: a connection from %s timed out: closed", peer)
        except (_Refused, ValueError) as exc:
            self.log.warning("Response port: refused a connection from %s: %s", peer, exc)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            self.log.warning("Response port: a connection from %s failed: %s", peer, exc)
        finally:
            self._unproven.pop(writer, None)
            writer.transport.abort()

    async def _read_report(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        header = await reader.readuntil(b"\n")
        kernel_id = self._check_header(header)
        self._unproven.pop(writer, None)
        data = bytearray()
        while chunk := await reader.read(PAYLOAD_LIMIT):
            data += chunk
            if len(data) > PAYLOAD_LIMIT:
                raise _Refused(f"kernel {kernel_id}: a report over {PAYLOAD_LIMIT} bytes")
        try:
            payload = self._decode_payload(bytes(data).decode("ascii"))
        except Exception as exc:  # whatever the decoder raises on bytes it cannot read
            what = type(exc).__name__
            raise _Refused(f"kernel {kernel_id}: an unreadable report ({what})") from exc
        if payload.get("kernel_id") != kernel_id:
            raise _Refused(f"kernel {kernel_id}: the payload names another kernel")
        self._post_connection(payload)

    def _check_header(self, header: bytes) -> str:
        parts = header.decode("ascii", "replace").split()
        if len(parts) != 3 or parts[0] != RESPONSE_HEADER:
            raise _Refused("no report header (not a launcher of this gateway)")
        kernel_id, tag = parts[1], parts[2]
        expected = self._tags.get(kernel_id)
        if expected is None or not hmac.compare_digest(tag, expected):
            raise _Refused(f"no launch of kernel {kernel_id[:40]!r} expects this report")
        del self._tags[kernel_id]  # one report per launch
        return kernel_id


class _Refused(Exception):
    """A connection that is not a launcher's report (logged, closed)."""
