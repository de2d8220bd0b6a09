"""Raw HTTP for attacks a client library would not let us make (a body announced, never sent)."""

from __future__ import annotations

import socket


def status_line(sock: socket.socket) -> bytes:
    """The first line of the answer on ``sock`` (empty if the server closed without one)."""
    sock.settimeout(30)
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n", 1)[0]
