"""The remote backend: kernels on a Jupyter Server, Kernel Gateway or Enterprise Gateway.

``Session(backend="remote", url=..., token=...)`` calls :func:`start_remote_kernel`
and then drives the kernel through :class:`RemoteKernelManager`, which stands in
for jupyter_client's kernel manager. Modules, inner to outer:

* :mod:`~jupyter_exec.remote.wire` - kernel messages <-> websocket frames;
* :mod:`~jupyter_exec.remote.rest` - the REST API, errors translated;
* :mod:`~jupyter_exec.remote.connection` - the websocket, reconnected when it drops;
* :mod:`~jupyter_exec.remote.kernel` - the manager and client the session uses.
"""

from jupyter_exec.remote.kernel import RemoteKernelClient, RemoteKernelManager, start_remote_kernel

__all__ = ["RemoteKernelClient", "RemoteKernelManager", "start_remote_kernel"]
