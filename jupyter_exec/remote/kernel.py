"""A kernel on a Jupyter server, driven as if it were a local ``AsyncKernelManager``.

:class:`RemoteKernelManager` implements exactly the part of jupyter_client's
kernel manager that :mod:`jupyter_exec.engine.kernel` uses (``client()``,
``is_alive()``, ``interrupt_kernel()``, ``restart_kernel()``,
``shutdown_kernel()``, ``kernel_id``, ``kernel_spec``, ``has_kernel``,
``provisioner``) with REST calls, and :class:`RemoteKernelClient` the part of
the kernel client it uses (``execute``, ``kernel_info``, channels with
``get_msg``) over the kernel websocket. So a remote kernel goes through the
same session code as a local one: same ``Execution``, same notebook, same
timeout / interrupt / restart handling.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import getpass
import logging
import os
import queue
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpec

from jupyter_exec.exceptions import BackendError, KernelDiedError, KernelStartError
from jupyter_exec.remote.connection import KernelConnection
from jupyter_exec.remote.rest import NotFound, RestClient, ServerRefused
from jupyter_exec.remote.wire import new_message

__all__ = ["RemoteKernelClient", "RemoteKernelManager", "start_remote_kernel"]

log = logging.getLogger("jupyter_exec.remote")

ALIVE_CACHE = 1.0
"""Seconds an ``is_alive`` answer is reused: a quiet cell polls often, the server need not."""
PROBE_FIRST = 1.0
PROBE_MOST = 8.0
"""After a restart, a kernel_info request on the reopened websocket is given 1 s, then 2, 4
and 8 s, before the websocket is opened again (the server may have finished its restart
only after the reopen, its end still on the old ports); until the start timeout."""


def _username() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "jupyter-exec"


class _Channel:
    """One channel of a :class:`RemoteKernelClient` (what ``receiver.Receiver`` reads)."""

    def __init__(self, connection: KernelConnection, name: str) -> None:
        self._connection = connection
        self.name = name

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
        """The next message; raises ``queue.Empty`` after ``timeout`` seconds."""
        return await self._connection.get(self.name, timeout)

    async def msg_ready(self) -> bool:
        return not self._connection.queues[self.name].empty()

    def is_alive(self) -> bool:
        return self._connection.failure is None


class RemoteKernelClient:
    """Sends requests to a remote kernel and reads its replies, over one websocket."""

    def __init__(self, connection: KernelConnection) -> None:
        self.connection = connection
        self.username = _username()
        self.shell_channel = _Channel(connection, "shell")
        self.iopub_channel = _Channel(connection, "iopub")
        self.stdin_channel = _Channel(connection, "stdin")
        self.control_channel = _Channel(connection, "control")

    @property
    def session_id(self) -> str:
        return self.connection.session_id

    def _send(self, channel: str, msg_type: str, content: dict[str, Any]) -> str:
        msg = new_message(msg_type, content, session=self.session_id, username=self.username)
        self.connection.send(channel, msg)
        return str(msg["header"]["msg_id"])

    def execute(
        self,
        code: str,
        silent: bool = False,
        store_history: bool = True,
        user_expressions: dict[str, str] | None = None,
        allow_stdin: bool = False,
        stop_on_error: bool = True,
    ) -> str:
        """Send an ``execute_request``; returns its msg_id."""
        return self._send(
            "shell",
            "execute_request",
            {
                "code": code,
                "silent": silent,
                "store_history": store_history,
                "user_expressions": user_expressions or {},
                "allow_stdin": allow_stdin,
                "stop_on_error": stop_on_error,
            },
        )

    def kernel_info(self) -> str:
        return self._send("shell", "kernel_info_request", {})

    def start_channels(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to do: the manager opened the websocket already (and reopens it)."""

    def stop_channels(self) -> None:
        """Stop reading (the manager closes the websocket when the kernel goes away)."""

    @property
    def channels_running(self) -> bool:
        return self.connection.failure is None


class _RemoteInfo:
    """Stands where a provisioner would: says what became of a kernel that went away."""

    def __init__(self, manager: RemoteKernelManager) -> None:
        self._manager = manager

    async def exit_description(self) -> str:
        return self._manager.exit_description()


class RemoteKernelManager:
    """A kernel on a Jupyter Server / Kernel Gateway / Enterprise Gateway.

    Made by :func:`start_remote_kernel`. ``path`` is where the server ran the
    kernel (its ``cwd`` relative to the server's root dir), when the server
    was asked for one.
    """

    remote = True
    """The kernel is away from the session's work dir (its files come home through it)."""

    def __init__(
        self,
        rest: RestClient,
        kernel_id: str,
        kernel_name: str,
        spec: KernelSpec | None,
        connection: KernelConnection,
        path: str | None = None,
    ) -> None:
        self.rest = rest
        self.kernel_id = kernel_id
        self.kernel_name = kernel_name
        self.kernel_spec = spec
        self.connection = connection
        self.path = path
        self.has_kernel = True
        self.provisioner = _RemoteInfo(self)
        self.shutdown_wait_time = 3.0
        self._alive: tuple[float, bool] = (0.0, True)
        self._restarts_seen = connection.server_restarts
        self._gave_up_seen = connection.server_gave_up
        self._server_restarting = False
        self._gone: str | None = None
        self.startup_timeout = 60.0
        self.restarts = 0
        """How many times the kernel came back (by our request or by the server's restarter)."""

    def __repr__(self) -> str:
        return f"<RemoteKernelManager {self.kernel_id} on {self.rest.describe()}>"

    def client(self, **kwargs: Any) -> RemoteKernelClient:
        return RemoteKernelClient(self.connection)

    def exit_description(self) -> str:
        if self._gone:
            return self._gone
        if self.connection.failure:
            return self.connection.failure
        return f"the server {self.rest.describe()} reported kernel {self.kernel_id} dead"

    async def is_alive(self) -> bool:
        """Whether the kernel still exists and runs (at most one request per second)."""
        if not self.has_kernel or self.connection.failure is not None:
            return False
        if self.connection.server_restarts != self._restarts_seen:
            # The server's restarter saw the kernel die and starts it again (perhaps on
            # another host): whatever ran is lost, and our restart must not race its own.
            self._restarts_seen = self.connection.server_restarts
            self._server_restarting = True
            self._gone = "the kernel died and the server is restarting it"
            self._alive = (time.monotonic(), False)
            return False
        if self.connection.server_gave_up != self._gave_up_seen:
            self._gave_up_seen = self.connection.server_gave_up
            self._server_restarting = False
            reason = self.connection.dead_reason
            self._gone = "the kernel died and the server could not restart it" + (
                f": {reason}" if reason else ""
            )
            self._alive = (time.monotonic(), False)
            return False
        checked, alive = self._alive
        if time.monotonic() - checked < ALIVE_CACHE:
            return alive
        try:
            model = await self.rest.request("GET", f"api/kernels/{self.kernel_id}", timeout=10)
            alive = model.get("execution_state") != "dead"
            if not alive:
                self._gone = "the server reports the kernel dead"
        except NotFound:
            alive = False
            self._gone = f"kernel {self.kernel_id} no longer exists on {self.rest.describe()}"
        except BackendError as exc:
            # Unreachable server: keep waiting while the websocket is up (it may be a blip).
            log.warning("kernel %s: liveness check failed: %s", self.kernel_id, exc)
            alive = self.connection.connected
        self._alive = (time.monotonic(), alive)
        return alive

    async def interrupt_kernel(self) -> None:
        await self.rest.request("POST", f"api/kernels/{self.kernel_id}/interrupt", timeout=30)

    async def restart_kernel(self, now: bool = False, **kwargs: Any) -> None:
        """Bring the kernel back (state lost), then reconnect its websocket.

        When the server's own restarter is already restarting it (a ``restarting``
        notice came), no second restart is sent: two restarts of one kernel race
        (Kernel Gateway launches it twice and answers 500). Either way the kernel
        may now run on another host, on other ports, so the websocket is always
        opened anew, and a ``kernel_info`` request must be answered on it before
        this returns (:meth:`_reconnect`).
        """
        deadline = time.monotonic() + self.startup_timeout
        if self.connection.dead_reason is not None:  # the server declared the death final
            self.has_kernel = False
            raise KernelDiedError(
                f"the server {self.rest.describe()} gave kernel {self.kernel_id} up; "
                "start a new session"
            )
        if self._server_restarting:
            self._server_restarting = False  # the server restarts it: wait for it instead
        else:
            try:
                await self.rest.request(
                    "POST", f"api/kernels/{self.kernel_id}/restart", timeout=self.startup_timeout
                )
            except NotFound:
                raise self._vanished() from None
            except ServerRefused as exc:
                if exc.status != HTTPStatus.CONFLICT:  # 409: its host cannot be reached
                    raise
                self.has_kernel = False
                raise KernelDiedError(
                    f"kernel {self.kernel_id} cannot be restarted: {exc.reason}"
                ) from exc
        await self._reconnect(deadline)
        self._restarts_seen = self.connection.server_restarts
        self._gave_up_seen = self.connection.server_gave_up
        self._alive = (time.monotonic(), True)
        self._gone = None
        self.restarts += 1

    async def _reconnect(self, deadline: float) -> None:
        """Reopen the websocket until the kernel answers on it, or raise at ``deadline``.

        The server's end of a new websocket waits for the kernel to be ready and
        connects to its current ports; one opened before the server had begun
        its restart would still read the old ones, so an unanswered probe means
        "open it again", with growing patience.
        """
        wait = PROBE_FIRST
        while True:
            try:
                await self.connection.reopen()
            except NotFound:
                raise self._vanished() from None
            except BackendError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
                continue
            if await self._answers(min(wait, max(0.0, deadline - time.monotonic()))):
                return
            if time.monotonic() >= deadline:
                raise KernelStartError(
                    f"kernel {self.kernel_id} on {self.rest.describe()} did not answer after "
                    f"its restart within {self.startup_timeout:g} s"
                )
            wait = min(wait * 2, PROBE_MOST)

    def _vanished(self) -> KernelDiedError:
        """The server no longer has the kernel: nothing to restart, the session is over."""
        self.has_kernel = False
        return KernelDiedError(
            f"kernel {self.kernel_id} no longer exists on {self.rest.describe()}; "
            "start a new session"
        )

    async def _answers(self, within: float) -> bool:
        """Whether the kernel answers a ``kernel_info_request`` on the current websocket."""
        client = self.client()
        msg_id = client.kernel_info()
        until = time.monotonic() + within
        while (remaining := until - time.monotonic()) > 0:
            try:
                msg = await self.connection.get("shell", remaining)
            except queue.Empty:
                return False
            if msg["parent_header"].get("msg_id") == msg_id:
                return True
        return False

    async def fetch(self, path: str, dest: str | os.PathLike[str]) -> Path:
        """Copy a file the remote code wrote (``path`` relative to the server's root dir).

        Only servers with a contents API (Jupyter Server) can; see :func:`fetch_file`.
        """
        return await fetch_file(self.rest, path, Path(dest))

    async def shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
        """Delete the kernel on the server and close the websocket. Idempotent."""
        if not self.has_kernel:
            return
        self.has_kernel = False
        try:
            await self.connection.close()
            await self.rest.request("DELETE", f"api/kernels/{self.kernel_id}", timeout=30)
        except NotFound:
            pass  # already gone, which is what we wanted


async def fetch_file(rest: RestClient, path: str, dest: Path) -> Path:
    """Copy ``path`` (relative to the server's root dir) into the local file ``dest``.

    Uses the contents API, which Jupyter Server has and the gateways (Kernel
    Gateway, Enterprise Gateway) do not: there, files the kernel writes stay on
    the kernel's machine.
    """
    try:
        model = await rest.request(
            "GET", f"api/contents/{path}", query="type=file&format=base64&content=1"
        )
    except NotFound:
        raise BackendError(
            f"{path}: no such file on {rest.describe()}, or the server has no contents API "
            "(Kernel Gateway and Enterprise Gateway have none)"
        ) from None
    content = model.get("content") if isinstance(model, dict) else None
    if not isinstance(content, str):
        raise BackendError(f"{path}: the server sent no file content")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(base64.b64decode(content))
    return dest


def _spec_from(model: dict[str, Any], kernel_name: str) -> KernelSpec | None:
    spec = model.get("spec") if isinstance(model, dict) else None
    if not isinstance(spec, dict):
        return None
    return KernelSpec(
        name=kernel_name,
        display_name=spec.get("display_name", kernel_name),
        language=spec.get("language", ""),
        argv=list(spec.get("argv") or []),
        metadata=dict(spec.get("metadata") or {}),
    )


async def _kernel_spec(rest: RestClient, kernel_name: str) -> KernelSpec | None:
    """The named kernelspec on the server; a clear error if it has no such kernel."""
    listing = await rest.request("GET", "api/kernelspecs")
    specs = listing.get("kernelspecs", {}) if isinstance(listing, dict) else {}
    if specs and kernel_name not in specs:
        raise KernelStartError(
            f"the Jupyter server at {rest.describe()} has no kernel {kernel_name!r}; "
            f"it has: {', '.join(sorted(specs)) or 'none'}"
        )
    return _spec_from(specs.get(kernel_name, {}), kernel_name)


async def start_remote_kernel(
    url: str,
    token: str | None,
    kernel_name: str = "python3",
    startup_timeout: float = 60.0,
    *,
    path: str | None = None,
    env: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    validate_cert: bool = True,
    reconnect_timeout: float = 60.0,
) -> RemoteKernelManager:
    """Start ``kernel_name`` on the server at ``url`` and open its websocket.

    ``path`` asks the server to run the kernel in that folder (relative to its
    root dir; Jupyter Server and Kernel Gateway honour it). ``env`` is passed
    with the start request: Enterprise Gateway reads ``KERNEL_*`` variables
    from it (``KERNEL_USERNAME``, ``KERNEL_NAMESPACE``, ``KERNEL_WORKING_DIR``...).
    Raises :class:`BackendError` if the server cannot be used (unreachable),
    :class:`ServerRefused` (with the server's ``status`` and ``reason``) if it
    refuses (a wrong token, a gateway's policy such as Enterprise Gateway's
    ``KERNEL_USERNAME`` check), and :class:`KernelStartError` if the kernel
    failed to start.
    """
    rest = RestClient(url, token, headers=headers, validate_cert=validate_cert)
    spec = await _kernel_spec(rest, kernel_name)
    body: dict[str, Any] = {"name": kernel_name}
    if path is not None:
        body["path"] = path
    if env:
        body["env"] = dict(env)
    try:
        model = await rest.request("POST", "api/kernels", body, timeout=startup_timeout)
    except NotFound as exc:
        raise KernelStartError(f"{rest.describe()} has no kernels API: {exc}") from None
    except ServerRefused as exc:
        if exc.status is not None and exc.status < 500:  # a refusal: its reason says what to do
            auth = exc.status == 401 or not exc.reason  # the message then says what to do
            why = f": {exc}" if auth else f"(HTTP {exc.status}): {exc.reason}"
            raise ServerRefused(
                f"{rest.describe()} refused to start kernel {kernel_name!r} {why}",
                exc.status,
                exc.reason,
            ) from None
        raise KernelStartError(f"the server could not start kernel {kernel_name!r}: {exc}") from exc
    kernel_id = str(model["id"])
    connection = KernelConnection(
        rest, kernel_id, connect_timeout=startup_timeout, reconnect_timeout=reconnect_timeout
    )
    manager = RemoteKernelManager(rest, kernel_id, kernel_name, spec, connection, path=path)
    manager.startup_timeout = startup_timeout
    try:
        await connection.open()
    except BaseException:
        with contextlib.suppress(Exception):  # report the connection failure, not this
            await manager.shutdown_kernel(now=True)
        raise
    log.info("remote kernel %s started on %s", kernel_id, rest.describe())
    return manager
