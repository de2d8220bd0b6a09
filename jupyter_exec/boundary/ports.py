"""A port is ours from the moment it is bound, before anyone is told its number.

A server that announces a port and binds it later leaves a gap in which another process
can take it and receive what was meant for the server (a gateway's token went that way).
Every listening socket the project opens for others to connect to is made here: bound and
listening first, then handed to the code that announces it. A port that cannot be had is
:class:`PortUnavailable`, which each front end turns into its own error once, with the
words its users need (``--port N``, the gateway's setting).
"""

from __future__ import annotations

import errno
import socket

__all__ = ["PortUnavailable", "listen"]


class PortUnavailable(Exception):
    """``host:port`` could not be bound; ``taken`` when another process holds it."""

    def __init__(self, host: str, port: int, error: OSError) -> None:
        self.host = host
        self.port = port
        self.taken = error.errno == errno.EADDRINUSE
        self.reason = "held by another process" if self.taken else (error.strerror or str(error))
        super().__init__(f"{host}:{port}: {self.reason}")


def listen(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening (IPv6 when ``host`` has a colon).

    ``SO_REUSEADDR`` lets a restarted server take its port back from connections still in
    TIME_WAIT; it never lets two live listeners share one (that is ``SO_REUSEPORT``).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise PortUnavailable(host, port, exc) from exc
    return sock
