"""The jupyter_server extension: jupyter-exec sessions over REST, live in JupyterLab.

Enabled by ``jupyter_server_config.d/jupyter_exec.json`` (installed with the
package), which names this module; jupyter_server then calls
:func:`_jupyter_server_extension_points` to find :class:`JupyterExecApp`.
Importing this package does not import jupyter_server (its app does, when asked for), and
``import jupyter_exec`` does not either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jupyter_exec.server.app import JupyterExecApp

__all__ = ["JupyterExecApp"]


def __getattr__(name: str) -> Any:
    # The app (and so jupyter_server, ~2 s to import) only when asked for: the REST error
    # table in this package serves the E2B server and every CLI command, which must not pay it.
    if name == "JupyterExecApp":
        from jupyter_exec.server.app import JupyterExecApp

        return JupyterExecApp
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from jupyter_exec.server.app import JupyterExecApp

    return [{"module": "jupyter_exec.server", "app": JupyterExecApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the JupyterLab extension (the sessions panel) is, for JupyterLab's tools.

    ``src`` is relative to this module's folder: the build output in the package,
    which pip installs as ``share/jupyter/labextensions/jupyter-exec``.
    """
    return [{"src": "../labextension", "dest": "jupyter-exec"}]
