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
  servers would otherwise answer a bare 500 with a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from kernel_gateway.services.kernels.manager import (  # type: ignore[import-untyped]
    SeedingMappingKernelManager,
)
from tornado import web

from jupyter_exec.cluster.spec import PROVISIONER_NAME, SPEC_NAME
from jupyter_exec.exceptions import InvalidArgument

__all__ = ["ClusterKernelSpecManager", "GatewayKernelManager", "ServerKernelManager"]


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


class GatewayKernelManager(SeedingMappingKernelManager):  # type: ignore[misc]
    """Kernel Gateway's kernel manager, its start refusals answered as 4xx."""

    async def start_kernel(self, *args: Any, **kwargs: Any) -> str:
        with _start_refusals():
            return str(await super().start_kernel(*args, **kwargs))


class ServerKernelManager(AsyncMappingKernelManager):
    """Jupyter Server's kernel manager, its start refusals answered as 4xx."""

    async def start_kernel(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        with _start_refusals():
            return str(await super().start_kernel(*args, **kwargs))
