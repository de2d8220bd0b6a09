"""Making a kernel the engine started (a fork, an undo's or a restore's) one of the server's.

The server's kernels come from its ``MultiKernelManager``: ``/api/kernels`` lists them,
JupyterLab shows them in its Running panel and connects notebooks to them through
``/api/kernels/{id}/channels``. A fork's kernel, or the kernel an undo starts from a
snapshot, is started by the engine instead (:mod:`jupyter_exec.state.forking`): a process forked
from a running kernel, driven through a ``KernelManager`` of the engine's making. jupyter_server
has no public call to take such a kernel in, so :func:`adopt` does what its ``start_kernel``
does after a launch, for a process that already runs::

    handle.km (engine's, AdoptedProvisioner) ──► a ServerKernelManager from the server's factory
        connection info and key copied           (the same sockets: JupyterLab's websocket
        the provisioner moved over                and the session drive one process)
        registered under a new kernel id ──────► activity watched, ports known, ready
    handle.km = the server's manager            (so the engine stops it through the server's)

:func:`forget` is the other end: a kernel that has already stopped (the engine retired it)
leaves the server's map without a second shutdown.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timezone
from typing import Any

from jupyter_exec.engine.kernel import KernelHandle

__all__ = ["adopt", "forget", "kernel_id_of"]


def kernel_id_of(mkm: Any, km: Any) -> str | None:
    """The id under which the server's ``mkm`` holds the manager ``km``, if it does."""
    return next((kid for kid, held in list(mkm._kernels.items()) if held is km), None)


def adopt(mkm: Any, handle: KernelHandle, kernel_name: str, notebook: str) -> str:
    """Register ``handle``'s running kernel with the server's ``mkm``; its new kernel id.

    ``kernel_name`` is the kernelspec a restart from JupyterLab starts (an empty kernel,
    as after any restart); ``notebook`` becomes its ``JPY_SESSION_NAME`` then.
    """
    old = handle.km
    kernel_id = str(uuid.uuid4())  # the dashed form: jupyter_server's routes match only that
    km = mkm.kernel_manager_factory(
        connection_file=old.connection_file,
        parent=mkm,
        log=mkm.log,
        kernel_name=kernel_name,
        kernel_spec_manager=mkm.kernel_spec_manager,
    )
    km.load_connection_info(old.get_connection_info())
    km.kernel_id = kernel_id
    provisioner = old.provisioner
    if provisioner is not None:
        provisioner.parent = km  # an adopted provisioner's restart clears its manager's
        provisioner.kernel_id = kernel_id
    km.provisioner = provisioner
    launch = getattr(old, "_launch_args", None)
    if isinstance(launch, dict) and isinstance(launch.get("env"), dict):
        launch = {**launch, "env": {**launch["env"], "JPY_SESSION_NAME": notebook}}
    km._launch_args = launch
    km._attempted_start = True
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ready.set_result(None)
    km._ready = ready
    old.provisioner = None  # the old manager no longer speaks for the process
    handle.km = km

    mkm._kernels[kernel_id] = km
    mkm._kernel_connections[kernel_id] = 0
    km.execution_state = "idle"
    km.reason = ""
    km.last_activity = datetime.now(timezone.utc)  # as jupyter_server's own utcnow()
    mkm._kernel_ports[kernel_id] = km.ports
    mkm.start_watching_activity(kernel_id)
    if not mkm._initialized_culler:
        mkm.initialize_culler()
    return kernel_id


def forget(mkm: Any, kernel_id: str) -> None:
    """Take a kernel that no longer runs out of the server's map (no shutdown request)."""
    if kernel_id not in mkm:
        return
    mkm.stop_watching_activity(kernel_id)
    km = mkm.remove_kernel(kernel_id)
    mkm._kernel_connections.pop(kernel_id, None)
    mkm._kernel_ports.pop(kernel_id, None)
    if km is not None:
        km.cleanup_connection_file()
