"""The server-side classes of ``jupyter-exec gateway``, named by its generated config.

They run inside the Kernel Gateway or Jupyter Server process, never in the
command's own (so it does not import either server):

* :class:`ClusterKernelSpecManager` knows and starts only the gateway's
  kernelspec. jupyter_client's manager falls back to ipykernel's built-in
  ``python3`` (a kernel on the gateway itself) whatever its kernel dirs and
  allow-list say; here a request for any other name, or for a spec of our name
  that does not use our provisioner, is refused with a 403 and a reason.
* :class:`GatewayKernelManager` (Kernel Gateway) and :class:`ServerKernelManager`
  (Jupyter Server) translate, once, the refusals of a kernel start into HTTP:
  the provisioner's user policy (a ``PermissionError``) becomes a 403, a bad
  request our provisioner refuses (an :class:`~jupyter_exec.exceptions.InvalidArgument`,
  such as a pinned host outside the list) a 400, each with its reason. Both
  servers would otherwise answer a bare 500 with a traceback. A host that cannot be reached
  (:class:`~jupyter_exec.exceptions.HostUnreachable`) is a 409, a start or a restart.
* :class:`ClusterRestarter` declares a kernel dead at once when its pinned host is down
  (jupyter_client's restarter would fail a restart at every poll), and
  :class:`ClusterWebsocketConnection` puts the reason into the ``dead`` notice clients get.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

from jupyter_client.ioloop.restarter import AsyncIOLoopKernelRestarter
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from kernel_gateway.services.kernels.manager import (  # type: ignore[import-untyped]
    SeedingMappingKernelManager,
)
from tornado import web

from jupyter_exec.cluster.spec import PROVISIONER_NAME, SPEC_NAME
from jupyter_exec.exceptions import HostUnreachable, InvalidArgument

__all__ = [
    "ClusterKernelSpecManager",
    "ClusterRestarter",
    "ClusterWebsocketConnection",
    "GatewayKernelManager",
    "ServerKernelManager",
]

DEAD_REASON = "jupyter_exec_dead_reason"
"""The attribute of a kernel manager that holds why its kernel's death is final."""


def _refusal(status: int, message: str) -> web.HTTPError:
    reason = " ".join(message.split())  # one line: it is also the HTTP reason phrase
    return web.HTTPError(status, "%s", reason, reason=reason)


class ClusterKernelSpecManager(KernelSpecManager):
    """A spec manager that knows, and starts, only the gateway's own kernelspec."""

    def find_kernel_specs(self) -> dict[str, str]:
        return {k: v for k, v in super().find_kernel_specs().items() if k == SPEC_NAME}

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        if kernel_name.lower() != SPEC_NAME:
            raise _refusal(
                403, f"this gateway runs only the kernelspec {SPEC_NAME!r}, not {kernel_name!r}"
            )
        spec = super().get_kernel_spec(kernel_name)
        provisioner = (spec.metadata or {}).get("kernel_provisioner", {}).get("provisioner_name")
        if provisioner != PROVISIONER_NAME:  # the name found elsewhere than in our kernel dir
            raise _refusal(403, f"the kernelspec {kernel_name!r} is not this gateway's")
        return spec


@contextlib.contextmanager
def _start_refusals() -> Iterator[None]:
    try:
        yield
    except PermissionError as exc:  # gateway_provisioners' user policy
        raise _refusal(403, str(exc)) from exc
    except InvalidArgument as exc:  # our provisioner: a pin outside the hosts, a bad kernel id
        raise _refusal(400, str(exc)) from exc
    except HostUnreachable as exc:  # no host (or not the pinned one) can be reached over SSH
        raise _refusal(409, str(exc)) from exc


class GatewayKernelManager(SeedingMappingKernelManager):  # type: ignore[misc]
    """Kernel Gateway's kernel manager, its start refusals answered as 4xx."""

    async def start_kernel(self, *args: Any, **kwargs: Any) -> str:
        with _start_refusals():
            return str(await super().start_kernel(*args, **kwargs))

    async def restart_kernel(self, *args: Any, **kwargs: Any) -> Any:
        with _start_refusals():
            return await super().restart_kernel(*args, **kwargs)


class ServerKernelManager(AsyncMappingKernelManager):
    """Jupyter Server's kernel manager, its start refusals answered as 4xx."""

    async def start_kernel(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        with _start_refusals():
            return str(await super().start_kernel(*args, **kwargs))

    async def restart_kernel(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        with _start_refusals():
            return await super().restart_kernel(*args, **kwargs)  # type: ignore[no-untyped-call]


class _GaveUp(Exception):
    """Ends a restarter's poll: the kernel's death was declared final."""


class ClusterRestarter(AsyncIOLoopKernelRestarter):
    """jupyter_client's restarter, except that a kernel whose host cannot be reached (a
    pinned host that is down: the provisioner's ``unreachable``) is declared dead at once,
    with the reason, instead of restarted. jupyter_client's own would call a restart that
    fails, and call it again at every poll, while its clients wait."""

    def _give_up(self, reason: str) -> None:
        self.log.warning(
            "kernel %s: %s: it is dead", getattr(self.kernel_manager, "kernel_id", "?"), reason
        )
        setattr(self.kernel_manager, DEAD_REASON, reason)
        self._restarting = False
        self._restart_count = 0
        self.stop()
        super()._fire_callbacks("dead")

    def _fire_callbacks(self, event: Any) -> None:
        reason = getattr(self.kernel_manager.provisioner, "unreachable", None)
        if event == "restart" and reason:
            self._give_up(str(reason))
            raise _GaveUp
        super()._fire_callbacks(event)

    async def poll(self) -> None:  # type: ignore[override]
        try:
            await super().poll()
        except _GaveUp:
            pass
        except HostUnreachable as exc:  # the restart itself found the host down
            self._give_up(str(exc))


V1_PROTOCOL = "v1.kernel.websocket.jupyter.org"

MAX_V1_PARTS = 4096
"""Offsets a v1 frame may declare: a channel, four message parts and its buffers."""


def v1_frame_in_bounds(frame: bytes | str) -> bool:
    """Whether a v1 kernel websocket frame's offsets fit it (read before jupyter_server does):
    a count of at least 2 and at most :data:`MAX_V1_PARTS` whose table lies inside the frame,
    each offset within it and none before the one before."""
    if not isinstance(frame, bytes) or len(frame) < 8:
        return False
    count = int.from_bytes(frame[:8], "little")
    if not 2 <= count <= MAX_V1_PARTS or 8 * (count + 1) > len(frame):
        return False
    offsets = [int.from_bytes(frame[8 * i : 8 * (i + 1)], "little") for i in range(1, count + 1)]
    ends = [8 * (count + 1), *offsets, len(frame)]
    return all(a <= b for a, b in itertools.pairwise(ends))


class ClusterWebsocketConnection(ZMQChannelsWebsocketConnection):
    """The server's kernel websocket: its ``dead`` notice also says why, when the kernel's
    death was declared final (``reason`` in the status message's content); and it keeps the
    framing its handshake chose for as long as it lives.

    jupyter_server reads the framing from the websocket handler each time, and a handler that
    was closed (a client reconnecting under the same session id makes the server close the
    old one: "Replacing stale connection") no longer knows it, so a v1 frame that was still
    waiting on it was decoded in the legacy framing: an error, or the server stalled for
    minutes building a ``struct`` format of a hundred million items, every client of it with
    it. Here the framing is taken while the handler knows it and kept, and a frame read after
    the handler closed is dropped (its answer has nowhere to go); clients of any make are
    safe, not only ours (:mod:`jupyter_exec.remote.connection` no longer sends such frames).
    """

    _framing: str | None = None
    """The subprotocol the handshake chose (None: the legacy framing, or not yet known)."""

    @property
    def subprotocol(self) -> str | None:
        handler = self.websocket_handler
        if handler is not None and handler.ws_connection is not None:
            self._framing = handler.selected_subprotocol
        return self._framing

    def handle_incoming_message(self, incoming_msg: str) -> None:
        handler = self.websocket_handler
        if handler is None or handler.ws_connection is None:
            self.log.warning(
                "kernel %s: a frame read after its websocket closed is dropped", self.kernel_id
            )
            return
        if self.subprotocol == V1_PROTOCOL and not v1_frame_in_bounds(incoming_msg):
            # jupyter_server reads the offset count first and builds that many offsets: a
            # client's 8 bytes of 0xff would make it loop 2**64 times, every client with it.
            self.log.warning(
                "kernel %s: a v1 frame whose offsets do not fit it is dropped (%d bytes)",
                self.kernel_id,
                len(incoming_msg),
            )
            return
        super().handle_incoming_message(incoming_msg)

    def on_restart_failed(self) -> None:
        reason = getattr(self.kernel_manager, DEAD_REASON, None)
        if not reason:
            super().on_restart_failed()  # type: ignore[no-untyped-call]
            return
        self.log.error("kernel %s is dead: %s", self.kernel_id, reason)
        msg = self.session.msg("status", {"execution_state": "dead", "reason": str(reason)})
        if self.subprotocol == V1_PROTOCOL:
            from jupyter_server.services.kernels.connection.base import (
                serialize_msg_to_ws_v1,
            )

            frame = serialize_msg_to_ws_v1(msg, "iopub", self.session.pack)  # type: ignore[no-untyped-call]
            self.write_message(frame, binary=True)
        else:
            import json

            from jupyter_client.jsonutil import json_default

            msg["channel"] = "iopub"
            self.write_message(json.dumps(msg, default=json_default))
