"""The in-container end of the network proxy: a TCP listener on the container's loopback that
relays every connection to the host proxy's Unix socket, then runs the kernel.

It runs inside the kernel's image with that image's Python, so it uses the standard library only
and is copied next to the proxy's socket (mounted read-only) rather than imported. Usage::

    python forwarder.py 127.0.0.1:3128 /run/jxnet/proxy.sock -- python -m ipykernel_launcher ...

The listening socket is bound before the kernel is started (so the kernel's first request finds
it), then the process forks: the child, in its own session so the kernel's interrupts never
reach it, relays; the parent becomes the kernel (``exec``). The container keeps network mode
``none``: the loopback address is its only interface, and the socket file is its only way out.
If the host proxy is gone, each new connection is closed at once: requests fail closed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading

CHUNK = 65536


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((target, socket.SHUT_WR), (source, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def _relay(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        upstream.close()
        client.close()  # the proxy is gone: fail closed
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def serve(listener: socket.socket, path: str) -> None:
    """Relay every accepted connection to ``path`` until the process ends."""
    while True:
        try:
            client, _ = listener.accept()
        except InterruptedError:
            continue
        # What the proxy sends in several writes (a TLS handshake's records) must not wait for
        # the kernel's delayed ACK of the previous one: no Nagle on this loopback hop.
        with contextlib.suppress(OSError):
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            threading.Thread(target=_relay, args=(client, path), daemon=True).start()
        except RuntimeError:  # no thread to spare (the container's pids limit): refuse this one
            client.close()


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[2] != "--":
        sys.exit("usage: forwarder.py HOST:PORT SOCKET [-- COMMAND ...]")
    host, _, port = argv[0].rpartition(":")
    path, command = argv[1], argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, int(port)))
    listener.listen(128)
    if not command:
        serve(listener, path)
        return
    if os.fork() == 0:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        os.closerange(0, 3)
        serve(listener, path)
        os._exit(0)
    listener.close()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
