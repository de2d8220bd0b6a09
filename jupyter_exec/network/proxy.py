"""The host side of a Docker kernel's network: a per-session HTTP proxy on a Unix socket that
decides every connection with the session's :class:`~jupyter_exec.NetworkPolicy`.

The kernel's container has network mode ``none``. Its only way out is the Unix socket of this
proxy, mounted into the container next to the forwarder (:mod:`jupyter_exec.network.forwarder`),
which listens on the container's loopback; ``HTTP(S)_PROXY`` point the kernel's clients at it.
The proxy speaks the two forms clients use through a proxy:

* ``CONNECT host:port`` (HTTPS): decided on the CONNECT host, then a byte tunnel, TLS end to
  end between the kernel and the host. For a host with secrets, instead, the connection is
  intercepted (:mod:`jupyter_exec.network.intercept`) with the session's certificate authority
  (:mod:`jupyter_exec.network.tls`), whose certificate is the one thing of it the kernel gets:
  in :data:`TRUST_NAME`, which the provisioner joins to the image's CA bundle.
* ``GET http://host/path`` (plain HTTP, absolute form): decided on the URL's host (which its
  ``Host`` header must name), sent on as an origin-form request with ``Connection: close``.
  Never with secrets: plain HTTP to a host that has some is refused, saying to use https (a
  secret goes over TLS to a host whose certificate the proxy verified, nowhere else).

Every request head is read strictly (:func:`~jupyter_exec.network.wire.read_head`): what two
HTTP parsers could read two ways is refused, not passed on. Names are resolved here, on the host
(the kernel resolves none), and the resolved addresses are checked again, then connected to as
checked (a name may not lead to a denied range or, unless listed, to an address that is not
globally routable: :meth:`NetworkPolicy.check_addresses`).
A refusal is a ``403`` whose reason phrase and body say which host and which policy, so the
message reaches the code even through ``urllib``'s "Tunnel connection failed: 403 ...".
Every decision is kept (:attr:`NetworkProxy.connections`) for the cell that was running.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import ipaddress
import logging
import os
import secrets
import shutil
import socket
import ssl
import tempfile
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from jupyter_exec.exceptions import KernelStartError
from jupyter_exec.network import forwarder, pem
from jupyter_exec.network.intercept import intercept
from jupyter_exec.network.policy import (
    AskCallback,
    Connection,
    Decision,
    NetworkPolicy,
    NetworkRequest,
)
from jupyter_exec.network.redact import redact, secret_needles
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

if TYPE_CHECKING:
    from jupyter_exec.network.tls import Authority

__all__ = [
    "BUNDLE_NAME",
    "CONTAINER_DIR",
    "FORWARDER_PORT",
    "TRUST_NAME",
    "NetworkProxy",
    "ca_env",
    "forwarder_command",
    "kernel_env",
    "resolver_overrides",
]

log = logging.getLogger(__name__)

#: Where the proxy's folder (its socket and the forwarder script) is mounted, read-only.
CONTAINER_DIR = "/run/jxnet"
SOCKET_NAME = "proxy.sock"
FORWARDER_NAME = "forwarder.py"
TRUST_NAME = "trust.pem"
"""The certificates the kernel must trust besides its image's own: the session's authority (when
the policy has secrets) and the policy's ``extra_ca``. Public certificates only."""
BUNDLE_NAME = "ca-bundle.pem"
"""The kernel's CA bundle: its image's system bundle and :data:`TRUST_NAME`, written by the
provisioner (it knows the image) into the proxy's folder, mounted read-only."""
#: The forwarder's port on the container's own loopback.
FORWARDER_PORT = 3128

MAX_SOCKET_PATH = 107
MAX_HEAD = 64 * 1024
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 15.0
MAX_CONNECTIONS = 256
"""Open connections per session; more are closed at once (the kernel could otherwise open the
socket thousands of times and use up this process's file descriptors)."""
MAX_KEPT = 10_000
"""Decisions kept in memory; a cell that tries more keeps the latest."""

ASK_FAILED = (
    "the ask callback failed (its error is in the log of the process that runs the session)"
)
"""What the kernel is told when ``ask`` raised: never the exception's own text."""

resolver_overrides: dict[str, str] = {}
"""Host name -> address, consulted before the host's resolver: like an ``/etc/hosts`` for the
proxy alone. For tests that reach a local server by a name."""


def kernel_env(port: int = FORWARDER_PORT) -> dict[str, str]:
    """The variables that point the kernel's HTTP clients (urllib, requests, httpx, pip) at the
    forwarder; loopback itself stays direct."""
    url = f"http://127.0.0.1:{port}"
    no_proxy = "localhost,127.0.0.1,::1"
    return {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "PIP_PROXY": url,
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
    }


def ca_env() -> dict[str, str]:
    """The variables that make the kernel's clients verify with its CA bundle (OpenSSL and so
    urllib and httpx, requests, curl, pip, Node), set when the proxy folder has one."""
    path = f"{CONTAINER_DIR}/{BUNDLE_NAME}"
    names = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT",
             "NODE_EXTRA_CA_CERTS")  # fmt: skip
    return dict.fromkeys(names, path)


def forwarder_command(command: Iterable[str], port: int = FORWARDER_PORT) -> list[str]:
    """``command`` (the kernel's argv in the container) started behind the forwarder."""
    return [
        "python",
        f"{CONTAINER_DIR}/{FORWARDER_NAME}",
        f"127.0.0.1:{port}",
        f"{CONTAINER_DIR}/{SOCKET_NAME}",
        "--",
        *command,
    ]


class NetworkProxy:
    """One session's proxy: start it, mount :attr:`folder` into the kernel, close it after."""

    def __init__(self, policy: NetworkPolicy, *, session: str = "", root: str | None = None):
        self.policy = policy
        self.session = session
        self.cell: int | None = None
        """The index of the cell running now (set by the recording; given to ``ask``)."""
        self.folder: Path | None = None
        """What is mounted in the container: the socket and the forwarder script."""
        self._private: Path | None = None
        self._root = root
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._kept: collections.deque[tuple[int, Connection]] = collections.deque(maxlen=MAX_KEPT)
        self._count = 0
        self._asked: dict[tuple[str, int], Decision] = {}
        self._ask_lock = asyncio.Lock()
        self._closed = False
        self._authority: Authority | None = None
        self._upstream: ssl.SSLContext | None = None

    # -- lifecycle -------------------------------------------------------------------
    @property
    def socket_path(self) -> Path:
        assert self.folder is not None
        return self.folder / SOCKET_NAME

    @property
    def serving(self) -> bool:
        """Whether the kernel can reach the proxy: listening, and its socket file still there
        (a temp-dir cleaner may have removed it)."""
        return (
            self._server is not None
            and self._server.is_serving()
            and self.folder is not None
            and self.socket_path.is_socket()
        )

    async def revive(self) -> bool:
        """Listen again if the proxy stopped (its server closed, its socket removed) but was not
        closed; True when it had to. The forwarder connects anew for every request, so the
        kernel needs no restart."""
        if self.serving or self._closed or self.folder is None or not self.folder.is_dir():
            return False
        if self._server is not None:
            self._server.close()
        self.socket_path.unlink(missing_ok=True)
        self._server = await asyncio.start_unix_server(
            self._handle, path=str(self.socket_path), limit=MAX_HEAD
        )
        os.chmod(self.socket_path, 0o666)
        log.warning("session %s: the network proxy had stopped; it listens again", self.session)
        return True

    async def start(self) -> NetworkProxy:
        """Make the folder (socket + forwarder) and listen; it is mounted read-only.

        The socket must be open to the kernel's uid, whatever it is, so it is mode 0666; what
        keeps other users of this machine from using it (and its secrets) is its path: the
        folder is a random name inside a private (0711, unlistable) temporary directory.
        """
        private = Path(tempfile.mkdtemp(prefix="jxn-", dir=self._root))
        try:
            private.chmod(0o711)
            folder = private / secrets.token_hex(12)
            if len(str(folder / SOCKET_NAME)) > MAX_SOCKET_PATH:
                raise KernelStartError(
                    f"the network proxy's socket path under {private.parent} would be over the "
                    f"{MAX_SOCKET_PATH}-character limit of Unix sockets; use a shorter root"
                )
            folder.mkdir(mode=0o755)
            script = folder / FORWARDER_NAME
            script.write_bytes(Path(forwarder.__file__).read_bytes())
            script.chmod(0o644)
            self._trust(folder)
            self.folder, self._private = folder, private
            self._server = await asyncio.start_unix_server(
                self._handle, path=str(folder / SOCKET_NAME), limit=MAX_HEAD
            )
            os.chmod(folder / SOCKET_NAME, 0o666)
        except BaseException:
            shutil.rmtree(private, ignore_errors=True)
            self.folder = self._private = None
            raise
        return self

    def _trust(self, folder: Path) -> None:
        """Make the session's authority (a policy with secrets) and write what the kernel must
        trust: certificates only. The authority's key stays in this process; ``extra_ca`` is
        read again (it may have changed since the policy was made) and only its certificates
        are written, re-encoded (:mod:`jupyter_exec.network.pem`)."""
        trusted = ""
        try:
            extra = None
            if self.policy.extra_ca is not None:
                extra = pem.read_certificates(self.policy.extra_ca)
            if self.policy.secret_hosts:
                from jupyter_exec.network import tls  # the 'network' extra, checked by the policy

                self._authority = tls.Authority(self.policy.secret_hosts, self.session)
                self._upstream = tls.upstream_context(extra)
                trusted = self._authority.certificate_pem.decode("ascii")
            if extra is not None:
                trusted += extra
        except (OSError, ValueError, ssl.SSLError) as exc:  # changed since the policy was made
            raise KernelStartError(
                f"the network policy's extra_ca {self.policy.extra_ca!r} cannot be used: {exc}"
            ) from None
        if trusted:
            (folder / TRUST_NAME).write_text(trusted, encoding="ascii")
            (folder / TRUST_NAME).chmod(0o644)

    async def close(self) -> None:
        """Stop listening, cut every open connection and remove the folder. Idempotent."""
        self._closed = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)

    # -- the record ------------------------------------------------------------------
    def mark(self) -> int:
        """A position in the record: :meth:`since` gives what was decided after it."""
        return self._count

    def since(self, mark: int) -> tuple[Connection, ...]:
        return tuple(c for n, c in self._kept if n >= mark)

    @property
    def connections(self) -> tuple[Connection, ...]:
        return tuple(c for _, c in self._kept)

    def _record(self, host: str, port: int, decision: Decision, secret: bool = False) -> None:
        entry = Connection(
            host, port, "allowed" if decision.allowed else "denied", decision.reason, secret
        )
        self._kept.append((self._count, entry))
        self._count += 1
        level = logging.DEBUG if decision.allowed else logging.INFO
        log.log(level, "session %s: %s:%d %s (%s)%s", self.session, host, port, entry.decision,
                decision.reason, " [secret added]" if secret else "")  # fmt: skip

    # -- deciding --------------------------------------------------------------------
    async def decide(self, host: str, port: int) -> Decision:
        """The policy's answer, asking ``ask`` (once per host *and port* per session: a yes
        for ``host:443`` opens nothing else of that host) when no rule decides."""
        ask = self.policy.ask
        if ask is None or not self.policy.undecided(host, port):
            return self.policy.decide(host, port)
        key = (normalise_host(host), port)
        async with self._ask_lock:
            if key not in self._asked:
                answer = await self._ask(ask, NetworkRequest(key[0], port, self.session, self.cell))
                if answer is None:  # the callback failed: denied, not remembered
                    return Decision(False, ASK_FAILED)
                self._asked[key] = answer
            return self._asked[key]

    async def _ask(self, ask: AskCallback, request: NetworkRequest) -> Decision | None:
        """``ask``'s answer as a :class:`Decision`; None when it raised.

        What the callback raised is the person's to read (the log of this process, the
        policy's secrets masked), never the kernel's: its text may hold anything the
        callback knew, so the kernel is told only that asking failed.
        """
        try:
            if inspect.iscoroutinefunction(ask):
                answer = await ask(request)
            else:  # may block (a person at a prompt): not on the event loop
                answer = await asyncio.to_thread(ask, request)
                if inspect.isawaitable(answer):
                    answer = await answer
        except Exception as exc:
            told = "".join(traceback.format_exception(exc))
            masked = redact(told, secret_needles(self.policy.secret_values()))
            log.error("session %s: the network policy's ask callback failed about %s:%d; "
                      "the connection is denied:\n%s", self.session, request.host,
                      request.port, masked)  # fmt: skip
            return None
        if isinstance(answer, Decision):  # a Decision also says why
            return answer
        return Decision(
            answer is True, "allowed when asked" if answer is True else "denied when asked"
        )

    async def _resolve(self, host: str, port: int) -> list[str]:
        with contextlib.suppress(ValueError):
            return [str(ipaddress.ip_address(host))]
        if host in resolver_overrides:
            return [resolver_overrides[host]]
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    # -- serving ---------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._tasks) >= MAX_CONNECTIONS:
            writer.close()
            return
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (OSError, EOFError, ValueError, asyncio.TimeoutError, asyncio.LimitOverrunError):
            pass  # a client that went away or sent garbage: nothing to answer
        except asyncio.CancelledError:
            # Only close() cancels these; ending normally keeps Python 3.11's stream callback
            # from logging the cancellation as an error.
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await read_head(reader, HEAD_TIMEOUT)
        except BadRequest as exc:
            await refuse(writer, exc.status, str(exc), f"{exc}: refused by the network proxy")
            return
        if head.method == "CONNECT":
            host, port = _authority(head.target)
        else:
            url = urlsplit(head.target)
            if url.scheme.lower() != "http" or not url.hostname:
                await refuse(writer, 400, "Bad Request", "send absolute http:// URLs or CONNECT")
                return
            try:
                host, port = url.hostname, url.port or 80
            except ValueError:
                host, port = "", 0
        if not host or not 0 < port < 65536:
            await refuse(writer, 400, "Bad Request", f"bad target {printable(head.target)}")
            return
        path = ""
        if head.method != "CONNECT":
            refusal = self._plain_refusal(head, host, port)
            if isinstance(refusal, Decision):
                await self._deny(writer, host, port, refusal)
                return
            if isinstance(refusal, BadRequest):
                self._record(printable(host), port, Decision(False, str(refusal)))
                await refuse(writer, refusal.status, str(refusal), f"{refusal}: refused by the "
                             "session's network proxy")  # fmt: skip
                return
            path = refusal
        decision = await self.decide(host, port)
        addresses: list[str] = []
        if decision.allowed:
            host = normalise_host(host)
            try:
                addresses = await asyncio.wait_for(self._resolve(host, port), CONNECT_TIMEOUT)
            except (OSError, asyncio.TimeoutError) as exc:
                why = str(exc) or "timed out"
                decision = Decision(True, f"{decision.reason}; {host} did not resolve ({why})")
            else:
                decision = self.policy.check_addresses(host, port, addresses) or decision
        if not decision.allowed:
            await self._deny(writer, host, port, decision)
            return
        secret = self.policy.headers_for(host)
        if head.method == "CONNECT" and secret and self._authority is not None:
            assert self._upstream is not None
            await intercept(
                reader,
                writer,
                host=host,
                port=port,
                addresses=addresses,
                reason=decision.reason,
                headers=secret,
                server=self._authority.server_context(host),
                upstream=self._upstream,
                record=lambda d, added: self._record(host, port, d, added),
            )
            return
        upstream = await connect_first(addresses, port, CONNECT_TIMEOUT)
        if upstream is None:
            shown = f"{printable(host)}:{port}"
            decision = Decision(True, f"{decision.reason}; could not connect")
            self._record(host, port, decision)
            await refuse(writer, 502, f"cannot reach {shown}", f"cannot reach {shown}")
            return
        up_reader, up_writer = upstream
        try:
            if head.method == "CONNECT":
                self._record(host, port, decision)
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                self._record(host, port, decision)
                up_writer.write(
                    request_head(
                        head.method,
                        path,
                        head.version,
                        head.lines,
                        host=host_header(host, port, 80),
                    )
                )
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            up_writer.close()

    def _plain_refusal(self, head: Head, host: str, port: int) -> str | Decision | BadRequest:
        """A plain-HTTP request's path, or why it is refused before anything is decided: its
        host has secrets (sent over verified TLS only, never in clear text to whoever answers
        for the name), or its ``Host`` names another host than its URL."""
        try:
            name = normalise_host(host)
        except ValueError:
            return head.target  # not a host name: the policy refuses it, saying so
        listed = self.policy.decide(name, port)
        if name in self.policy.secret_hosts and (
            listed.allowed or self.policy.undecided(name, port)
        ):
            where = name if port == 443 else f"{name}:{port}"
            return Decision(
                False,
                f"use https://{where}/: the policy has secrets for {name}, which are only sent "
                "over TLS to the verified host; plain HTTP to it is refused",
            )
        try:
            return check_host(head, name, port)
        except BadRequest as exc:
            return exc

    async def _deny(
        self, writer: asyncio.StreamWriter, host: str, port: int, decision: Decision
    ) -> None:
        self._record(printable(host), port, decision)
        message = (
            f"connection to {printable(host)}:{port} denied by the session's network policy "
            f"({self.policy.describe()}): {decision.reason}"
        )
        await refuse(writer, 403, message, message)


def _authority(target: str) -> tuple[str, int]:
    host, _, port = target.rpartition(":")
    if not port.isdigit():
        return "", 0
    return host.strip("[]"), int(port)
