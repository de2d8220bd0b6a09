"""The E2B-compatible sandbox server (``jupyter-exec e2b``): the official
``e2b-code-interpreter`` SDK, unchanged, on jupyter-exec sessions. The server needs only
jupyter-exec's own dependencies; the ``e2b`` extra adds the SDK, for its clients.

* :mod:`~jupyter_exec.e2b.app` - :class:`E2BServer`: the tornado app, its ports, the engine;
* :mod:`~jupyter_exec.e2b.limits` - its default ports and limits (what ``--help`` shows);
* :mod:`~jupyter_exec.e2b.sandboxes` - sandboxes and code contexts as manager sessions;
* :mod:`~jupyter_exec.e2b.auth` - which credential opens which route, decided in one place;
* :mod:`~jupyter_exec.e2b.web` - Host/Origin checks, the credential, the bounded body, errors
  (the handlers' base);
* :mod:`~jupyter_exec.e2b.fields` - a client's JSON and its fields, checked (400, never 500);
* :mod:`~jupyter_exec.e2b.code` - ``/execute`` and ``/contexts`` (the code interpreter);
* :mod:`~jupyter_exec.e2b.envd` - ``/files``, filesystem and process RPCs (envd);
* :mod:`~jupyter_exec.e2b.api` - create, list, connect, kill (the E2B API);
* :mod:`~jupyter_exec.e2b.protocol`, :mod:`~jupyter_exec.e2b.connect` - the wire formats;
* :mod:`~jupyter_exec.e2b.files`, :mod:`~jupyter_exec.e2b.paths`,
  :mod:`~jupyter_exec.e2b.processes` - files and commands, confined to a sandbox;
* :mod:`~jupyter_exec.e2b.errors` - our exceptions to the SDK's statuses, once;
* :mod:`~jupyter_exec.e2b.kernel_formats`, :mod:`~jupyter_exec.e2b.kernel_images` - code that
  runs in each sandbox kernel (loaded at start by ``kernel_startup.py``): chart data, a
  DataFrame's columns, PIL images shown as E2B shows them.
"""

from typing import TYPE_CHECKING

from jupyter_exec._lazy import lazy_names
from jupyter_exec.e2b.limits import CODE_PORT, ENVD_PORT

if TYPE_CHECKING:
    from jupyter_exec.e2b.app import E2BConfig, E2BServer

__all__ = ["CODE_PORT", "ENVD_PORT", "E2BConfig", "E2BServer"]

if not TYPE_CHECKING:  # the server loads on first use: its command line needs only the limits
    __getattr__, __dir__ = lazy_names(
        __name__, {"E2BConfig": "jupyter_exec.e2b.app", "E2BServer": "jupyter_exec.e2b.app"}
    )
