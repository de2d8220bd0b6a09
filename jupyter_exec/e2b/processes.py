"""The commands a sandbox runs (``commands.run``): processes, their output as events, signals.

Each command is a process in the sandbox's work dir, in a process group of
its own (a kill reaches its children). Its stdout and stderr are read as
they come and handed, as envd's ``ProcessEvent`` JSON, to whoever follows it:
the ``Start`` stream that made it and any later ``Connect``, which sees the
output from when it joined. A command runs until it ends, is signalled
(``SendSignal``: ``handle.kill()``) or its sandbox is killed; a follower that
leaves (a client timeout) does not stop it, as in envd.

These processes run on this host, so they serve local sandboxes only; a
Docker sandbox's commands run in its container instead
(:meth:`jupyter_exec.e2b.envd.ProcessHandler.rpc_Start`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_exec.exceptions import BackendError, InvalidArgument, SessionNotFound

__all__ = ["Process", "Processes"]

log = logging.getLogger("jupyter_exec.e2b")

Event = dict[str, Any]
SIGNALS = {"SIGNAL_SIGKILL": signal.SIGKILL, "SIGNAL_SIGTERM": signal.SIGTERM, 9: signal.SIGKILL,
           15: signal.SIGTERM}  # fmt: skip


@dataclass
class Process:
    """One running command and the queues of those following its output."""

    proc: asyncio.subprocess.Process
    config: dict[str, Any]
    tag: str | None = None
    followers: list[asyncio.Queue[Event | None]] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def follow(self) -> asyncio.Queue[Event | None]:
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        if self.ended.is_set():
            queue.put_nowait(None)
        else:
            self.followers.append(queue)
        return queue

    def unfollow(self, queue: asyncio.Queue[Event | None]) -> None:
        with contextlib.suppress(ValueError):
            self.followers.remove(queue)

    def _publish(self, event: Event | None) -> None:
        for queue in self.followers:
            queue.put_nowait(event)

    async def _pump(self, stream: asyncio.StreamReader | None, name: str) -> None:
        if stream is None:
            return
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                return
            self._publish({"data": {name: base64.b64encode(chunk).decode()}})

    async def run(self) -> None:
        """Forward the output until the process ends, then its exit status."""
        await asyncio.gather(self._pump(self.proc.stdout, "stdout"),
                             self._pump(self.proc.stderr, "stderr"))  # fmt: skip
        code = await self.proc.wait()
        if code < 0:
            end = {
                "exitCode": -1,
                "exited": False,
                "status": f"signal: {signal.Signals(-code).name}",
            }
        else:
            end = {"exitCode": code, "exited": True, "status": f"exit status {code}"}
        self._publish({"end": end})
        self._publish(None)
        self.ended.set()

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"config": self.config, "pid": self.pid}
        if self.tag:
            info["tag"] = self.tag
        return info


class Processes:
    """The commands of one sandbox, by pid."""

    def __init__(self, work_dir: Path, env: dict[str, str], *, backend: str = "local") -> None:
        self.work_dir = work_dir
        self.env = env
        self.backend = backend
        self._running: dict[int, Process] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, config: dict[str, Any], cwd: Path, *, stdin: bool,
                    tag: str | None = None) -> Process:  # fmt: skip
        """Start ``config`` (envd's ``ProcessConfig``: cmd, args, envs) in ``cwd``."""
        if self.backend != "local":
            raise BackendError(
                f"this {self.backend!r} sandbox's commands run in its container, not on this "
                "host: kill, send_stdin and connect are not served for them"
            )
        cmd = config.get("cmd")
        args = config.get("args") or []
        if not isinstance(cmd, str) or not cmd or not all(isinstance(a, str) for a in args):
            raise InvalidArgument("a process needs a 'cmd' string and 'args' strings")
        envs = config.get("envs") or {}
        env = {**self.env, **{str(k): str(v) for k, v in envs.items()}}
        try:
            proc = await asyncio.create_subprocess_exec(
                cmd, *args, cwd=cwd, env=env, start_new_session=True,
                stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
        except OSError as exc:
            raise InvalidArgument(f"could not start {cmd!r}: {exc.strerror or exc}") from None
        process = Process(proc, dict(config), tag)
        self._running[process.pid] = process
        return process

    def launch(self, process: Process) -> None:
        """Start forwarding ``process``'s output (after its first follower joined)."""
        task = asyncio.ensure_future(self._run(process))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, process: Process) -> None:
        try:
            await process.run()
        finally:
            self._running.pop(process.pid, None)

    def get(self, selector: dict[str, Any] | None) -> Process:
        """The running process a ``ProcessSelector`` (pid or tag) names."""
        selector = selector or {}
        if "pid" in selector:
            process = self._running.get(int(selector["pid"]))
            if process is not None:
                return process
        elif "tag" in selector:
            for process in self._running.values():
                if process.tag == selector["tag"]:
                    return process
        raise SessionNotFound(f"no running process matches {selector}")

    def list(self) -> list[Process]:
        return list(self._running.values())

    async def kill_all(self) -> None:
        for process in self.list():
            process.signal(signal.SIGKILL)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)
