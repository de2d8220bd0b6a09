"""The commands a sandbox runs (``commands.run``): processes, their output as events, signals.

Each command is a process in its own process group (a signal reaches its
children), started in the sandbox's work dir - on this host for a local
sandbox, or for a Docker sandbox in its container, beside the kernel, through
:class:`~jupyter_exec.docker.execcmd.LiveExec`. Either way its stdout and
stderr are read as they come and handed, as envd's ``ProcessEvent`` JSON, to
whoever follows it: the ``Start`` stream that made it and any later
``Connect``, which sees the output from when it joined. A command runs until
it ends, is signalled (``SendSignal``: ``handle.kill()``) or its sandbox is
killed; a follower that leaves (a client timeout) does not stop it, as in envd.
A sandbox with a network policy's secrets has them redacted from the output as
it comes, as the kernel's are (:class:`~jupyter_exec.network.redact.Redactor`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from jupyter_exec.e2b.terminals import start_terminal
from jupyter_exec.exceptions import BackendError, InvalidArgument, SessionNotFound, WorkDirError
from jupyter_exec.network.redact import Redactor

__all__ = ["Container", "Process", "Processes", "kernel_container"]

log = logging.getLogger("jupyter_exec.e2b")

Event = dict[str, Any]
Publish = Callable[[Event], None]
SIGNALS = {"SIGNAL_SIGKILL": signal.SIGKILL, "SIGNAL_SIGTERM": signal.SIGTERM, 9: signal.SIGKILL,
           15: signal.SIGTERM}  # fmt: skip


@dataclass(frozen=True)
class Container:
    """Where a Docker sandbox's commands run: its kernel's container, its work dir's mount."""

    client: Any
    container_id: str
    work_mount: str


def kernel_container(session: Any) -> Container:
    """The container a Docker session's kernel runs in (found by its kernel-id label; blocking)."""
    from jupyter_exec.docker.engine import connect, docker_errors
    from jupyter_exec.docker.reap import L_KERNEL_ID

    docker = dict(session.options.docker or {})
    client = connect(str(docker.get("docker_host") or ""))
    with docker_errors("finding the sandbox's container"):
        found = client.containers.list(
            ignore_removed=True, filters={"label": f"{L_KERNEL_ID}={session.kernel_id}"}
        )
    if not found:
        raise BackendError("the sandbox's kernel container is not running")
    return Container(client, str(found[0].id), str(docker.get("work_mount") or "/work"))


class Runner(Protocol):
    """One started command, wherever it runs."""

    async def pump(self, publish: Publish) -> None:
        """Publish ``{"data": {stream: base64}}`` events until the output ends."""

    async def wait(self) -> int:
        """The exit status (negative: ended by that signal)."""

    def signal(self, signum: int) -> None: ...

    async def write(self, data: bytes) -> None: ...

    def close_stdin(self) -> None: ...


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _data(name: str, chunk: bytes) -> Event:
    return {"data": {name: base64.b64encode(chunk).decode()}}


class LocalRunner:
    """A command on this host (a local sandbox)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pid = int(proc.pid)

    async def pump(self, publish: Publish) -> None:
        async def read(stream: asyncio.StreamReader | None, name: str) -> None:
            while stream is not None and (chunk := await stream.read(65536)):
                publish(_data(name, chunk))

        await asyncio.gather(read(self.proc.stdout, "stdout"), read(self.proc.stderr, "stderr"))

    async def wait(self) -> int:
        return await self.proc.wait()

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    async def write(self, data: bytes) -> None:
        if self.proc.stdin is None:
            raise InvalidArgument("this process was started without stdin (stdin=True)")
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    def close_stdin(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()


class DockerRunner:
    """A command in a Docker sandbox's container, read by a thread as the Engine sends it."""

    def __init__(self, live: Any, *, stdin: bool) -> None:
        self.live = live
        self.stdin = stdin
        self.signalled: int | None = None

    async def pump(self, publish: Publish) -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def read() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed under us: nobody listens
                try:
                    for name, chunk in self.live.frames():
                        loop.call_soon_threadsafe(publish, _data(name, chunk))
                finally:
                    loop.call_soon_threadsafe(_settle, done)

        threading.Thread(target=read, name="jx-e2b-command", daemon=True).start()
        await done

    async def wait(self) -> int:
        try:
            code = await asyncio.to_thread(self.live.exit_code)
        finally:
            await asyncio.to_thread(self.live.close)
        if code is None:
            return -int(signal.SIGKILL)  # the container went away under it
        if self.signalled is not None and code == 128 + self.signalled:
            return -self.signalled
        return int(code)

    def signal(self, signum: int) -> None:
        self.signalled = int(signum)
        self.live.signal(signum)

    async def write(self, data: bytes) -> None:
        if not self.stdin:
            raise InvalidArgument("this process was started without stdin (stdin=True)")
        await asyncio.to_thread(self.live.write, data)

    def close_stdin(self) -> None:
        if self.stdin:
            self.live.close_stdin()


@dataclass
class Process:
    """One running command and the queues of those following its output."""

    runner: Runner
    pid: int
    config: dict[str, Any]
    tag: str | None = None
    followers: list[asyncio.Queue[Event | None]] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    redactor: Redactor | None = None
    """Takes the sandbox's network policy secrets out of the output (the command shares the
    kernel's proxy, so an echoing host reaches it too); None: no secrets."""

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

    async def run(self) -> None:
        """Forward the output until the process ends, then its exit status."""
        try:
            await self.runner.pump(self._publish if self.redactor is None else self._redacted)
            code = await self.runner.wait()
        except Exception as exc:  # the engine failed under it: say so as its end
            log.warning("command %s failed: %s", self.pid, exc)
            code = -int(signal.SIGKILL)
        if code < 0:
            end = {
                "exitCode": -1,
                "exited": False,
                "status": f"signal: {signal.Signals(-code).name}",
            }
        else:
            end = {"exitCode": code, "exited": True, "status": f"exit status {code}"}
        for name, text in self.redactor.release() if self.redactor is not None else ():
            self._publish(_data(name, text.encode("latin-1")))  # held back: it was harmless
        self._publish({"end": end})
        self._publish(None)
        self.ended.set()

    def _redacted(self, event: Event) -> None:
        """Publish a data event redacted; the end of a chunk that may begin a secret waits."""
        assert self.redactor is not None
        for name, encoded in event.get("data", {}).items():
            text = self.redactor.stream(name, base64.b64decode(encoded).decode("latin-1"))
            if text:
                self._publish(_data(name, text.encode("latin-1")))

    def signal(self, signum: int) -> None:
        self.runner.signal(signum)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"config": self.config, "pid": self.pid}
        if self.tag:
            info["tag"] = self.tag
        return info


def container_argv(cmd: str, args: list[str]) -> list[str]:
    """The SDK's ``bash -l -c CMD`` without ``-l`` in a container: a login shell would reset
    ``PATH`` from ``/etc/profile`` and lose the kernel's Python."""
    if cmd.endswith("bash") and args[:1] == ["-l"]:
        args = args[1:]
    return [cmd, *args]


class Processes:
    """The commands of one sandbox, by pid."""

    def __init__(
        self,
        work_dir: Path,
        env: dict[str, str],
        *,
        backend: str = "local",
        container: Callable[[], Awaitable[Container]] | None = None,
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.secrets = secrets
        """The network policy's secret values, redacted from every command's output."""
        self.work_dir = work_dir
        self.env = env
        self.backend = backend
        self.container = container
        self._running: dict[int, Process] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._pids = itertools.count(1000)  # a container's commands: numbered here

    async def start(self, config: dict[str, Any], cwd: Path, *, stdin: bool,
                    tag: str | None = None,
                    pty: tuple[int, int] | None = None) -> Process:  # fmt: skip
        """Start ``config`` (envd's ``ProcessConfig``: cmd, args, envs) in ``cwd``; with
        ``pty`` (cols, rows), on a terminal of that size (:mod:`jupyter_exec.e2b.terminals`)."""
        cmd = config.get("cmd")
        args = config.get("args") or []
        if (
            not isinstance(cmd, str)
            or not cmd
            or not isinstance(args, list)
            or not all(isinstance(a, str) for a in args)
        ):
            raise InvalidArgument("a process needs a 'cmd' string and a list of 'args' strings")
        envs = config.get("envs") or {}
        if not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
            raise InvalidArgument("a process's 'envs' must map names to strings")
        env = {**self.env, **{str(k): v for k, v in envs.items()}}
        runner: Runner
        if pty is not None:
            terminal = await start_terminal(cmd, list(args), cwd, env, pty, self.backend)
            runner, pid = terminal, terminal.pid
        elif self.backend == "docker" and self.container is not None:
            runner = await self._in_container(cmd, list(args), cwd, env, stdin)
            pid = next(self._pids)
        elif self.backend == "local":
            try:
                proc = await asyncio.create_subprocess_exec(
                    cmd, *args, cwd=cwd, env=env, start_new_session=True,
                    stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                )  # fmt: skip
            except OSError as exc:
                raise InvalidArgument(f"could not start {cmd!r}: {exc.strerror or exc}") from None
            local = LocalRunner(proc)
            runner, pid = local, local.pid
        else:
            raise BackendError(f"commands are not served for {self.backend!r} sandboxes")
        redactor = Redactor(self.secrets, latin1=True) if self.secrets else None
        process = Process(runner, pid, dict(config), tag, redactor=redactor)
        self._running[pid] = process
        return process

    async def _in_container(
        self, cmd: str, args: list[str], cwd: Path, env: dict[str, str], stdin: bool
    ) -> DockerRunner:
        from jupyter_exec.docker.execcmd import LiveExec

        assert self.container is not None
        where = await self.container()
        try:  # both lexical, from the sandbox's paths (checked there without following links)
            relative = cwd.relative_to(self.work_dir).as_posix()
        except ValueError:
            raise WorkDirError(f"the cwd {cwd} is outside the sandbox's files") from None
        workdir = where.work_mount.rstrip("/") + ("" if relative == "." else f"/{relative}")
        live = await asyncio.to_thread(
            LiveExec, where.client, where.container_id, container_argv(cmd, args),
            workdir=workdir, env=env, stdin=stdin,
        )  # fmt: skip
        return DockerRunner(live, stdin=stdin)

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

    def get(self, selector: object) -> Process:
        """The running process a ``ProcessSelector`` (``{"pid": n}`` or ``{"tag": s}``) names."""
        if not isinstance(selector, dict) or not selector:
            raise InvalidArgument(
                '\'process\' must be an object: {"pid": <number>} or {"tag": "..."}'
            )
        pid, tag = selector.get("pid"), selector.get("tag")
        if isinstance(pid, str) and pid.isdigit() and len(pid) <= 18:
            pid = int(pid)
        if pid is not None:
            if isinstance(pid, bool) or not isinstance(pid, int):
                raise InvalidArgument("a process's 'pid' must be a whole number")
            process = self._running.get(pid)
            if process is not None:
                return process
            raise SessionNotFound(f"no running process has pid {pid}")
        if not isinstance(tag, str):
            raise InvalidArgument("a process selector needs a 'pid' number or a 'tag' string")
        for process in self._running.values():
            if process.tag == tag:
                return process
        raise SessionNotFound(f"no running process has the tag {tag[:100]!r}")

    def list(self) -> list[Process]:
        return list(self._running.values())

    async def kill_all(self) -> None:
        for process in self.list():
            process.signal(signal.SIGKILL)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)
