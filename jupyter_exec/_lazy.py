"""A package's names loaded on first use (:pep:`562`), so importing the package costs nothing.

A command such as ``jupyter-exec --version`` imports ``jupyter_exec``, and a
server imports ``jupyter_exec.e2b`` or ``jupyter_exec.manager`` for one
submodule; their ``__init__`` re-exporting every class would load jupyter_client,
zmq, tornado, Docker's SDK and nbformat on the way. A package that uses
:func:`lazy_names` keeps a table ``name -> module`` instead: the module is
imported when the name is first read, and the value is then kept in the
package like any attribute. The package still writes the ordinary imports
under ``TYPE_CHECKING`` for type checkers and readers, and ``__all__`` as before.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str,
    table: Mapping[str, str],
    *,
    loaded: Callable[[Any], Any] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose names ``table`` says where to find.

    ``loaded`` sees each value as it is loaded (the package root renames its
    classes' ``__module__`` there).
    """
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        if loaded is not None:
            value = loaded(value)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
