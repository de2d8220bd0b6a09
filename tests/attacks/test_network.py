"""Attacks on the network policy's credentials, as a kernel makes them: raw bytes written to its
proxy (through the real forwarder on a loopback port, the kernel's only way out), against a
loopback origin that records every byte it is sent.

Each attack must fail with a 4xx whose text says why, and the asset (the policy's secret, or a
service that is not on the internet) must stay out of reach: the origin never received the
secret. Findings of issue 20: 3 (a secret sent under another Host, over plain HTTP, through
framing tricks and TRACE), 5 (an ``ask`` answer for one port opening the others), 6 (CGNAT and
other non-global addresses), 9 (a private key in ``extra_ca``), 10 (an ``ask`` callback's
exception text reaching the kernel).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from jupyter_exec import InvalidArgument, KernelStartError, NetworkPolicy
from jupyter_exec.network import NetworkRequest, proxy
from jupyter_exec.network.proxy import NetworkProxy
from tests.tls_servers import SECRET, Recorder, Route, Upstream, proxy_route, recording

TOKEN = SECRET.split()[-1].encode()
"""What must never reach the wrong place: the secret's token (its ``Bearer`` part aside)."""


def _secrets(*hosts: str) -> dict[str, dict[str, str]]:
    return {host: {"Authorization": SECRET} for host in hosts}


def _status(reply: bytes) -> int:
    assert reply.startswith(b"HTTP/1.1 "), reply[:200]
    return int(reply[9:12])


def _body(reply: bytes) -> str:
    return reply.partition(b"\r\n\r\n")[2].decode()


# -- finding 3: plain HTTP ---------------------------------------------------------------------


@pytest.fixture
def origin() -> Iterator[Recorder]:
    """A plain-HTTP origin on loopback that ``api.test`` and ``web.test`` resolve to."""
    with recording("127.0.0.1", None, "api.test", "web.test") as server:
        yield server


async def test_f3_plain_http_with_another_host_header_is_refused(
    origin: Recorder, tmp_path: Path
) -> None:
    policy = NetworkPolicy(allow=["api.test", "127.0.0.1"], secrets=_secrets("api.test"))
    async with proxy_route(policy) as route:
        raw = f"GET http://api.test:{origin.port}/ HTTP/1.1\r\nHost: evil.example\r\n\r\n".encode()
        reply = await asyncio.to_thread(route.send, raw)
    assert _status(reply) == 403
    assert f"use https://api.test:{origin.port}/" in _body(reply)
    assert "only sent over TLS" in _body(reply)
    assert origin.received == []  # not forwarded at all, let alone with the secret
    [entry] = route.proxy.connections
    assert (entry.host, entry.decision, entry.secret) == ("api.test", "denied", False)


@pytest.mark.parametrize("port", [80, 443, 8080])
async def test_f3_plain_http_to_a_host_with_secrets_is_refused_with_the_reason(
    origin: Recorder, tmp_path: Path, port: int
) -> None:
    """On any port, with a Host that matches: the secret is for TLS to the verified host only."""
    policy = NetworkPolicy(allow=["api.test", "127.0.0.1"], secrets=_secrets("api.test"))
    proxy.resolver_overrides["api.test"] = "127.0.0.1"
    async with proxy_route(policy) as route:
        raw = f"GET http://api.test:{port}/v1 HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n"
        reply = await asyncio.to_thread(route.send, raw.encode())
        status, body = await asyncio.to_thread(route.get, f"http://api.test:{origin.port}/v1")
    assert _status(reply) == 403
    shown = "api.test" if port == 443 else f"api.test:{port}"
    assert f"use https://{shown}/: the policy has secrets for api.test" in _body(reply)
    assert status == 403  # what urllib in the kernel shows: the same reason
    assert "secrets are only sent" in body or "only sent over TLS" in body
    assert origin.received == []


# Requests that two HTTP parsers could read two ways, or that echo: refused before anything is
# sent on. ``{host}`` is the host the request is for (its URL's, or the tunnel's).
SMUGGLING = {
    "two Host headers": "GET {target} HTTP/1.1\r\nHost: {host}\r\nHost: evil.example\r\n\r\n",
    "a bare LF header line": "GET {target} HTTP/1.1\r\nHost: {host}\nX-A: 1\r\n\r\n",
    "a bare LF before Host": "GET {target} HTTP/1.1\r\nX-A: 1\nHost: evil.example\r\n\r\n",
    "a lone CR": "GET {target} HTTP/1.1\r\nHost: {host}\rX-A: 1\r\n\r\n",
    "an obs-fold line": "GET {target} HTTP/1.1\r\nHost: {host}\r\nX-A: 1\r\n evil.example\r\n\r\n",
    "a NUL": "GET {target} HTTP/1.1\r\nHost: {host}\r\nX-A: a\0b\r\n\r\n",
    "a space before the colon": "GET {target} HTTP/1.1\r\nHost : evil.example\r\n\r\n",
    "Content-Length and Transfer-Encoding": (
        "POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 4\r\n"
        "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    ),
    "two Content-Lengths": (
        "POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nContent-Length: 40\r\n\r\n"
    ),
    "a Transfer-Encoding that is not chunked": (
        "POST {target} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked, identity\r\n\r\n"
    ),
    "TRACE": "TRACE {target} HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "TRACK": "TRACK {target} HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "HTTP/2 prior knowledge": "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "Host with userinfo": "GET {target} HTTP/1.1\r\nHost: {host}@evil.example\r\n\r\n",
    "Host on another port": "GET {target} HTTP/1.1\r\nHost: {host}:1\r\n\r\n",
    "no Host in HTTP/1.1": "GET {target} HTTP/1.1\r\nX-A: 1\r\n\r\n",
}


@pytest.mark.parametrize("attack", list(SMUGGLING))
async def test_f3_plain_http_framing_tricks_are_refused(
    origin: Recorder, tmp_path: Path, attack: str
) -> None:
    """The same rules hold for plain HTTP to a host without secrets: nothing is passed on."""
    policy = NetworkPolicy(allow=["web.test", "127.0.0.1"])
    async with proxy_route(policy) as route:
        host = f"web.test:{origin.port}"
        raw = SMUGGLING[attack].format(target=f"http://{host}/", host="web.test")
        if attack == "Host on another port":
            raw = raw.replace(f"web.test:{origin.port}:1", "web.test:1")
        reply = await asyncio.to_thread(route.send, raw.encode())
        assert 400 <= _status(reply) < 500
        assert "refused" in _body(reply)
        assert origin.received == []
        # the same proxy still serves a request that is well formed
        fine = f"GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        assert _status(await asyncio.to_thread(route.send, fine)) == 200
    assert len(origin.received) == 1


async def test_f3_plain_http_with_another_host_header_is_misdirected(
    origin: Recorder, tmp_path: Path
) -> None:
    policy = NetworkPolicy(allow=["web.test", "127.0.0.1"])
    async with proxy_route(policy) as route:
        raw = f"GET http://web.test:{origin.port}/ HTTP/1.1\r\nHost: evil.example\r\n\r\n"
        reply = await asyncio.to_thread(route.send, raw.encode())
    assert _status(reply) == 421
    assert "names 'evil.example'" in _body(reply)
    assert origin.received == []


# -- finding 3: inside intercepted HTTPS ---------------------------------------------------------


@dataclass
class Intercepted:
    route: Route
    origins: dict[str, Recorder]
    trusted: ssl.SSLContext
    """What the kernel verifies with: the session's authority (its bundle's extra part)."""

    def target(self, host: str) -> str:
        return f"{host}:{self.origins[host].port}"

    def send(self, host: str, raw: bytes, sni: str | None = None) -> bytes:
        """``raw`` inside an intercepted tunnel to ``host``, SNI ``sni`` (default: the host)."""
        name = host if sni is None else sni
        context = self.trusted
        if name != host:  # the attacker checks nothing: any name, or none ("") in its hello
            context = ssl.create_default_context(cadata=self._pem)
            context.check_hostname = False
        return self.route.tunnel(self.target(host), context, name or None, raw)

    @property
    def _pem(self) -> str:
        folder = self.route.proxy.folder
        assert folder is not None
        return (folder / proxy.TRUST_NAME).read_text()


@pytest.fixture
async def intercepted(tmp_path: Path) -> AsyncIterator[Intercepted]:
    """``secure.test`` and ``other.test`` (both with the secret) behind TLS origins that record
    every byte; the proxy verifies them with the tests' authority."""
    upstream = Upstream(tmp_path)
    hosts = ("secure.test", "other.test")
    policy = NetworkPolicy(
        allow=[*hosts, "127.0.0.1"], secrets=_secrets(*hosts), extra_ca=upstream.ca_file
    )
    with contextlib.ExitStack() as stack:
        origins = {
            h: stack.enter_context(recording("127.0.0.1", upstream.issue(h), h)) for h in hosts
        }
        async with proxy_route(policy) as route:
            assert route.proxy.folder is not None
            pem = (route.proxy.folder / proxy.TRUST_NAME).read_text()
            yield Intercepted(route, origins, ssl.create_default_context(cadata=pem))


def _nothing_sent(origins: dict[str, Recorder]) -> None:
    """The origins got TLS handshakes at most: no request, and never the secret."""
    for origin in origins.values():
        assert TOKEN not in origin.everything
        assert origin.everything == b""


async def test_f3_intercepted_request_with_the_secret_reaches_its_host(
    intercepted: Intercepted,
) -> None:
    """The control: a well-formed request gets the secret, so the refusals below are real."""
    raw = b"GET /ok HTTP/1.1\r\nHost: secure.test\r\n\r\n"
    reply = await asyncio.to_thread(intercepted.send, "secure.test", raw)
    assert _status(reply) == 200
    [received] = intercepted.origins["secure.test"].received
    assert received.startswith(b"GET /ok HTTP/1.1\r\nHost: secure.test\r\n")
    assert b"Authorization: " + SECRET.encode() + b"\r\n" in received


@pytest.mark.parametrize("attack", list(SMUGGLING))
async def test_f3_intercepted_framing_tricks_are_refused(
    intercepted: Intercepted, attack: str
) -> None:
    raw = SMUGGLING[attack].format(target="/", host="secure.test")
    if attack == "Host on another port":
        raw = raw.replace("secure.test:1", f"{intercepted.target('secure.test')}1")
    reply = await asyncio.to_thread(intercepted.send, "secure.test", raw.encode())
    assert 400 <= _status(reply) < 500
    assert "refused by the network proxy" in _body(reply)
    _nothing_sent(intercepted.origins)
    [entry] = intercepted.route.proxy.connections
    assert (entry.decision, entry.secret) == ("denied", False)


@pytest.mark.parametrize(
    ("sni", "host_header", "why"),
    [
        ("other.test", "secure.test", "the TLS server name (SNI) is 'other.test'"),
        ("", "secure.test", "the TLS server name (SNI) is no name"),
        ("secure.test", "other.test", "names 'other.test'"),
        ("secure.test", "evil.example", "names 'evil.example'"),
    ],
)
async def test_f3_intercepted_host_or_sni_differing_from_the_tunnel_is_misdirected(
    intercepted: Intercepted, sni: str, host_header: str, why: str
) -> None:
    """SNI and Host must both name the CONNECT host, even another host with a secret of its
    own (the secret of one host must not go to a name the same server answers for)."""
    raw = f"GET / HTTP/1.1\r\nHost: {host_header}\r\n\r\n".encode()
    reply = await asyncio.to_thread(intercepted.send, "secure.test", raw, sni)
    assert reply.startswith(b"HTTP/1.1 421 Misdirected Request")
    assert why in _body(reply)
    _nothing_sent(intercepted.origins)


async def test_f3_intercepted_absolute_target_for_another_host_is_misdirected(
    intercepted: Intercepted,
) -> None:
    raw = b"GET https://evil.example/ HTTP/1.1\r\nHost: secure.test\r\n\r\n"
    reply = await asyncio.to_thread(intercepted.send, "secure.test", raw)
    assert _status(reply) == 421
    assert "names 'evil.example'" in _body(reply)
    _nothing_sent(intercepted.origins)


# -- finding 5: an ask answer is for one host and one port -------------------------------------


async def test_f5_ask_yes_for_443_does_not_open_22() -> None:
    """The finding as filed, on the proxy's own decision (nothing is dialled)."""
    asked: list[tuple[str, int]] = []

    async def ask(request: NetworkRequest) -> bool:
        asked.append((request.host, request.port))
        return request.port == 443

    async with proxy_route(NetworkPolicy(ask=ask)) as route:
        first = await route.proxy.decide("db.test", 443)
        again = await route.proxy.decide("DB.test.", 443)
        ssh = await route.proxy.decide("db.test", 22)
    assert (first.allowed, again.allowed) == (True, True)
    assert (ssh.allowed, ssh.reason) == (False, "denied when asked")
    assert asked == [("db.test", 443), ("db.test", 22)]  # asked again, with the port


async def test_f5_an_answer_for_one_port_is_not_one_for_another() -> None:
    """End to end, as the kernel: yes for one port of a host, then another port of it."""
    asked: list[tuple[str, int]] = []
    with (
        recording("127.0.0.1", None, "db.test") as web,
        recording("127.0.0.1", None, "db.test") as other,
    ):

        async def ask(request: NetworkRequest) -> bool:
            asked.append((request.host, request.port))
            return request.port == web.port

        async with proxy_route(NetworkPolicy(allow=["127.0.0.1"], ask=ask)) as route:
            replies = []
            for port in (web.port, web.port, other.port):
                raw = f"GET http://db.test:{port}/ HTTP/1.1\r\nHost: db.test:{port}\r\n\r\n"
                replies.append(await asyncio.to_thread(route.send, raw.encode()))
    assert [_status(reply) for reply in replies] == [200, 200, 403]
    assert "denied when asked" in _body(replies[2])
    assert asked == [("db.test", web.port), ("db.test", other.port)]
    assert len(web.received) == 2
    assert other.received == []


# -- finding 6: addresses that are not on the internet ------------------------------------------

NOT_GLOBAL = [
    "100.64.0.1",  # CGNAT
    "100.100.100.200",  # a cloud metadata service in CGNAT space
    "10.0.0.1",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "127.0.0.1",
    "0.0.0.0",
    "198.18.0.1",  # benchmarking
    "192.0.2.1",  # documentation
    "224.0.0.1",  # multicast
    "fc00::1",
    "fe80::1",
    "::1",
    "::ffff:10.0.0.1",  # IPv4-mapped: is 10.0.0.1
    "::ffff:100.100.100.200",
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "2002:a00:1::1",  # 6to4 carrying 10.0.0.1
    "fec0::1",  # site-local
]


@pytest.mark.parametrize("address", NOT_GLOBAL)
async def test_f6_names_resolving_to_non_global_addresses_are_refused(
    tmp_path: Path, address: str
) -> None:
    """An allowed name (a wildcard even) leads nowhere that is not the internet. The refusal
    comes before any connection: the address is never dialled."""
    policy = NetworkPolicy(allow=["*.test"])
    proxy.resolver_overrides["meta.test"] = address
    try:
        async with proxy_route(policy) as route:
            plain = b"GET http://meta.test/latest HTTP/1.1\r\nHost: meta.test\r\n\r\n"
            replies = [
                await asyncio.to_thread(route.send, plain),
                await asyncio.to_thread(route.send, b"CONNECT meta.test:443 HTTP/1.1\r\n\r\n"),
            ]
    finally:
        proxy.resolver_overrides.pop("meta.test", None)
    for reply in replies:
        assert _status(reply) == 403
        assert "not globally routable address the allow list does not name" in _body(reply)


@pytest.mark.parametrize("address", ["100.64.0.1", "100.100.100.200", "10.0.0.1", "fc00::1"])
async def test_f6_address_literals_need_an_address_rule(tmp_path: Path, address: str) -> None:
    shown = f"[{address}]" if ":" in address else address
    async with proxy_route(NetworkPolicy(allow=["*"])) as route:
        reply = await asyncio.to_thread(route.send, f"CONNECT {shown}:80 HTTP/1.1\r\n\r\n".encode())
    assert _status(reply) == 403
    assert "not in the allow list" in _body(reply)


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("100.100.100.200", "100.64.0.0/10"),
        ("100.64.0.1", "100.64.0.1"),
        ("::ffff:10.0.0.1", "10.0.0.0/8"),
        ("64:ff9b::a00:1", "10.0.0.0/8"),
        ("fc00::1", "fc00::/7"),
    ],
)
def test_f6_an_address_rule_is_the_override(address: str, rule: str) -> None:
    policy = NetworkPolicy(allow=["*.test", rule])
    assert policy.check_addresses("meta.test", 80, [address]) is None
    refused = NetworkPolicy(allow=["*.test"]).check_addresses("meta.test", 80, [address])
    assert refused is not None
    assert not refused.allowed


def test_f6_one_non_global_answer_among_public_ones_refuses_the_name() -> None:
    """A name that answers a public address and a private one (a DNS-rebinding set-up) is
    refused as a whole: the proxy dials only addresses it checked, so none may be private."""
    policy = NetworkPolicy(allow=["*.test"])
    refused = policy.check_addresses("meta.test", 80, ["93.184.215.14", "100.100.100.200"])
    assert refused is not None
    assert "100.100.100.200" in refused.reason
    assert policy.check_addresses("meta.test", 80, ["93.184.215.14"]) is None


async def test_f6_loopback_allowed_by_an_address_rule_only(tmp_path: Path) -> None:
    """End to end on a second loopback address: refused, then reached once a rule names it."""
    with recording("127.0.0.2", None, "side.test") as side:
        request = f"GET http://side.test:{side.port}/ HTTP/1.1\r\nHost: side.test:{side.port}"
        raw = (request + "\r\n\r\n").encode()
        async with proxy_route(NetworkPolicy(allow=["side.test", "127.0.0.1"])) as route:
            refused = await asyncio.to_thread(route.send, raw)
        assert _status(refused) == 403
        assert "resolves to 127.0.0.2" in _body(refused)
        assert side.received == []
        async with proxy_route(NetworkPolicy(allow=["side.test", "127.0.0.2"])) as route:
            allowed = await asyncio.to_thread(route.send, raw)
        assert _status(allowed) == 200
        assert len(side.received) == 1


# -- finding 9: extra_ca holds certificates only -----------------------------------------------


def _key_pem(kind: str) -> bytes:
    """A private key in the PEM form ``kind`` names."""
    if kind == "RSA PRIVATE KEY":
        key: object = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        form, crypt = serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    else:
        key = ec.generate_private_key(ec.SECP256R1())
        crypt = serialization.NoEncryption()
        form = serialization.PrivateFormat.PKCS8
        if kind == "EC PRIVATE KEY":
            form = serialization.PrivateFormat.TraditionalOpenSSL
        elif kind == "ENCRYPTED PRIVATE KEY":
            crypt = serialization.BestAvailableEncryption(b"passphrase")
        elif kind == "OPENSSH PRIVATE KEY":
            form = serialization.PrivateFormat.OpenSSH
    pem = key.private_bytes(serialization.Encoding.PEM, form, crypt)  # type: ignore[attr-defined]
    assert f"-----BEGIN {kind}-----".encode() in pem
    return bytes(pem)


KEY_KINDS = [
    "PRIVATE KEY",
    "RSA PRIVATE KEY",
    "EC PRIVATE KEY",
    "ENCRYPTED PRIVATE KEY",
    "OPENSSH PRIVATE KEY",
]


@pytest.mark.parametrize("kind", KEY_KINDS)
def test_f9_extra_ca_with_a_private_key_is_refused(tmp_path: Path, kind: str) -> None:
    upstream = Upstream(tmp_path)
    key = _key_pem(kind)
    bundle = tmp_path / "ca-and-key.pem"
    bundle.write_bytes(upstream.ca_file.read_bytes() + key)
    with pytest.raises(InvalidArgument, match=f"holds a private key \\({kind}\\)") as refused:
        NetworkPolicy(allow=["a.test"], extra_ca=bundle)
    assert key.decode().splitlines()[1] not in str(refused.value)  # named, never quoted


async def test_f9_a_key_added_after_the_policy_never_reaches_the_bundle(tmp_path: Path) -> None:
    """The file is read again when the proxy starts: a key slipped in by then stops the start,
    and nothing of it is written where the kernel could read it."""
    upstream = Upstream(tmp_path)
    ca = tmp_path / "ca.pem"
    ca.write_bytes(upstream.ca_file.read_bytes())
    policy = NetworkPolicy(allow=["a.test"], secrets=_secrets("a.test"), extra_ca=ca)
    key = _key_pem("PRIVATE KEY")
    ca.write_bytes(ca.read_bytes() + key)
    with tempfile.TemporaryDirectory(prefix="jx-f9-") as root:  # short: a socket's path
        with pytest.raises(KernelStartError, match=r"holds a private key \(PRIVATE KEY\)"):
            await NetworkProxy(policy, root=root).start()
        assert list(Path(root).iterdir()) == []  # no folder, no bundle


async def test_f9_only_certificate_blocks_reach_the_kernel(tmp_path: Path) -> None:
    """Text around the blocks and other blocks are not copied; certificates are re-encoded."""
    upstream = Upstream(tmp_path)
    marker = "jx-marker-outside-the-blocks"
    ca = tmp_path / "ca.pem"
    ca.write_text(
        f"{marker}\nsubject=CN=tests\n{upstream.ca_file.read_text()}"
        f"{marker}\n-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n{marker}\n"
    )
    policy = NetworkPolicy(allow=["a.test"], extra_ca=ca)
    async with proxy_route(policy) as route:
        assert route.proxy.folder is not None
        trusted = (route.proxy.folder / proxy.TRUST_NAME).read_text()
    assert marker not in trusted
    assert "CRL" not in trusted
    assert trusted == upstream.ca_file.read_text()


# -- finding 10: an ask callback's exception stays with the person ------------------------------

MARKER = "jx-ask-failure-marker"


@pytest.mark.parametrize("blocking", [True, False])
async def test_f10_ask_exception_text_never_reaches_the_kernel(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, blocking: bool
) -> None:
    def fail(request: NetworkRequest) -> bool:
        raise RuntimeError(f"{MARKER}: token {SECRET} for {request.host}:{request.port}")

    async def fail_async(request: NetworkRequest) -> bool:
        return fail(request)

    ask = fail if blocking else fail_async
    policy = NetworkPolicy(allow=["api.test"], secrets=_secrets("api.test"), ask=ask)
    caplog.set_level(logging.INFO, logger="jupyter_exec")
    async with proxy_route(policy) as route:
        plain = b"GET http://db.test/ HTTP/1.1\r\nHost: db.test\r\n\r\n"
        seen = [
            await asyncio.to_thread(route.send, plain),
            await asyncio.to_thread(route.send, b"CONNECT db.test:443 HTTP/1.1\r\n\r\n"),
        ]
        records = route.proxy.connections
    for reply in seen:
        assert _status(reply) == 403
        assert "the ask callback failed" in _body(reply)
        assert MARKER.encode() not in reply
    assert all(MARKER not in c.reason and c.decision == "denied" for c in records)
    # the person gets it, in the log, without the secret
    assert MARKER in caplog.text
    assert SECRET not in caplog.text
    assert TOKEN.decode() not in caplog.text
