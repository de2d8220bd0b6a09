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
