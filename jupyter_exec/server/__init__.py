"""The jupyter_server extension: jupyter-exec sessions over REST, live in JupyterLab.

Enabled by ``jupyter_server_config.d/jupyter_exec.json`` (installed with the
package), which names this module; jupyter_server then calls
:func:`_jupyter_server_extension_points` to find :class:`JupyterExecApp`.
Importing this package imports jupyter_server; ``import jupyter_exec`` does not.
"""

from __future__ import annotations

from typing import Any

from jupyter_exec.server.app import JupyterExecApp

__all__ = ["JupyterExecApp"]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "jupyter_exec.server", "app": JupyterExecApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the JupyterLab extension (the sessions panel) is, for JupyterLab's tools.

    ``src`` is relative to this module's folder: the build output in the package,
    which pip installs as ``share/jupyter/labextensions/jupyter-exec``.
    """
    return [{"src": "../labextension", "dest": "jupyter-exec"}]
