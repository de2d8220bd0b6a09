"""Test HTTP and HTTPS servers on loopback, and the proxy as a kernel reaches it, for the
network policy's tests.

``http_server`` serves a handler made by ``answering`` on an ephemeral port, and maps test host
names to loopback in the proxy's own resolver while it runs (the proxy runs on the host, so
loopback is reachable from it, never from a kernel). ``Upstream`` is a certificate authority
of the tests (standing for the public ones a real host chains to) that signs a certificate per
host name; ``self_signed`` is a certificate nobody trusts. Each server is a real
``http.server``; ``https_server`` puts it behind the standard library's TLS. ``Recorder`` is
an origin that keeps every byte it receives, whatever they are (what an attack test asserts
on). ``proxy_route`` starts a session's proxy behind the real forwarder on a loopback port,
the kernel's way in; ``Route`` sends through it, as a client or as raw bytes.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import socket
import socketserver
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from jupyter_exec import NetworkPolicy
from jupyter_exec.network import forwarder, proxy
from jupyter_exec.network.proxy import NetworkProxy

SECRET = "Bearer jx-test-7f3a9c-secret"


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers every GET with its ``greeting``, ``{path}`` in it filled (``hello <path>``);
    ``/echo`` quotes the Authorization header back (a careless API that quotes the request,
    so a secret the proxy adds comes back); ``/big?n=BYTES`` sends that many bytes. Remembers
    each request's headers in ``seen``."""

    greeting: ClassVar[str] = "hello {path}"
    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen.append(dict(self.headers.items()))
        body = self.greeting.format(path=self.path).encode()
        if self.path == "/echo":
            body = f"you sent {self.headers.get('Authorization')}".encode()
        elif self.path.startswith("/big?n="):
            body = b"x" * int(self.path.split("=", 1)[1])
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def answering(greeting: str) -> type[Echo]:
    """An :class:`Echo` of its own (its own ``seen``) that answers with ``greeting``."""
    return type("Echo", (Echo,), {"greeting": greeting, "seen": []})


@contextlib.contextmanager
def http_server(handler: type[Echo], *names: str) -> Iterator[int]:
    """``handler`` served on a loopback port (yielded), its ``seen`` emptied first; ``names``
    resolve to loopback in the proxy's resolver while it runs."""
    handler.seen.clear()
    proxy.resolver_overrides.update(dict.fromkeys(names, "127.0.0.1"))
    try:
        with _running(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as server:
            yield server.server_address[1]
    finally:
        for name in names:
            proxy.resolver_overrides.pop(name, None)


_FETCH = """
import json, urllib.request, urllib.error
def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as r:
            return [r.status, r.read().decode()]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode()]
    except Exception as e:
        return ["error", f"{type(e).__name__}: {e}"]
"""


def fetch_code(timeout: int) -> str:
    """Kernel code that defines ``fetch(url)``: ``[status, body]``, an HTTP error's too, or
    ``["error", what went wrong]`` (a refused connection, a timeout after ``timeout`` s)."""
    return _FETCH.replace("TIMEOUT", str(timeout))


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, Any],
    ca: bool,
    also: tuple[str, ...] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer[0])
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()),
            critical=False,
        )
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False),
            critical=True,
        )
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in (subject, *also)]),
            critical=False,
        )
    return builder.sign(issuer[1], hashes.SHA256())


class Upstream:
    """The tests' own certificate authority, written to ``folder/upstream-ca.pem``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._subject = _name("jupyter-exec tests upstream CA")
        self.cert = _certificate(
            "jupyter-exec tests upstream CA", self._key, (self._subject, self._key), ca=True
        )
        self.ca_file = folder / "upstream-ca.pem"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, host: str, *also: str) -> tuple[Path, Path]:
        """A certificate for ``host`` (and the names ``also``) signed by this authority:
        (cert file, key file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(host, key, (self._subject, self._key), ca=False, also=also)
        return self._write(host, cert, key)

    def self_signed(self, host: str) -> tuple[Path, Path]:
        """A certificate for ``host`` that signs itself: trusted by nobody."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(host, key, (_name(host), key), ca=False)
        return self._write(f"{host}-self", cert, key)

    def _write(self, stem: str, cert: x509.Certificate, key: Any) -> tuple[Path, Path]:
        cert_file, key_file = self.folder / f"{stem}.pem", self.folder / f"{stem}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_pem_key(key))
        return cert_file, key_file


@contextlib.contextmanager
def https_server(
    cert: tuple[Path, Path], handler: type[http.server.BaseHTTPRequestHandler] = Echo
) -> Iterator[http.server.ThreadingHTTPServer]:
    """A ``handler`` server on loopback speaking TLS with ``cert`` (an ephemeral port)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*cert)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with _running(server):
        yield server


_Server = TypeVar("_Server", bound=socketserver.BaseServer)


@contextlib.contextmanager
def _running(server: _Server) -> Iterator[_Server]:
    """``server`` serving in a thread of its own; shut down and closed on exit."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def https_echo(handler: type[Echo], folder: Path, *names: str) -> Iterator[tuple[int, Path]]:
    """``handler`` over TLS on loopback, its certificate for ``names`` from an :class:`Upstream`
    made in ``folder``, the names resolving to loopback in the proxy's resolver meanwhile:
    (its port, the authority's file). A host with secrets is reached over HTTPS only, so this
    is the server such tests fetch from, giving the file as the policy's ``extra_ca`` (or as
    ``SSL_CERT_FILE`` to a process whose policy cannot name one)."""
    handler.seen.clear()
    folder.mkdir(parents=True, exist_ok=True)
    upstream = Upstream(folder)
    proxy.resolver_overrides.update(dict.fromkeys(names, "127.0.0.1"))
    try:
        with https_server(upstream.issue(*names), handler) as server:
            yield server.server_address[1], upstream.ca_file
    finally:
        for name in names:
            proxy.resolver_overrides.pop(name, None)


def der_of(pem_file: Path) -> bytes:
    """The DER bytes of the first certificate in a PEM file (what ``getpeercert(True)`` gives)."""
    return x509.load_pem_x509_certificate(pem_file.read_bytes()).public_bytes(
        serialization.Encoding.DER
    )


@dataclass
class Route:
    """A started proxy and the forwarder's TCP port in front of it (what HTTP_PROXY names)."""

    proxy: NetworkProxy
    port: int

    def get(self, url: str) -> tuple[int, str]:
        """GET ``url`` with urllib through the proxy: (status, body), an HTTP error's too."""
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler(
                {"http": f"http://127.0.0.1:{self.port}", "https": f"http://127.0.0.1:{self.port}"}
            )
        )
        try:
            with opener.open(url, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read().decode()

    def send(self, raw: bytes) -> bytes:
        """``raw`` written to the forwarder as a kernel would; all it answers until it closes."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(raw)
            return _read_all(sock)

    def tunnel(
        self, target: str, context: ssl.SSLContext, server_hostname: str | None, raw: bytes
    ) -> bytes:
        """``CONNECT target``, TLS inside with ``context`` (sending ``server_hostname`` as the
        SNI), then ``raw``: all the proxy answers inside the tunnel until it closes."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            answer = b""
            while not answer.endswith(b"\r\n\r\n"):
                chunk = sock.recv(1)
                if not chunk:
                    return answer
                answer += chunk
            if not answer.startswith(b"HTTP/1.1 200"):
                return answer + _read_all(sock)
            with context.wrap_socket(sock, server_hostname=server_hostname) as tls:
                tls.sendall(raw)
                return _read_all(tls)


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(ssl.SSLError, ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


@contextlib.asynccontextmanager
async def proxy_route(policy: NetworkPolicy) -> AsyncIterator[Route]:
    """A proxy for ``policy`` (session ``s1``, its folder in the system's temporary folder,
    whose path is short enough for a socket) and a forwarder in front of it."""
    started = await NetworkProxy(policy, session="s1").start()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    forwarding = (listener, str(started.socket_path))
    threading.Thread(target=_forward, args=forwarding, daemon=True).start()
    try:
        yield Route(started, listener.getsockname()[1])
    finally:
        await started.close()
        listener.close()


def _forward(listener: socket.socket, path: str) -> None:
    """The forwarder's loop, ended by closing ``listener``: its accept then fails, and that
    failure is the end (left to the thread, it would fail whichever test runs next)."""
    with contextlib.suppress(OSError):
        forwarder.serve(listener, path)


class Recorder(socketserver.ThreadingTCPServer):
    """An origin on ``address`` (loopback) that keeps all it receives on each connection in
    :attr:`received` and answers ``200 ok``; behind TLS with ``cert`` when given."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: str = "127.0.0.1", cert: tuple[Path, Path] | None = None):
        self.received: list[bytes] = []
        self._context: ssl.SSLContext | None = None
        if cert is not None:
            self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._context.load_cert_chain(*cert)
        super().__init__((address, 0), _Recording)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def everything(self) -> bytes:
        return b"".join(self.received)


class _Recording(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server = self.server
        assert isinstance(server, Recorder)
        sock: socket.socket = self.request
        sock.settimeout(10)
        data = b""
        with contextlib.suppress(OSError):
            if server._context is not None:
                sock = server._context.wrap_socket(sock, server_side=True)
            while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
                data += chunk
            server.received.append(data)
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        with contextlib.suppress(OSError):
            sock.close()


@contextlib.contextmanager
def recording(
    address: str = "127.0.0.1", cert: tuple[Path, Path] | None = None, *names: str
) -> Iterator[Recorder]:
    """A :class:`Recorder` serving while the block runs; ``names`` resolve to ``address`` in
    the proxy's resolver meanwhile."""
    server = Recorder(address, cert)
    proxy.resolver_overrides.update(dict.fromkeys(names, address))
    try:
        with _running(server):
            yield server
    finally:
        for name in names:
            proxy.resolver_overrides.pop(name, None)
