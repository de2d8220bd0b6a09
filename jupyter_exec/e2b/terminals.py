"""A sandbox's terminals (``sandbox.pty``): a real pseudo-terminal around a command on this host.

envd serves a terminal as a process started with a ``pty`` size: its output
comes as ``{"data": {"pty": <base64>}}`` events on the same streams as a
command's, keys go in through ``SendInput`` (``input.pty``) and ``Update``
resizes it. Here the command (the SDK's ``/bin/bash -i -l``) runs with a
pseudo-terminal of :func:`os.openpty` as its stdin, stdout and stderr, in a
session of its own whose controlling terminal that is (``setsid --ctty``,
from util-linux), so job control, ``tput cols`` and SIGWINCH on a resize
behave as in a terminal. The server keeps the master side; one reader on
the event loop publishes what the terminal shows.

A Docker sandbox's terminals are not served yet: the start is refused
(501), saying so.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import fcntl
import os
import shutil
import struct
import termios
from pathlib import Path
from typing import Any

from jupyter_exec.e2b.errors import NotServed
from jupyter_exec.exceptions import InvalidArgument

__all__ = ["PtyRunner", "pty_size", "start_terminal"]

MAX_SIDE = 10_000
"""The most columns or rows a terminal may have (a 2-byte field; anything near it is a mistake)."""
READ = 65536


def pty_size(pty: object) -> tuple[int, int]:
    """``(cols, rows)`` of envd's ``PTY`` message (``{"size": {"cols": .., "rows": ..}}``)."""
    size = pty.get("size") if isinstance(pty, dict) else None
    if not isinstance(size, dict):
        raise InvalidArgument('a terminal\'s size is {"size": {"cols": N, "rows": N}}')
    sides = []
    for name in ("cols", "rows"):
        value = size.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIDE:
            raise InvalidArgument(f"a terminal's {name} is a whole number from 1 to {MAX_SIDE}")
        sides.append(value)
    return sides[0], sides[1]


def _set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class PtyRunner:
    """One command on a pseudo-terminal; the :class:`~jupyter_exec.e2b.processes.Runner` of a
    terminal."""

    def __init__(self, proc: asyncio.subprocess.Process, master: int) -> None:
        self.proc = proc
        self.pid = int(proc.pid)
        self.master = master

    async def pump(self, publish: Any) -> None:
        """Publish what the terminal shows until every holder of its other side has closed it."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def readable() -> None:
            try:
                chunk = os.read(self.master, READ)
            except BlockingIOError:
                return
            except OSError as exc:  # EIO: the command and its children have all gone
                if exc.errno != errno.EIO:
                    raise
                chunk = b""
            if chunk:
                publish({"data": {"pty": _b64(chunk)}})
            elif not done.done():
                done.set_result(None)

        loop.add_reader(self.master, readable)
        try:
            await done
        finally:
            loop.remove_reader(self.master)

    async def wait(self) -> int:
        try:
            return await self.proc.wait()
        finally:
            with contextlib.suppress(OSError):
                os.close(self.master)
            self.master = -1

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    async def write(self, data: bytes) -> None:
        """Type ``data`` into the terminal (waiting while its input buffer is full)."""
        view = memoryview(data)
        while view:
            if self.master < 0:
                raise InvalidArgument("the terminal has ended")
            try:
                written = os.write(self.master, view)
            except BlockingIOError:
                await asyncio.sleep(0.01)  # the command reads its input slower than it comes
                continue
            view = view[written:]

    def close_stdin(self) -> None:
        raise InvalidArgument("a terminal has no stdin to close: send Ctrl+D (b'\\x04') instead")

    def resize(self, cols: int, rows: int) -> None:
        """The terminal's new size (its command gets SIGWINCH, as from a window's resize)."""
        if self.master < 0:
            raise InvalidArgument("the terminal has ended")
        _set_size(self.master, cols, rows)


def _b64(chunk: bytes) -> str:
    return base64.b64encode(chunk).decode()


async def start_terminal(
    cmd: str, args: list[str], cwd: Path, env: dict[str, str], size: tuple[int, int], backend: str
) -> PtyRunner:
    """``cmd args`` on a new pseudo-terminal of ``size`` (cols, rows), in ``cwd``."""
    if backend != "local":
        raise NotServed(
            f"a terminal (pty) in a {backend} sandbox is not served by jupyter-exec's E2B server "
            "yet: run commands with commands.run(), or use a local sandbox"
        )
    master, slave = os.openpty()
    try:
        _set_size(slave, *size)
        os.set_blocking(master, False)
        setsid = shutil.which("setsid")  # util-linux: a session whose controlling tty is stdin
        argv = [setsid, "--ctty", cmd, *args] if setsid else [cmd, *args]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                start_new_session=setsid is None,
            )  # fmt: skip
        except OSError as exc:
            raise InvalidArgument(f"could not start {cmd!r}: {exc.strerror or exc}") from None
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)  # the command holds its own copies: the master reads EIO once they close
    return PtyRunner(proc, master)
