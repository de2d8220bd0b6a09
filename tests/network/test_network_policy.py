"""NetworkPolicy (rules, validation, decisions) and the host-side proxy, without Docker.

The proxy is driven end to end on this machine: a real HTTP server on loopback, reached by a
name mapped in the proxy's resolver, through the real forwarder relaying a TCP port to the
proxy's Unix socket, with ``urllib`` configured by the same variables the kernel gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography import x509

from jupyter_exec import (
    InvalidArgument,
    KernelStartError,
    MissingDependency,
    NetworkPolicy,
    Session,
    SessionOptions,
)
from jupyter_exec.network import proxy
from jupyter_exec.network.policy import NetworkRequest, parse_rule
from jupyter_exec.network.proxy import NetworkProxy
from tests.tls_servers import (
    SECRET,
    Echo,
    Route,
    Upstream,
    answering,
    der_of,
    http_server,
    https_server,
)
from tests.tls_servers import proxy_route as _route

# -- the policy ----------------------------------------------------------------------------


def test_default_deny_and_reasons() -> None:
    policy = NetworkPolicy(allow=["pypi.org", "files.pythonhosted.org:443"])
    assert policy.decide("pypi.org", 443).allowed
    assert policy.decide("PyPI.org.", 80).allowed  # case and trailing dot do not matter
    assert policy.decide("files.pythonhosted.org", 443).allowed
    refused = policy.decide("files.pythonhosted.org", 80)
    assert not refused.allowed
    assert refused.reason == "not in the allow list"
    assert not policy.decide("evil.example", 443).allowed
    assert not policy.decide("pypi.org.evil.example", 443).allowed
    assert not NetworkPolicy().decide("pypi.org", 443).allowed
    assert policy.describe() == "allowed: pypi.org, files.pythonhosted.org:443"


def test_wildcards_match_subdomains_only() -> None:
    policy = NetworkPolicy(allow=["*.example.org"])
    assert policy.decide("a.example.org", 443).allowed
    assert policy.decide("a.b.example.org", 443).allowed
    assert not policy.decide("example.org", 443).allowed
    assert not policy.decide("badexample.org", 443).allowed
    assert NetworkPolicy(allow=["*"]).decide("anything.test", 1).allowed


def test_deny_wins() -> None:
    policy = NetworkPolicy(allow=["*.example.org", "10.0.0.0/8"], deny=["secret.example.org"])
    decision = policy.decide("secret.example.org", 443)
    assert not decision.allowed
    assert "secret.example.org" in decision.reason
    assert policy.decide("public.example.org", 443).allowed
    assert not NetworkPolicy(allow=["*"], deny=["*"]).decide("a.test", 80).allowed


def test_addresses_and_ranges() -> None:
    policy = NetworkPolicy(
        allow=["10.0.0.0/8", "192.168.1.5:8080", "[::1]:443"], deny=["10.9.0.0/16"]
    )
    assert policy.decide("10.1.2.3", 80).allowed
    assert not policy.decide("10.9.1.1", 80).allowed
    assert policy.decide("192.168.1.5", 8080).allowed
    assert not policy.decide("192.168.1.5", 80).allowed
    assert policy.decide("::1", 443).allowed
    assert policy.decide("[::1]", 443).allowed
    assert not policy.decide("::1", 80).allowed
    # an address rule does not allow names, and a name rule does not allow addresses
    assert not NetworkPolicy(allow=["10.0.0.0/8"]).decide("ten.test", 80).allowed
    assert not NetworkPolicy(allow=["pypi.org"]).decide("151.101.0.223", 443).allowed


def test_resolved_addresses_are_checked() -> None:
    policy = NetworkPolicy(allow=["*.example.org", "127.0.0.1"], deny=["203.0.113.0/24"])
    denied = policy.check_addresses("a.example.org", 443, ["203.0.113.7"])
    assert denied is not None
    assert "203.0.113.0/24" in denied.reason
    local = policy.check_addresses("a.example.org", 443, ["169.254.169.254"])
    assert local is not None
    assert "private" in local.reason
    assert policy.check_addresses("a.example.org", 443, ["127.0.0.1"]) is None  # listed
    assert policy.check_addresses("a.example.org", 443, ["93.184.215.14"]) is None


@pytest.mark.parametrize(
    "rule",
    [
        "",
        "   ",
        "https://pypi.org",
        "pypi.org/simple",
        "pypi.org:0",
        "pypi.org:65536",
        "pypi.org:http",
        "py pi.org",
        "a*.example.org",
        "*example.org",
        "-bad.example",
        "bad-.example",
        "a..b",
        "x" * 64 + ".org",
        "10.0.0.0/33",
        "[::1",
        "[::1]x",
        "user@host",
        "host?x",
        "host\r\nX-Injected: 1",
        "\x00",
    ],
)
def test_malformed_rules_are_invalid_argument(rule: str) -> None:
    with pytest.raises(InvalidArgument, match="NetworkPolicy allow"):
        NetworkPolicy(allow=[rule])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"allow": "pypi.org"},
        {"allow": 5},
        {"allow": [5]},
        {"deny": [None]},
        {"secrets": ["pypi.org"]},
        {"secrets": {"pypi.org": {}}},
        {"secrets": {"10.0.0.1": {"Authorization": "x"}}},
        {"secrets": {"pypi.org": {"Bad Header": "x"}}},
        {"secrets": {"pypi.org": {"Authorization": "a\r\nb"}}},
        {"secrets": {"pypi.org": {"Authorization": 5}}},
        {"secrets": {"*bad": {"Authorization": "x"}}},
        {"ask": "yes"},
    ],
)
def test_malformed_policies_are_invalid_argument(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument, match="NetworkPolicy"):
        NetworkPolicy(**kwargs)


def test_secret_values_never_shown() -> None:
    policy = NetworkPolicy(
        allow=["api.test"], secrets={"api.test": {"Authorization": "Bearer s3cr3t"}}
    )
    assert "s3cr3t" not in repr(policy)
    assert "s3cr3t" not in str(policy.to_dict())
    assert policy.to_dict()["secrets"] == {"api.test": ["Authorization"]}
    assert policy.headers_for("api.test") == (("Authorization", "Bearer s3cr3t"),)
    with pytest.raises(InvalidArgument) as error:
        NetworkPolicy(secrets={"api.test": {"Authorization": "s3cr3t\n"}})
    assert "s3cr3t" not in str(error.value)


def test_frozen_compared_and_hashed_by_value() -> None:
    one = NetworkPolicy(allow=["pypi.org", "PyPI.org"], deny=["*.evil.test"])
    two = NetworkPolicy(allow=["pypi.org"], deny=["*.EVIL.test"])
    assert one == two
    assert hash(one) == hash(two)
    assert one.allow == ("pypi.org",)
    assert one != NetworkPolicy(allow=["pypi.org"])
    with pytest.raises(AttributeError):
        one.allow = ("x",)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        one._allow = ()
    assert NetworkPolicy.from_value({"allow": ["pypi.org"], "deny": ["*.evil.test"]}) == two
    with pytest.raises(InvalidArgument, match="unknown network policy key"):
        NetworkPolicy.from_value({"alow": ["pypi.org"]})


def test_rule_text_is_normalised() -> None:
    assert parse_rule("Bücher.example:8080").text == "xn--bcher-kva.example:8080"
    assert parse_rule("10.1.2.3/8").text == "10.0.0.0/8"
    assert parse_rule("[::1]:443").text == "[::1]:443"


def test_session_options_take_a_policy_for_docker_only() -> None:
    options = SessionOptions(backend="docker", network={"allow": ["pypi.org"]})
    assert options.network == NetworkPolicy(allow=["pypi.org"])
    with pytest.raises(InvalidArgument, match="only for Docker kernels"):
        SessionOptions(network=NetworkPolicy(allow=["pypi.org"]))
    with pytest.raises(InvalidArgument, match="only for Docker kernels"):
        SessionOptions(backend="remote", url="http://x", network=NetworkPolicy())
    with pytest.raises(InvalidArgument, match="keep only the policy"):
        SessionOptions(backend="docker", docker={"network": True}, network=NetworkPolicy())
    with pytest.raises(InvalidArgument, match="NetworkPolicy allow"):
        SessionOptions(backend="docker", network={"allow": ["https://pypi.org"]})


# -- the proxy, end to end on this machine -----------------------------------------------


_Handler = answering("hello from {path}")


@pytest.fixture
def web_server() -> Iterator[int]:
    with http_server(_Handler, "web.test", "other.test") as port:
        yield port


async def test_allowed_name_passes_and_is_recorded(web_server: int, tmp_path: Any) -> None:
    policy = NetworkPolicy(allow=["web.test", "127.0.0.1"])
    async with _route(policy) as route:
        mark = route.proxy.mark()
        status, body = await asyncio.to_thread(route.get, f"http://web.test:{web_server}/a?b=1")
        assert (status, body) == (200, "hello from /a?b=1")
        [entry] = route.proxy.since(mark)
        assert (entry.host, entry.port, entry.decision) == ("web.test", web_server, "allowed")
        assert "web.test" in entry.reason
        assert _Handler.seen[-1]["Connection"] == "close"
        folder = route.proxy.folder
        assert folder is not None
        assert sorted(p.name for p in folder.iterdir()) == ["forwarder.py", "proxy.sock"]
        assert folder.parent.stat().st_mode & 0o777 == 0o711  # not listable: the name is the key
        assert len(folder.name) == 24
        assert "Proxy-Connection" not in _Handler.seen[-1]


async def test_denied_host_gets_a_403_naming_host_and_policy(
    web_server: int, tmp_path: Any
) -> None:
    policy = NetworkPolicy(allow=["web.test", "127.0.0.1"])
    async with _route(policy) as route:
        status, body = await asyncio.to_thread(route.get, f"http://other.test:{web_server}/")
        assert status == 403
        assert body.startswith(
            f"connection to other.test:{web_server} denied by the session's network policy "
            "(allowed: web.test, 127.0.0.1)"
        )
        # HTTPS through CONNECT: urllib shows the reason phrase, which carries the message
        with pytest.raises(urllib.error.URLError, match="denied by the session's network policy"):
            await asyncio.to_thread(route.get, "https://evil.example/")
        assert [(c.host, c.decision) for c in route.proxy.connections] == [
            ("other.test", "denied"),
            ("evil.example", "denied"),
        ]
        assert _Handler.seen == []


async def test_allowed_name_to_an_unlisted_local_address_is_refused(
    web_server: int, tmp_path: Any
) -> None:
    async with _route(NetworkPolicy(allow=["web.test"])) as route:
        status, body = await asyncio.to_thread(route.get, f"http://web.test:{web_server}/")
        assert status == 403
        assert "resolves to 127.0.0.1" in body
        assert _Handler.seen == []


async def test_connect_tunnels_bytes(web_server: int, tmp_path: Any) -> None:
    async with _route(NetworkPolicy(allow=["web.test", "127.0.0.1"])) as route:

        def tunnel() -> bytes:
            with socket.create_connection(("127.0.0.1", route.port), timeout=30) as sock:
                sock.sendall(f"CONNECT web.test:{web_server} HTTP/1.1\r\n\r\n".encode())
                sock.sendall(b"GET /t HTTP/1.0\r\nHost: web.test\r\n\r\n")
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
                return data

        data = await asyncio.to_thread(tunnel)
        assert data.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200")
        assert data.endswith(b"hello from /t")


async def test_secret_headers_added_for_their_host_only(web_server: int, tmp_path: Any) -> None:
    policy = NetworkPolicy(
        allow=["web.test", "other.test", "127.0.0.1"],
        secrets={"web.test": {"Authorization": "Bearer s3cr3t"}},
    )
    async with _route(policy) as route:
        status, body = await asyncio.to_thread(route.get, f"http://web.test:{web_server}/")
        assert status == 403  # secrets go over verified TLS only: plain HTTP to web.test is refused
        assert f"use https://web.test:{web_server}/" in body
        status, _body = await asyncio.to_thread(route.get, f"http://other.test:{web_server}/")
        assert status == 200
        [seen] = _Handler.seen
        assert "Authorization" not in seen


async def test_ask_decides_once_per_host(web_server: int, tmp_path: Any) -> None:
    asked: list[NetworkRequest] = []

    async def ask(request: NetworkRequest) -> bool:
        asked.append(request)
        return request.host == "web.test"

    policy = NetworkPolicy(allow=["127.0.0.1"], deny=["denied.test"], ask=ask)
    async with _route(policy) as route:
        route.proxy.cell = 3
        for _ in range(2):
            status, _body = await asyncio.to_thread(route.get, f"http://web.test:{web_server}/")
            assert status == 200
        status, body = await asyncio.to_thread(route.get, f"http://other.test:{web_server}/")
        assert status == 403
        assert "denied when asked" in body
        status, body = await asyncio.to_thread(route.get, f"http://denied.test:{web_server}/")
        assert status == 403
        assert "denied by rule 'denied.test'" in body
        assert [(r.host, r.port, r.session, r.cell) for r in asked] == [
            ("web.test", web_server, "s1", 3),
            ("other.test", web_server, "s1", 3),
        ]


async def test_a_blocking_ask_that_fails_denies(web_server: int, tmp_path: Any) -> None:
    def ask(request: NetworkRequest) -> bool:
        raise RuntimeError("nobody home")

    async with _route(NetworkPolicy(allow=["127.0.0.1"], ask=ask)) as route:
        status, body = await asyncio.to_thread(route.get, f"http://web.test:{web_server}/")
        assert status == 403
        assert "the ask callback failed" in body
        assert "nobody home" not in body  # the exception's text is the person's, in the log


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"garbage\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: web.test\r\n\r\n",  # origin form: not a proxy request
        b"GET ftp://web.test/ HTTP/1.1\r\n\r\n",
        b"CONNECT web.test HTTP/1.1\r\n\r\n",
        b"CONNECT web.test:99999 HTTP/1.1\r\n\r\n",
        b"CONNECT a..b:443 HTTP/1.1\r\n\r\n",
        b"CONNECT \x01\xff:443 HTTP/1.1\r\n\r\n",
        b"GET http://[::1/ HTTP/1.1\r\n\r\n",
    ],
)
async def test_malformed_requests_are_refused(
    web_server: int, tmp_path: Any, request_bytes: bytes
) -> None:
    async with _route(NetworkPolicy(allow=["*", "127.0.0.1"])) as route:

        def send() -> bytes:
            with socket.create_connection(("127.0.0.1", route.port), timeout=30) as sock:
                sock.sendall(request_bytes)
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
                return data

        reply = await asyncio.to_thread(send)
        assert reply == b"" or reply.startswith((b"HTTP/1.1 400", b"HTTP/1.1 403"))
        assert _Handler.seen == []
        assert route.proxy.serving


async def test_closed_proxy_fails_closed(web_server: int, tmp_path: Any) -> None:
    async with _route(NetworkPolicy(allow=["web.test", "127.0.0.1"])) as route:
        await route.proxy.close()
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            await asyncio.to_thread(route.get, f"http://web.test:{web_server}/")
        assert _Handler.seen == []


def test_a_session_refuses_a_policy_for_a_local_kernel_before_starting() -> None:
    with pytest.raises(InvalidArgument, match="only for Docker kernels"):
        Session(network=NetworkPolicy(allow=["pypi.org"]), start=False)


def test_redaction_replaces_values_and_their_tokens() -> None:
    from jupyter_exec.network.redact import REDACTED, redact, secret_needles

    needles = secret_needles(["Bearer abcdefgh123", "short x"])
    assert "Bearer abcdefgh123" in needles
    outputs = [
        {"output_type": "stream", "text": "a Bearer abcdefgh123 b abcdefgh123 c"},
        {"output_type": "display_data", "data": {"text/plain": ["x", "abcdefgh123"]}},
    ]
    cleaned = redact(outputs, needles)
    assert cleaned[0]["text"] == f"a {REDACTED} b {REDACTED} c"
    assert cleaned[1]["data"]["text/plain"] == ["x", REDACTED]
    assert outputs[0]["text"].startswith("a Bearer")  # the original is untouched
    assert "x" not in needles  # a short last word is not redacted on its own


async def test_a_removed_socket_fails_closed_and_revives(web_server: int, tmp_path: Any) -> None:
    async with _route(NetworkPolicy(allow=["web.test", "127.0.0.1"])) as route:
        assert not await route.proxy.revive()  # nothing to do while it serves
        route.proxy.socket_path.unlink()  # a temp-dir cleaner, say
        assert not route.proxy.serving
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            await asyncio.to_thread(route.get, f"http://web.test:{web_server}/")
        assert await route.proxy.revive()
        status, _body = await asyncio.to_thread(route.get, f"http://web.test:{web_server}/")
        assert status == 200
        await route.proxy.close()
        assert not await route.proxy.revive()  # closed means closed


async def test_a_root_too_deep_for_a_socket_is_a_clear_error(tmp_path: Any) -> None:
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    with pytest.raises(KernelStartError, match="107-character limit"):
        await NetworkProxy(NetworkPolicy(), root=str(deep)).start()
    assert list(deep.iterdir()) == []  # nothing left behind


async def test_connections_beyond_the_cap_are_closed(web_server: int, tmp_path: Any) -> None:
    async with _route(NetworkPolicy(allow=["web.test", "127.0.0.1"])) as route:
        path = str(route.proxy.socket_path)
        idle = [await asyncio.open_unix_connection(path) for _ in range(proxy.MAX_CONNECTIONS)]
        try:
            reader, writer = await asyncio.open_unix_connection(path)
            assert await asyncio.wait_for(reader.read(), 30) == b""  # closed at once, no answer
            writer.close()
        finally:
            for _reader, writer in idle:
                writer.close()
        deadline = asyncio.get_running_loop().time() + 30
        while route.proxy._tasks and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)  # until the proxy has seen the idle ones go
        status, _body = await asyncio.to_thread(route.get, f"http://web.test:{web_server}/")
        assert status == 200  # the proxy serves again


# -- HTTPS: interception for hosts with secrets, tunnels for the others --------------------


@dataclass
class TLSRoute:
    route: Route
    upstream: Upstream
    ports: dict[str, int]
    """Host name -> the port of its HTTPS server (all on loopback)."""
    trusted: bytes
    """What the proxy asked the kernel to trust (its folder's TRUST_NAME)."""

    def context(self, trusted: bool = True) -> ssl.SSLContext:
        """What the kernel verifies with: its bundle's extra part (the session's CA and the
        policy's extra_ca), or the system's alone."""
        if not trusted:
            return ssl.create_default_context()
        return ssl.create_default_context(cadata=self.trusted.decode())

    def get(self, host: str, path: str = "/", trusted: bool = True) -> tuple[int, str, bytes]:
        """GET ``https://host:port/path`` with urllib through the proxy: (status, body, the DER
        certificate the client was shown)."""
        port = self.route.port
        shown: list[bytes] = []

        class Handler(urllib.request.HTTPSHandler):
            def https_open(self, req: Any) -> Any:
                response = super().https_open(req)
                shown.append(response.fp.raw._sock.getpeercert(True))
                return response

        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({"https": f"http://127.0.0.1:{port}"}),
            Handler(context=self.context(trusted)),
        )
        url = f"https://{host}:{self.ports[host]}{path}"
        request = urllib.request.Request(url, headers={"Authorization": "from the kernel"})
        try:
            with opener.open(request, timeout=30) as response:
                return response.status, response.read().decode(), shown[0]
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read().decode(), b""


@pytest.fixture
async def tls_route(tmp_path: Path) -> AsyncIterator[TLSRoute]:
    upstream = Upstream(tmp_path)
    certs = {
        "secure.test": upstream.issue("secure.test"),
        "plain.test": upstream.issue("plain.test"),
        "bad.test": upstream.self_signed("bad.test"),
    }
    policy = NetworkPolicy(
        allow=[*certs, "127.0.0.1"],
        secrets={"secure.test": {"Authorization": SECRET}, "bad.test": {"X-Key": "k" * 16}},
        extra_ca=upstream.ca_file,
    )
    Echo.seen.clear()
    with contextlib.ExitStack() as stack:
        servers = {name: stack.enter_context(https_server(c)) for name, c in certs.items()}
        proxy.resolver_overrides.update(dict.fromkeys(servers, "127.0.0.1"))
        try:
            async with _route(policy) as route:
                ports = {name: s.server_address[1] for name, s in servers.items()}
                assert route.proxy.folder is not None
                trusted = (route.proxy.folder / proxy.TRUST_NAME).read_bytes()
                yield TLSRoute(route, upstream, ports, trusted)
        finally:
            proxy.resolver_overrides.clear()


async def test_https_to_a_host_with_secrets_is_intercepted_and_recorded(
    tls_route: TLSRoute, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    status, body, shown = await asyncio.to_thread(tls_route.get, "secure.test", "/a?b=1")
    assert (status, body) == (200, "hello /a?b=1")
    assert Echo.seen[-1]["Authorization"] == SECRET  # the kernel's own header was replaced
    assert Echo.seen[-1]["Connection"] == "close"
    # the kernel was shown the session's certificate for the host, not the server's
    issued = x509.load_der_x509_certificate(shown)
    assert issued.issuer.rfc4514_string() == "CN=jupyter-exec session CA s1"
    assert shown != der_of(tmp_path / "secure.test.pem")
    # a second request is a second record
    await asyncio.to_thread(tls_route.get, "secure.test", "/again")
    port = tls_route.ports["secure.test"]
    assert [c.to_dict() for c in tls_route.route.proxy.connections] == [
        {
            "host": "secure.test",
            "port": port,
            "decision": "allowed",
            "reason": "allowed by rule 'secure.test'; HTTPS intercepted",
            "secret": True,
        }
    ] * 2
    assert SECRET not in repr(tls_route.route.proxy.connections)
    assert "secure.test" in caplog.text
    assert SECRET not in caplog.text
    assert SECRET.split()[-1] not in caplog.text


async def test_https_fails_closed_when_the_proxy_is_gone(tls_route: TLSRoute) -> None:
    await tls_route.route.proxy.close()
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        await asyncio.to_thread(tls_route.get, "secure.test")
    assert Echo.seen == []


async def test_https_to_a_host_without_secrets_is_tunnelled(
    tls_route: TLSRoute, tmp_path: Path
) -> None:
    status, body, shown = await asyncio.to_thread(tls_route.get, "plain.test")
    assert (status, body) == (200, "hello /")
    assert shown == der_of(tmp_path / "plain.test.pem")  # the server's own certificate
    assert Echo.seen[-1]["Authorization"] == "from the kernel"  # untouched: TLS end to end
    [entry] = tls_route.route.proxy.connections
    assert (entry.host, entry.decision, entry.secret) == ("plain.test", "allowed", False)
    assert "secret" not in entry.to_dict()


async def test_an_invalid_upstream_certificate_fails_naming_the_host(
    tls_route: TLSRoute,
) -> None:
    port = tls_route.ports["bad.test"]
    with pytest.raises(urllib.error.URLError) as failed:
        await asyncio.to_thread(tls_route.get, "bad.test")
    message = str(failed.value)
    assert f"Tunnel connection failed: 502 the certificate of bad.test:{port} is not valid" in (
        message
    )
    assert "self-signed certificate" in message
    [entry] = tls_route.route.proxy.connections
    assert (entry.host, entry.decision, entry.secret) == ("bad.test", "denied", False)
    assert entry.reason.startswith(f"the certificate of bad.test:{port} is not valid")
    assert Echo.seen == []


async def test_a_kernel_that_does_not_trust_the_session_ca_sends_nothing(
    tls_route: TLSRoute,
) -> None:
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        await asyncio.to_thread(tls_route.get, "secure.test", "/", False)
    deadline = asyncio.get_running_loop().time() + 30
    while not tls_route.route.proxy.connections and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)  # the proxy sees the kernel give up after the kernel does
    [entry] = tls_route.route.proxy.connections
    assert "the kernel did not complete TLS" in entry.reason
    assert not entry.secret
    assert Echo.seen == []


async def test_a_request_for_another_name_inside_the_tunnel_is_misdirected(
    tls_route: TLSRoute,
) -> None:
    port = tls_route.ports["secure.test"]

    def send() -> bytes:
        with socket.create_connection(("127.0.0.1", tls_route.route.port), timeout=30) as raw:
            raw.sendall(f"CONNECT secure.test:{port} HTTP/1.1\r\n\r\n".encode())
            assert raw.recv(4096).startswith(b"HTTP/1.1 200")
            with tls_route.context().wrap_socket(raw, server_hostname="secure.test") as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: plain.test\r\n\r\n")
                data = b""
                with contextlib.suppress(ssl.SSLError):
                    while chunk := sock.recv(65536):
                        data += chunk
                return data

    reply = await asyncio.to_thread(send)
    assert reply.startswith(b"HTTP/1.1 421 Misdirected Request")
    assert b"names 'plain.test'" in reply
    [entry] = tls_route.route.proxy.connections
    assert (entry.decision, entry.secret) == ("denied", False)
    assert Echo.seen == []


async def test_the_kernel_gets_certificates_only_and_the_ca_is_constrained(
    tls_route: TLSRoute,
) -> None:
    folder = tls_route.route.proxy.folder
    assert folder is not None
    assert sorted(p.name for p in folder.iterdir()) == [
        "forwarder.py",
        "proxy.sock",
        proxy.TRUST_NAME,
    ]
    trusted = (folder / proxy.TRUST_NAME).read_bytes()
    assert b"PRIVATE KEY" not in trusted
    ours, theirs = x509.load_pem_x509_certificates(trusted)
    assert theirs == tls_route.upstream.cert  # the policy's extra_ca, for tunnelled hosts
    constraints = ours.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert sorted(n.value for n in constraints.value.permitted_subtrees or []) == [
        "bad.test",
        "secure.test",
    ]


def test_the_kernel_bundle_is_the_image_bundle_and_the_trusted_certificates(
    tmp_path: Path,
) -> None:
    from jupyter_exec.network.bundle import needs_bundle, write_bundle

    assert not needs_bundle(tmp_path)
    (tmp_path / proxy.TRUST_NAME).write_bytes(b"-----OURS-----\n")
    assert needs_bundle(tmp_path)
    write_bundle(tmp_path, b"-----SYSTEM-----\n\n")
    assert (tmp_path / proxy.BUNDLE_NAME).read_bytes() == b"-----SYSTEM-----\n-----OURS-----\n"
    assert (tmp_path / proxy.BUNDLE_NAME).stat().st_mode & 0o777 == 0o644
    env = proxy.ca_env()
    assert set(env) == {
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
        "NODE_EXTRA_CA_CERTS",
    }
    assert set(env.values()) == {f"{proxy.CONTAINER_DIR}/{proxy.BUNDLE_NAME}"}


def test_extra_ca_is_checked_when_the_policy_is_made(tmp_path: Path) -> None:
    upstream = Upstream(tmp_path)
    policy = NetworkPolicy(allow=["a.test"], extra_ca=upstream.ca_file)
    assert policy.extra_ca == str(upstream.ca_file)
    assert policy.to_dict()["extra_ca"] == str(upstream.ca_file)
    assert NetworkPolicy.from_value(policy.to_dict() | {"ask": None}) == policy
    assert "extra_ca" not in NetworkPolicy().to_dict()
    (tmp_path / "junk.pem").write_text("not a certificate")
    for bad in (tmp_path / "missing.pem", tmp_path / "junk.pem", 42, ""):
        with pytest.raises(InvalidArgument, match="extra_ca"):
            NetworkPolicy(extra_ca=bad)  # type: ignore[arg-type]


async def test_an_extra_ca_gone_before_the_proxy_starts_is_a_clear_error(tmp_path: Path) -> None:
    upstream = Upstream(tmp_path)
    policy = NetworkPolicy(secrets={"a.test": {"X-Key": "v"}}, extra_ca=upstream.ca_file)
    upstream.ca_file.unlink()
    with pytest.raises(KernelStartError, match=r"extra_ca .* cannot be used"):
        await NetworkProxy(policy).start()


def test_secrets_without_the_network_extra_are_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "cryptography" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    NetworkPolicy(allow=["api.test"])  # no secrets: no interception, no extra needed
    with pytest.raises(MissingDependency, match=r"pip install 'jupyter-exec\[network\]'"):
        NetworkPolicy(allow=["api.test"], secrets={"api.test": {"Authorization": "x"}})


def test_the_core_does_not_import_the_tls_dependency() -> None:
    # The Docker SDK imports paramiko when it is installed (the cluster extra brings it), and
    # paramiko imports cryptography: that is the SDK's choice, not ours, so it is kept out here.
    code = (
        "import sys\n"
        "sys.modules['paramiko'] = None\n"
        "import jupyter_exec\n"
        "from jupyter_exec.network import proxy\n"
        "from jupyter_exec.docker import provisioner\n"
        "jupyter_exec.NetworkPolicy(secrets={'a.test': {'X': 'y'}})\n"
        "print(sorted(m for m in ('cryptography', 'jupyter_exec.network.tls') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


async def test_interception_on_python_3_10_without_streamwriter_start_tls(
    tls_route: TLSRoute, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback for Python 3.10 (the loop's start_tls and a new writer), run here."""
    from jupyter_exec.network import intercept

    monkeypatch.setattr(intercept, "sys", SimpleNamespace(version_info=(3, 10)))
    status, body, _shown = await asyncio.to_thread(tls_route.get, "secure.test", "/old")
    assert (status, body) == (200, "hello /old")
    assert Echo.seen[-1]["Authorization"] == SECRET
