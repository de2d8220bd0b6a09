"""Deno's Jupyter kernel behind Unix sockets, for a container without a network.

A Docker kernel talks to jupyter-exec over ZMQ's ipc transport: sockets in the
bind-mounted run dir, so the container needs no network at all. Deno's kernel
takes TCP addresses only. This launcher, the container's command, reads the
connection file it was given (ipc), starts ``deno jupyter --kernel`` on
loopback TCP ports with the same key, and relays each channel's bytes between
the ipc socket (``<ip>-<port>``, as ZMQ names it) and Deno's port. ZMTP is the
same stream over both transports, so bytes are all it moves. Signals reach
Deno; the launcher ends with Deno's exit status.

Usage: python deno_kernel.py CONNECTION_FILE [DENO]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

CHANNELS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
CONNECT_TRIES = 600
"""Times (every 50 ms: 30 s) a relay tries Deno's port before giving up on a connection."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


async def relay(port: int, client: asyncio.StreamReader, back: asyncio.StreamWriter) -> None:
    """One client connection on an ipc socket, joined to Deno's ``port``."""
    for _ in range(CONNECT_TRIES):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            break
        except OSError:  # Deno is not listening yet
            await asyncio.sleep(0.05)
    else:
        back.close()
        return
    await asyncio.gather(pump(client, writer), pump(reader, back))


async def serve(
    ipc: dict[str, object], tcp: dict[str, object], deno: subprocess.Popen[bytes]
) -> None:
    servers = []
    paths = []
    for channel in CHANNELS:
        path = f"{ipc['ip']}-{ipc[channel]}"
        port = int(str(tcp[channel]))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

        async def joined(
            r: asyncio.StreamReader, w: asyncio.StreamWriter, port: int = port
        ) -> None:
            await relay(port, r, w)

        servers.append(await asyncio.start_unix_server(joined, path=path))
        paths.append(path)
    try:
        await asyncio.get_running_loop().run_in_executor(None, deno.wait)
    finally:
        for server in servers:
            server.close()
        for path in paths:
            with contextlib.suppress(OSError):
                os.unlink(path)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    ipc = json.loads(Path(argv[1]).read_text())
    tcp = {**ipc, "transport": "tcp", "ip": "127.0.0.1", **{c: free_port() for c in CHANNELS}}
    fd, conn = tempfile.mkstemp(prefix="deno-kernel-", suffix=".json")
    with os.fdopen(fd, "w") as out:
        json.dump(tcp, out)
    deno_bin = argv[2] if len(argv) > 2 else "deno"
    deno = subprocess.Popen([deno_bin, "jupyter", "--kernel", "--conn", conn])
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda sig, _frame: deno.send_signal(sig))
    try:
        asyncio.run(serve(ipc, tcp, deno))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(conn)
    return deno.returncode if deno.returncode >= 0 else 128 - deno.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
