"""Notice a kernel container's death at once, and say why it died.

A kernel killed by the OOM killer or by ``docker kill`` just goes quiet on ZMQ: no message says
so. A daemon thread per container blocks in the engine's ``wait`` endpoint, so the moment the
container stops :attr:`ExitWatcher.exit_code` is set (``poll()`` only reads it), and right after
the thread collects the container state, its kill events and its last log lines, from which
:func:`describe_exit` writes one sentence for the user.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import docker
import docker.errors
import requests.exceptions

__all__ = ["ExitWatcher", "describe_exit"]


def _signal_name(value: str | int) -> str:
    text = str(value).strip()
    try:
        return signal.Signals(int(text)).name
    except ValueError:
        name = text.upper()
        return name if name.startswith("SIG") else f"SIG{name}"


def describe_exit(
    state: Mapping[str, Any] | None,
    events: Iterable[Mapping[str, Any]],
    logs: str,
    *,
    memory: str,
    stopped_by_us: bool,
) -> str:
    """One sentence on why a kernel container stopped.

    ``state`` is ``docker inspect``'s ``State`` (None if the container was already removed),
    ``events`` the container's engine events since it started, ``logs`` its last output lines.
    """
    actions = [e.get("Action", e.get("status", "")) for e in events]
    kills = [
        _signal_name(e.get("Actor", {}).get("Attributes", {}).get("signal", "9"))
        for e in events
        if e.get("Action", e.get("status")) == "kill"
    ]
    if state is None:
        if "destroy" in actions:
            return "the container was removed (`docker rm -f`) while the kernel ran"
        return "the container disappeared (removed outside jupyter-exec)"
    code = int(state.get("ExitCode", -1))
    if state.get("OOMKilled") or "oom" in actions:
        limit = f" (memory limit {memory})" if memory else ""
        return f"killed by the out-of-memory killer{limit}: the code used more memory than allowed"
    if stopped_by_us:
        return f"stopped by jupyter-exec (exit code {code})"
    if "stop" in actions:
        return f"stopped by `docker stop` (exit code {code})"
    if kills:
        return f"killed by `docker kill` ({kills[-1]}, exit code {code})"
    if code > 128:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            name = f"signal {code - 128}"
        return f"killed by {name} (exit code {code})"
    text = f"exited with code {code}"
    if state.get("Error"):
        text += f": {state['Error']}"
    tail = logs.strip()
    if tail and code != 0:
        text += "; its last output:\n" + tail
    return text


class ExitWatcher:
    """Watches one container from a daemon thread (daemon: it must never block interpreter exit)."""

    def __init__(
        self,
        connect: Callable[[], docker.DockerClient],
        container_id: str,
        *,
        memory: str,
        started: float,
    ) -> None:
        self._connect = connect
        self.container_id = container_id
        self.memory = memory
        self.started = started
        self.stopped_by_us = False
        self.exit_code: int | None = None
        self.description: str | None = None
        self.exited = threading.Event()
        self.described = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"jx-watch-{container_id[:12]}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        client: docker.DockerClient | None = None
        try:
            client = self._connect()
            code = self._wait(client)
            self.exit_code = code
        except Exception:
            self.exit_code = -1 if self.exit_code is None else self.exit_code
        finally:
            self.exited.set()
        try:
            self.description = self._describe(client)
        except Exception as exc:
            self.description = f"exited with code {self.exit_code} ({exc})"
        finally:
            self.described.set()
            if client is not None:
                client.close()

    def _wait(self, client: docker.DockerClient) -> int:
        while True:
            try:
                result = client.api.wait(self.container_id, timeout=None)
                return int(result.get("StatusCode", -1))
            except docker.errors.NotFound:
                return -1
            except requests.exceptions.ReadTimeout:
                continue

    def _describe(self, client: docker.DockerClient | None) -> str:
        if client is None:
            return f"exited with code {self.exit_code}"
        try:
            info = client.api.inspect_container(self.container_id)
            state: Mapping[str, Any] | None = info.get("State", {})
            logs = client.api.logs(self.container_id, tail=15).decode(errors="replace")
        except docker.errors.NotFound:
            state, logs = None, ""
        events = self._events_until_die(client)
        return describe_exit(
            state, events, logs, memory=self.memory, stopped_by_us=self.stopped_by_us
        )

    def _events_until_die(self, client: docker.DockerClient) -> list[dict[str, Any]]:
        """This container's events up to its ``die`` (an open-ended stream, cut at ``die``).

        An ``until`` in the future would make the engine hold the answer until then, and one in
        the past (whole seconds only) can miss the last events; reading up to ``die`` is exact.
        A timer closes the stream if ``die`` never comes (e.g. the container was removed).
        """
        stream = client.api.events(
            since=int(self.started) - 1, filters={"container": self.container_id}, decode=True
        )
        timer = threading.Timer(2.0, stream.close)
        timer.start()
        events: list[dict[str, Any]] = []
        try:
            for event in stream:
                events.append(event)
                if event.get("Action", event.get("status")) in ("die", "destroy"):
                    break
        except Exception:
            pass  # closed by the timer
        finally:
            timer.cancel()
            stream.close()
        return events
