"""What a network policy costs: a request through the policy's proxy against the same request
made directly, to the same loopback HTTP server, alternately in one run.

The proxied path is the kernel's: a TCP connection to the forwarder (the stdlib relay that runs
in the container, here a thread), the Unix socket, the host proxy's decision and resolution,
then the server. Both paths open a new connection per request, as ``urllib`` does. Two rows:
the added latency of a small GET (p50, p95 in the notes), and the throughput of a large
download (100 MB; 20 MB with ``--quick``).

``python -m benchmarks --only network``
"""

from __future__ import annotations

import asyncio
import http.server
import json
import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from benchmarks.core import Config, Row, case, median, progress, scratch_dir
from jupyter_exec import NetworkPolicy
from jupyter_exec.network import forwarder, proxy
from jupyter_exec.network.proxy import NetworkProxy

__all__ = ["network_case"]

MS = 1000.0
MB = 1_000_000
NAME = "bench.test"


def _server(payload: bytes) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:
            body = payload if self.path == "/big" else b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _getter(proxy_port: int | None) -> Callable[[str], int]:
    handlers: list[Any] = [urllib.request.ProxyHandler({})]  # direct: ignore any *_proxy
    if proxy_port is not None:
        url = f"http://127.0.0.1:{proxy_port}"
        handlers = [urllib.request.ProxyHandler({"http": url})]
    opener = urllib.request.build_opener(*handlers)

    def get(target: str) -> int:
        with opener.open(target, timeout=120) as response:
            return len(response.read())

    return get


@case("network", group="local")
def network_case(cfg: Config) -> list[Row]:
    """A GET and a large download through the network policy's proxy vs direct, same server."""
    requests = 60 if cfg.quick else 400
    size = (20 if cfg.quick else 100) * MB
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    server = _server(b"x" * size)
    port = server.server_address[1]
    proxy.resolver_overrides[NAME] = "127.0.0.1"
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with scratch_dir("network") as root:
            policy = NetworkPolicy(allow=[NAME, "127.0.0.1"])
            started = NetworkProxy(policy, session="bench", root=str(root)).start()
            running = asyncio.run_coroutine_threadsafe(started, loop).result(30)
            listener.bind(("127.0.0.1", 0))
            listener.listen(64)
            relay = (listener, str(running.socket_path))
            threading.Thread(target=forwarder.serve, args=relay, daemon=True).start()
            paths = {
                "direct": (_getter(None), f"http://127.0.0.1:{port}"),
                "proxy": (_getter(listener.getsockname()[1]), f"http://{NAME}:{port}"),
            }
            small: dict[str, list[float]] = {"direct": [], "proxy": []}
            for get, base in paths.values():  # untimed warm-up
                get(f"{base}/small")
            for i in range(requests):
                if i % 100 == 0:
                    progress(f"network: requests {i + 1}-{min(i + 100, requests)} of {requests}")
                order = ("direct", "proxy") if i % 2 == 0 else ("proxy", "direct")
                for which in order:
                    get, base = paths[which]
                    start = time.perf_counter()
                    get(f"{base}/small")
                    small[which].append(time.perf_counter() - start)
            big: dict[str, list[float]] = {"direct": [], "proxy": []}
            for i in range(2 if cfg.quick else 3):
                progress(f"network: {size // MB} MB download {i + 1}")
                for which in ("direct", "proxy") if i % 2 == 0 else ("proxy", "direct"):
                    get, base = paths[which]
                    start = time.perf_counter()
                    if get(f"{base}/big") != size:
                        raise RuntimeError(f"{which}: short download")
                    big[which].append(time.perf_counter() - start)
            asyncio.run_coroutine_threadsafe(running.close(), loop).result(30)
    finally:
        proxy.resolver_overrides.pop(NAME, None)
        listener.close()
        server.shutdown()
        server.server_close()
        loop.call_soon_threadsafe(loop.stop)

    def p95(values: list[float]) -> float:
        return sorted(values)[int(0.95 * (len(values) - 1))]

    throughput = {k: size / MB / median(v) for k, v in big.items()}
    return [
        Row(
            "network policy: GET through the proxy (p50)",
            median(small["proxy"]) * MS,
            median(small["direct"]) * MS,
            "ms",
            f"n={requests} each, interleaved; p95 {p95(small['proxy']) * MS:.2f} vs "
            f"{p95(small['direct']) * MS:.2f} ms; floor = the same GET straight to the server",
            {"proxy": small["proxy"], "direct": small["direct"]},
        ),
        Row(
            f"network policy: {size // MB} MB download throughput (median)",
            throughput["proxy"],
            throughput["direct"],
            "MB/s",
            "higher is better; floor = the same download straight to the server",
            {"proxy": big["proxy"], "direct": big["direct"]},
        ),
    ]


# -- HTTPS from real Docker kernels: policy (intercepted, tunnelled) vs full network ----------

GET_CODE = """
import json, ssl, time, urllib.request
def _ctx(cafile):
    return ssl.create_default_context(cafile=cafile)  # None: the kernel's bundle
def gets(url, n, cafile=None):
    ctx, out = _ctx(cafile), []
    for _ in range(n):
        start = time.perf_counter()
        with urllib.request.urlopen(url, context=ctx, timeout=120) as r:
            r.read()
        out.append(time.perf_counter() - start)
    return out
def download(url, cafile=None):
    ctx, size = _ctx(cafile), 0
    start = time.perf_counter()
    with urllib.request.urlopen(url, context=ctx, timeout=300) as r:
        while chunk := r.read(1 << 20):
            size += len(chunk)
    return [time.perf_counter() - start, size]
"""


def _bridge_gateway() -> str | None:
    """The host's address on Docker's default bridge (its gateway; the subnet's first address
    when the engine does not list one): where a full-network container reaches this machine."""
    import ipaddress
    import subprocess

    probe = subprocess.run(
        ["docker", "network", "inspect", "bridge", "--format", "{{json .IPAM.Config}}"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    try:
        config = json.loads(probe.stdout)[0]
        return str(config.get("Gateway") or next(ipaddress.ip_network(config["Subnet"]).hosts()))
    except (ValueError, LookupError, TypeError):
        return None


def _https_server(address: str, context: Any, size: int) -> http.server.ThreadingHTTPServer:
    payload = memoryview(b"x" * size)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:
            body = payload if self.path == "/big" else memoryview(b"ok")
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for at in range(0, len(body), 1 << 20):
                self.wfile.write(body[at : at + (1 << 20)])

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer((address, 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@case("network-docker", group="docker")
def network_docker_case(cfg: Config) -> list[Row]:
    """HTTPS from a Docker kernel behind a policy (a host with a secret, intercepted; a host
    without, tunnelled) against a Docker kernel with the full network, same servers, one run."""
    from benchmarks.docker_cases import IMAGE, _unavailable
    from jupyter_exec import Session
    from jupyter_exec.network.tls import Authority

    unavailable = _unavailable("network policy HTTPS (Docker)")
    gateway = _bridge_gateway()
    if unavailable or gateway is None:
        return unavailable or [Row("network policy HTTPS (Docker)", None, None, "s",
                                   "skipped: no default bridge network")]  # fmt: skip
    batch, rounds = (10, 4) if cfg.quick else (20, 10)
    size = (20 if cfg.quick else 100) * MB
    public = Authority(["bench.test", "secret.bench.test"], "benchmark upstream")
    servers = {
        name: _https_server(gateway, public.server_context(name), size)
        for name in ("bench.test", "secret.bench.test")
    }
    urls = {name: f"https://{name}:{s.server_address[1]}" for name, s in servers.items()}
    proxy.resolver_overrides.update(dict.fromkeys(servers, gateway))
    ways = {"intercepted": urls["secret.bench.test"], "tunnelled": urls["bench.test"],
            "full": urls["bench.test"]}  # fmt: skip
    try:
        with scratch_dir("network-docker") as root:
            (root / "ca.pem").write_bytes(public.certificate_pem)
            policy = NetworkPolicy(
                allow=[*servers, gateway],
                secrets={"secret.bench.test": {"Authorization": "Bearer benchmark"}},
                extra_ca=root / "ca.pem",
            )
            (root / "full").mkdir()
            (root / "full" / "ca.pem").write_bytes(public.certificate_pem)
            full_docker = {
                "image": IMAGE,
                "network": True,
                "run_kwargs": {"extra_hosts": dict.fromkeys(servers, gateway)},
            }
            with (
                Session(
                    work_dir=root / "policy",
                    backend="docker",
                    network=policy,
                    docker={"image": IMAGE},
                    timeout=600,
                ) as policed,
                Session(
                    work_dir=root / "full", backend="docker", docker=full_docker, timeout=600
                ) as full,
            ):
                kernels = {"intercepted": policed, "tunnelled": policed, "full": full}
                cafile = {"intercepted": None, "tunnelled": None, "full": "ca.pem"}

                def run(way: str, call: str) -> Any:
                    if call == "gets":
                        code = f"gets({ways[way] + '/s'!r}, {batch}, {cafile[way]!r})"
                    else:
                        code = f"download({ways[way] + '/big'!r}, {cafile[way]!r})"
                    execution = kernels[way].execute(f"print(json.dumps({code}))")
                    execution.raise_for_error()
                    return json.loads(execution.stdout)

                for session in (policed, full):
                    session.execute(GET_CODE).raise_for_error()
                for way in ways:  # untimed warm-up
                    run(way, "gets")
                small: dict[str, list[float]] = {way: [] for way in ways}
                for i in range(rounds):
                    progress(f"network-docker: GET round {i + 1}/{rounds}")
                    order = list(ways)[i % 3 :] + list(ways)[: i % 3]
                    for way in order:
                        small[way] += run(way, "gets")
                big: dict[str, list[float]] = {way: [] for way in ways}
                for i in range(2 if cfg.quick else 3):
                    progress(f"network-docker: {size // MB} MB download {i + 1}")
                    for way in list(ways)[i % 3 :] + list(ways)[: i % 3]:
                        seconds, got = run(way, "download")
                        if got != size:
                            raise RuntimeError(f"{way}: short download ({got} bytes)")
                        big[way].append(seconds)
    finally:
        proxy.resolver_overrides.clear()
        for server in servers.values():
            server.shutdown()
            server.server_close()

    def p95(values: list[float]) -> float:
        return sorted(values)[int(0.95 * (len(values) - 1))]

    n = len(small["full"])
    rows = [
        Row(
            f"network policy (Docker): HTTPS GET, {way} (p50)",
            median(small[way]) * MS,
            median(small["full"]) * MS,
            "ms",
            f"n={n} each, new connection each, timed in the kernel; p95 {p95(small[way]) * MS:.2f}"
            f" vs {p95(small['full']) * MS:.2f} ms; floor = a Docker kernel with the full network",
            {way: small[way], "full": small["full"]},
        )
        for way in ("intercepted", "tunnelled")
    ]
    rows += [
        Row(
            f"network policy (Docker): {size // MB} MB HTTPS download, {way} (median)",
            size / MB / median(big[way]),
            size / MB / median(big["full"]),
            "MB/s",
            "higher is better; floor = a Docker kernel with the full network, same server",
            {way: big[way], "full": big["full"]},
        )
        for way in ("intercepted", "tunnelled")
    ]
    return rows
