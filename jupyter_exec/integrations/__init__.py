"""Adapters that let agent frameworks run code in jupyter-exec sessions.

* :mod:`jupyter_exec.integrations.ag2` - AG2 0.x (``autogen.coding``): a
  ``CodeExecutor`` for ``ConversableAgent(code_execution_config=...)``, stateful
  (``SessionCodeExecutor``) or a process per block (``SessionCommandLineExecutor``).
* :mod:`jupyter_exec.integrations.ag2_tools` - AG2 1.x (``ag2.tools``): a
  ``CodeEnvironment`` for ``SandboxCodeTool``.
* :mod:`jupyter_exec.integrations.smolagents` - smolagents: a
  ``RemotePythonExecutor`` for ``CodeAgent(executor=...)``.
* :mod:`jupyter_exec.integrations.langchain` - LangChain / LangGraph: a tool
  running code in a session per thread.
* :mod:`jupyter_exec.integrations.deepagents` - Deep Agents: a sandbox backend
  (shell commands and files) on a session.

Each is a thin adapter over :mod:`jupyter_exec.agents.agent`, which runs the code and
says what happened the same way for every front end. The frameworks are
optional dependencies, imported only when an adapter is used; a missing one is
reported by :class:`MissingDependency`, naming the extra that installs it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from jupyter_exec.exceptions import MissingDependency

__all__ = ["MissingDependency", "adapter_options", "optional_base", "require"]


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependency` naming ``jupyter-exec[extra]``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(
            f"{what} needs {module.split('.')[0]!r}, which is not installed here "
            f"({exc}). Install it with: pip install 'jupyter-exec[{extra}]'"
        ) from exc


def optional_base(module: str, name: str, extra: str, what: str) -> type:
    """The framework's class ``module.name``, for an adapter to subclass.

    When the framework is not installed, a stand-in whose constructor raises
    :class:`MissingDependency` (as :func:`require` does): the adapter's module still
    imports, and only using the adapter says what to install.
    """
    package = module.split(".")[0]
    if importlib.util.find_spec(package) is None:

        class _Missing:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                require(package, extra, what)

        _Missing.__doc__ = f"Stands in for ``{name}`` when {package} is not installed."
        return _Missing
    base: type = getattr(importlib.import_module(module), name)
    return base


def adapter_options(
    found: Mapping[str, Any], given: Mapping[str, Any], timeout: float | None
) -> dict[str, Any]:
    """The keyword arguments of an adapter's session, the same for every adapter: what its
    environment says (``found``: interpreter, backend, image, network), the caller's own
    session options over that, and the adapter's ``timeout`` unless the caller gave one."""
    options = {**found, **given}
    options.setdefault("timeout", timeout)
    return options
