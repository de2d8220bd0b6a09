"""Code that runs inside an E2B sandbox's kernel: PIL images shown as E2B's kernels show them.

In E2B's sandboxes ``image.show()`` and ``image.save(path)`` put the image in
the cell's results (a PNG), and code written for them relies on it. A plain
kernel's ``show()`` looks for a desktop viewer instead (on a local sandbox,
the user's own desktop) and ``save()`` shows nothing. PIL is patched the
moment the user's code first imports ``PIL.Image`` (an import hook that then
steps aside), so a kernel that never uses PIL never loads it. Loaded by
:mod:`jupyter_exec.e2b.kernel_startup`; the standard library and IPython only.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["AfterImport", "install", "show_pil_images"]


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` right after module ``name`` is first imported, then steps aside."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenLoader(spec.loader, self.then)
        return spec


class _ThenLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, then: Callable[[ModuleType], None]) -> None:
        self.loader = loader
        self.then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self.loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        with contextlib.suppress(Exception):
            self.then(module)


def show_pil_images(image_module: Any) -> None:
    """``Image.show()`` and ``Image.save(path)`` display the image (E2B's kernels do)."""
    from IPython import display as ipython_display

    display: Any = ipython_display.display  # untyped in IPython
    image_class = image_module.Image
    save = image_class.save

    @functools.wraps(save)
    def save_and_show(self: Any, fp: Any, *args: Any, **kwargs: Any) -> Any:
        result = save(self, fp, *args, **kwargs)
        if isinstance(fp, (str, os.PathLike)):
            display(self)
        return result

    def show(self: Any, title: str | None = None) -> None:
        """Display the image as the cell's output."""
        display(self)

    image_class.save = save_and_show
    image_class.show = show


def install() -> None:
    """Patch PIL now if it is imported, else when it is (once per kernel)."""
    ipython = sys.modules.get("IPython")
    if ipython is None or ipython.get_ipython() is None:  # not a kernel: nowhere to show
        return
    if "PIL.Image" in sys.modules:
        show_pil_images(sys.modules["PIL.Image"])
    elif not any(isinstance(f, AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, AfterImport("PIL.Image", show_pil_images))
