"""A Docker kernel behind a NetworkPolicy, with a real engine: what passes, what is refused,
what is recorded, and that nothing gets around the proxy.

A test HTTP server on this machine's loopback is reached by a name mapped in the proxy's own
resolver (the proxy runs on the host, so loopback is reachable from it, never from the kernel).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from jupyter_exec import AsyncSession, Execution, NetworkPolicy, Session
from jupyter_exec.network import NetworkRequest, proxy
from tests.tls_servers import (
    Echo,
    Upstream,
    answering,
    der_of,
    fetch_code,
    http_server,
    https_server,
)

pytestmark = pytest.mark.docker

SECRET = "Bearer jx-test-7f3a9c-secret"


# ``/echo`` quotes the request's Authorization header: the secret the proxy adds comes back.
_Handler = answering("hello through the policy")


@pytest.fixture
def web_port() -> Iterator[int]:
    with http_server(_Handler, "web.test", "open.test", "evil.test") as port:
        yield port


FETCH = fetch_code(30)

# Kernel code: is the secret (never written whole in it) in the kernel's environment or in
# any process's it can read? Tests add where else to look (files) after it.
SEEK_SECRET = (
    "import os, subprocess\n"
    f"needle = {SECRET[:10]!r} + {SECRET[10:]!r}\n"
    "print('environ', needle in repr(dict(os.environ)))\n"
    "print('proc', any(needle.encode() in open(f'/proc/{p}/environ', 'rb').read()\n"
    "      for p in os.listdir('/proc') if p.isdigit()\n"
    "      and os.access(f'/proc/{p}/environ', os.R_OK)))\n"
)


async def _json(session: AsyncSession, code: str) -> Any:
    execution = await session.execute(code)
    execution.raise_for_error()
    return json.loads(execution.stdout)


async def test_policy_allows_denies_records_and_cannot_be_bypassed(
    kernel_image: str, tmp_path: Path, web_port: int
) -> None:
    policy = NetworkPolicy(
        allow=["web.test", "open.test", "127.0.0.1"],
        secrets={"web.test": {"Authorization": SECRET}},
    )
    async with AsyncSession(
        work_dir=tmp_path / "w", backend="docker", docker={"image": kernel_image}, network=policy
    ) as session:
        (await session.execute(FETCH)).raise_for_error()

        # allowed, by name, through the variables the kernel was given
        allowed = await session.execute(f"print(json.dumps(fetch('http://open.test:{web_port}/')))")
        assert json.loads(allowed.stdout) == [200, "hello through the policy"]
        assert [(c.host, c.port, c.decision) for c in allowed.connections] == [
            ("open.test", web_port, "allowed")
        ]
        assert "Authorization" not in _Handler.seen[-1]

        # denied: a 403 naming the host and the policy, for plain HTTP and for CONNECT; and
        # plain HTTP to the host with secrets (they go over verified TLS only), saying so
        denied = await _json(
            session,
            f"print(json.dumps([fetch('http://evil.test:{web_port}/'), "
            f"fetch('https://evil.example/'), fetch('http://web.test:{web_port}/')]))",
        )
        assert denied[0][0] == 403
        assert denied[0][1].startswith(
            f"connection to evil.test:{web_port} denied by the session's network policy "
            "(allowed: web.test, open.test, 127.0.0.1)"
        )
        assert denied[1][0] == "error"
        assert "Tunnel connection failed: 403 connection to evil.example:443 denied" in denied[1][1]
        assert denied[2][0] == 403
        assert (
            f"use https://web.test:{web_port}/: the policy has secrets for web.test"
            in (denied[2][1])
        )
        assert len(_Handler.seen) == 1  # evil.test and web.test map to it: they never got there

        # around the proxy: a direct socket, the host's bridge address, DNS: all fail
        bypass = await _json(
            session,
            "import socket, os\n"
            "out = {}\n"
            "for name, target in [('ip', ('1.1.1.1', 80)), ('bridge', ('172.17.0.1', "
            f"{web_port})), ('loopback', ('127.0.0.1', {web_port}))]:\n"
            "    try:\n"
            "        socket.create_connection(target, timeout=5).close(); out[name] = 'connected'\n"
            "    except OSError as e:\n"
            "        out[name] = type(e).__name__\n"
            "try:\n"
            "    socket.getaddrinfo('pypi.org', 443); out['dns'] = 'resolved'\n"
            "except OSError as e:\n"
            "    out['dns'] = type(e).__name__\n"
            "out['interfaces'] = sorted(n for _, n in socket.if_nameindex())\n"
            "print(json.dumps(out))",
        )
        assert bypass["ip"] != "connected"
        assert bypass["bridge"] != "connected"
        assert bypass["loopback"] != "connected"  # the container's loopback, not the host's
        assert bypass["dns"] == "gaierror"
        assert bypass["interfaces"] == ["lo"]

        # the secret never reaches the kernel: environment, files, outputs, notebook
        leak = await session.execute(
            SEEK_SECRET
            + "r = subprocess.run(['grep', '-rlsF', needle, '/run', '/tmp', '/work', '/etc',"
            " '/opt/packages'], capture_output=True, text=True)\n"
            "print('files', repr(r.stdout))"
        )
        assert leak.stdout.splitlines() == ["environ False", "proc False", "files ''"]

        # decisions are in the notebook's cell metadata
        notebook = json.loads(Path(session.notebook_path or "").read_text())
        recorded = [cell["metadata"]["jupyter_exec"].get("network") for cell in notebook["cells"]]
        assert recorded[1] == [
            {
                "host": "open.test",
                "port": web_port,
                "decision": "allowed",
                "reason": "allowed by rule 'open.test'",
            }
        ]
        assert [c["decision"] for c in recorded[2]] == ["denied", "denied", "denied"]
        assert recorded[3] is None  # direct sockets never reach the proxy
        assert SECRET not in Path(session.notebook_path or "").read_text()

        # the proxy's socket disappears: the next cell finds the proxy listening again, says so
        kernel = session._kernel
        assert kernel is not None
        kernel.network.socket_path.unlink()
        revived = await session.execute(f"print(fetch('http://open.test:{web_port}/')[0])")
        assert revived.stdout.strip() == "200"
        notebook = json.loads(Path(session.notebook_path or "").read_text())
        assert "restarted" in notebook["cells"][-1]["metadata"]["jupyter_exec"]["network_proxy"]

        # the proxy dies: requests fail closed
        before = len(_Handler.seen)
        await kernel.network.close()
        dead = await _json(session, f"print(json.dumps(fetch('http://open.test:{web_port}/')))")
        assert dead[0] == "error"
        assert len(_Handler.seen) == before


def test_blocking_session_keeps_its_policy_across_a_restart(
    kernel_image: str, tmp_path: Path, web_port: int
) -> None:
    policy = NetworkPolicy(allow=["web.test", "127.0.0.1"])
    with Session(
        work_dir=tmp_path / "w", backend="docker", docker={"image": kernel_image}, network=policy
    ) as session:
        session.execute(FETCH).raise_for_error()
        first = session.execute(f"print(fetch('http://web.test:{web_port}/')[0])")
        assert first.stdout.strip() == "200"
        session.restart()  # a new container: the forwarder comes back, the proxy stayed
        session.execute(FETCH).raise_for_error()
        again = session.execute(f"print(fetch('http://web.test:{web_port}/')[0])")
        assert again.stdout.strip() == "200"
        assert [c.decision for c in again.connections] == ["allowed"]
        proxy_folder = session._async._kernel.network.folder  # type: ignore[union-attr]
        assert proxy_folder.is_dir()
    assert not proxy_folder.exists()  # closed with the session


@pytest.fixture
def tls_servers(tmp_path: Path) -> Iterator[tuple[Upstream, dict[str, int]]]:
    """HTTPS servers on loopback, each with a certificate of its own: ``secure.test`` and
    ``plain.test`` signed by the tests' authority, ``bad.test`` self-signed."""
    certs = tmp_path / "certs"
    certs.mkdir()
    upstream = Upstream(certs)
    issued = {
        "secure.test": upstream.issue("secure.test"),
        "plain.test": upstream.issue("plain.test"),
        "bad.test": upstream.self_signed("bad.test"),
    }
    Echo.seen.clear()
    with contextlib.ExitStack() as stack:
        servers = {name: stack.enter_context(https_server(c)) for name, c in issued.items()}
        proxy.resolver_overrides.update(dict.fromkeys(servers, "127.0.0.1"))
        try:
            yield upstream, {name: s.server_address[1] for name, s in servers.items()}
        finally:
            proxy.resolver_overrides.clear()


HTTPS = """
import json, ssl, urllib.request, http.client
from pip._vendor import requests  # the image's requests: REQUESTS_CA_BUNDLE, as pip uses it
def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return [r.status, r.read().decode()]
    except Exception as e:
        return ["error", f"{type(e).__name__}: {e}"]
def shown(host, port):
    # the certificate a client is shown for host through the proxy (verified by the bundle)
    c = http.client.HTTPSConnection('127.0.0.1', 3128, timeout=30)
    c.set_tunnel(host, port)
    c.connect()
    der = c.sock.getpeercert(True)
    c.close()
    return der.hex()
"""


async def test_https_secrets_reach_the_server_and_never_the_kernel(
    kernel_image: str, tmp_path: Path, tls_servers: tuple[Upstream, dict[str, int]]
) -> None:
    upstream, ports = tls_servers
    policy = NetworkPolicy(
        allow=[*ports, "127.0.0.1"],
        secrets={"secure.test": {"Authorization": SECRET}, "bad.test": {"Authorization": SECRET}},
        extra_ca=upstream.ca_file,
    )
    work = tmp_path / "w"
    async with AsyncSession(
        work_dir=work, backend="docker", docker={"image": kernel_image}, network=policy
    ) as session:
        (await session.execute(HTTPS)).raise_for_error()
        secure, plain, bad = (f"https://{h}:{ports[h]}" for h in ports)

        # urllib and requests, configured by nothing but the kernel's environment
        run = await session.execute(
            f"print(json.dumps([fetch('{secure}/u'), requests.get('{secure}/r', timeout=30).text,"
            " ssl.get_default_verify_paths().cafile]))",
        )
        got = json.loads(run.stdout)
        assert got == [[200, "hello /u"], "hello /r", "/run/jxnet/ca-bundle.pem"]
        assert [seen["Authorization"] for seen in Echo.seen] == [SECRET, SECRET]
        records = run.connections
        assert [(c.host, c.decision, c.secret) for c in records] == [
            ("secure.test", "allowed", True),
            ("secure.test", "allowed", True),
        ]
        assert records[0].reason == "allowed by rule 'secure.test'; HTTPS intercepted"

        # intercepted: the kernel is shown the session's certificate; tunnelled: the server's own
        seen_certs = await _json(
            session,
            f"print(json.dumps([shown('secure.test', {ports['secure.test']}),"
            f" shown('plain.test', {ports['plain.test']}), fetch('{plain}/p')]))",
        )
        assert seen_certs[1] == der_of(upstream.folder / "plain.test.pem").hex()
        issuer = x509.load_der_x509_certificate(bytes.fromhex(seen_certs[0])).issuer
        assert issuer.rfc4514_string().startswith("CN=jupyter-exec session CA")
        assert seen_certs[2] == [200, "hello /p"]
        assert "Authorization" not in Echo.seen[-1]  # no secret for a tunnelled host

        # an upstream certificate nobody trusts: the request fails, naming the host
        run = await session.execute(f"print(json.dumps(fetch('{bad}/')))")
        refused = json.loads(run.stdout)
        assert refused[0] == "error"
        assert (
            f"Tunnel connection failed: 502 the certificate of bad.test:{ports['bad.test']} "
            "is not valid (self-signed certificate)"
        ) in refused[1]
        assert [c.decision for c in run.connections] == ["denied"]
        assert len(Echo.seen) == 3  # bad.test never got a request

        # the secret and the authority's key: nowhere in the kernel
        leak = await session.execute(
            SEEK_SECRET + "for n in (needle, 'PRIVATE' + ' KEY'):\n"
            "    r = subprocess.run(['grep', '-rlsF', n, '/run', '/tmp', '/work',"
            " '/opt/packages'], capture_output=True, text=True)\n"
            "    print('files', repr(r.stdout))\n"
            "print('bundle', open('/run/jxnet/ca-bundle.pem').read().count('BEGIN CERTIFICATE')"
            " > 100)\n"
            "del n, needle, r  # the search words are the cell's, not the kernel's state"
        )
        assert leak.stdout.splitlines() == [
            "environ False",
            "proc False",
            "files ''",
            "files ''",
            "bundle True",
        ]
        echoed = await session.execute(f"print(fetch('{secure}/echo'))")
        assert echoed.stdout.strip() == "[200, 'you sent [secret redacted]']"

        # the proxy's socket disappears: the next cell is intercepted by the revived proxy
        kernel = session._kernel
        assert kernel is not None
        kernel.network.socket_path.unlink()
        revived = await _json(session, f"print(json.dumps(fetch('{secure}/again')))")
        assert revived == [200, "hello /again"]
        assert Echo.seen[-1]["Authorization"] == SECRET

        notebook = Path(session.notebook_path or "").read_text()
        cells = json.loads(notebook)["cells"]
        assert cells[1]["metadata"]["jupyter_exec"]["network"][0]["secret"] is True
    assert SECRET not in notebook
    assert "jx-test-7f3a9c" not in notebook
    on_host = subprocess.run(["grep", "-rlsF", "PRIVATE KEY", str(work)], capture_output=True)
    assert on_host.stdout == b""


def _index(root: Path) -> None:
    """A PEP 503 simple index in ``root`` with one package: a one-module wheel, ``jxdemo`` 1.0,
    made here (no package index needed to get one)."""
    (root / "simple" / "jxdemo").mkdir(parents=True)
    (root / "files").mkdir()
    name = "jxdemo-1.0-py3-none-any.whl"
    files = {
        "jxdemo/__init__.py": "VALUE = 42\n",
        "jxdemo-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: jxdemo\nVersion: 1.0\n",
        "jxdemo-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in [*files, "jxdemo-1.0.dist-info/RECORD"])
    with zipfile.ZipFile(root / "files" / name, "w") as archive:
        for path, text in {**files, "jxdemo-1.0.dist-info/RECORD": record}.items():
            archive.writestr(path, text)
    (root / "simple" / "jxdemo" / "index.html").write_text(
        f'<html><body><a href="../../files/{name}">{name}</a></body></html>'
    )


async def _pip_install(session: AsyncSession, index: str, *options: str) -> Execution:
    """``pip install jxdemo`` in the kernel from ``index``; it prints pip's return code and
    the end of its stderr."""
    argv = ["-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check"]
    argv += ["--index-url", index, *options, "jxdemo"]
    return await session.execute(
        "import subprocess, sys\n"
        f"r = subprocess.run([sys.executable, *{argv!r}], capture_output=True, text=True)\n"
        "print(r.returncode, r.stderr[-2000:])"
    )


@pytest.fixture
def index_port(tmp_path: Path) -> Iterator[int]:
    """A PEP 503 simple index on loopback serving one package, reached as ``index.test``."""
    root = tmp_path / "index"
    _index(root)

    class Index(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy.resolver_overrides["index.test"] = "127.0.0.1"
    try:
        yield server.server_address[1]
    finally:
        proxy.resolver_overrides.clear()
        server.shutdown()
        server.server_close()


async def test_pip_installs_from_the_only_allowed_host(
    kernel_image: str, tmp_path: Path, index_port: int
) -> None:
    """A policy that allows only the package index: ``pip install`` works unchanged."""
    policy = NetworkPolicy(allow=["index.test", "127.0.0.1"])
    async with AsyncSession(
        work_dir=tmp_path / "w",
        backend="docker",
        docker={"image": kernel_image},
        network=policy,
        timeout=240,
    ) as session:
        index = f"http://index.test:{index_port}/simple/"
        installed = await _pip_install(session, index, "--trusted-host", "index.test")
        assert installed.stdout.startswith("0 "), installed.stdout
        hosts = {(c.host, c.decision) for c in installed.connections}
        assert hosts == {("index.test", "allowed")}
        imported = await session.execute("import jxdemo; jxdemo.VALUE")
        assert imported.text == "42"


async def test_ask_decides_an_unlisted_host_for_the_rest_of_the_session(
    kernel_image: str, tmp_path: Path, web_port: int
) -> None:
    asked: list[NetworkRequest] = []

    async def ask(request: NetworkRequest) -> bool:
        asked.append(request)
        return request.host == "web.test"

    policy = NetworkPolicy(allow=["127.0.0.1"], ask=ask)
    async with AsyncSession(
        work_dir=tmp_path / "w",
        backend="docker",
        docker={"image": kernel_image},
        network=policy,
        name="asking",
    ) as session:
        (await session.execute(FETCH)).raise_for_error()
        code = (
            f"print(fetch('http://web.test:{web_port}/')[0], "
            f"fetch('http://web.test:{web_port}/')[0], fetch('http://evil.test:{web_port}/')[0])"
        )
        answered = await session.execute(code)
        assert answered.stdout.split() == ["200", "200", "403"]
        assert [c.reason for c in answered.connections] == [
            "allowed when asked",
            "allowed when asked",
            "denied when asked",
        ]
    assert [(r.host, r.session, r.cell) for r in asked] == [
        ("web.test", "asking", 1),
        ("evil.test", "asking", 1),
    ]


async def test_pip_installs_from_a_private_https_index_with_a_secret(
    kernel_image: str, tmp_path: Path
) -> None:
    """An index that wants a token: pip gets it from the proxy, verifies the session's
    certificate through PIP_CERT, and is given neither the token nor any option."""
    root = tmp_path / "index"
    _index(root)
    tokens: list[str | None] = []

    class Private(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self) -> None:
            tokens.append(self.headers.get("Authorization"))
            if tokens[-1] != SECRET:
                self.send_error(401, "a token is needed")
                return
            super().do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    upstream = Upstream(tmp_path)
    with https_server(upstream.issue("index.test"), Private) as server:
        port = server.server_address[1]
        proxy.resolver_overrides["index.test"] = "127.0.0.1"
        policy = NetworkPolicy(
            allow=["index.test", "127.0.0.1"],
            secrets={"index.test": {"Authorization": SECRET}},
            extra_ca=upstream.ca_file,
        )
        try:
            async with AsyncSession(
                work_dir=tmp_path / "w",
                backend="docker",
                docker={"image": kernel_image},
                network=policy,
                timeout=240,
            ) as session:
                installed = await _pip_install(session, f"https://index.test:{port}/simple/")
                assert installed.stdout.startswith("0 "), installed.stdout
                assert {(c.host, c.decision, c.secret) for c in installed.connections} == {
                    ("index.test", "allowed", True)
                }
                assert len(installed.connections) == len(tokens) >= 2  # page, then wheel
                imported = await session.execute("import jxdemo; jxdemo.VALUE")
                assert imported.text == "42"
        finally:
            proxy.resolver_overrides.clear()
    assert tokens == [SECRET] * len(tokens)
