"""Where the files shipped next to the package live: ``kernels/`` (Dockerfile and kernelspecs).

``kernels/`` sits at the top of the repository so that people can read and ``docker build`` it
directly. A source checkout or editable install finds it next to the package; a wheel installs it
as data files under ``<prefix>/share/jupyter-exec/kernels``.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

__all__ = ["dockerfile_dir", "kernels_dir", "kernelspec_dirs"]


def kernels_dir() -> Path:
    """The ``kernels/`` directory; ``JUPYTER_EXEC_KERNELS_DIR`` overrides the search."""
    override = os.environ.get("JUPYTER_EXEC_KERNELS_DIR")
    candidates = [Path(override)] if override else []
    candidates.append(Path(__file__).resolve().parents[2] / "kernels")  # trusted: the package
    for prefix in (sys.prefix, sysconfig.get_path("data"), "/usr/local", "/usr"):
        candidates.append(Path(prefix) / "share" / "jupyter-exec" / "kernels")
    for candidate in candidates:
        if (candidate / "docker" / "Dockerfile").is_file():
            return candidate
    raise FileNotFoundError(
        "jupyter-exec's kernels/ directory (Dockerfile and kernelspecs) was not found; looked in "
        + ", ".join(str(c) for c in candidates)
    )


def dockerfile_dir() -> Path:
    """The directory holding the kernel image's Dockerfile."""
    return kernels_dir() / "docker"


def kernelspec_dirs() -> list[Path]:
    """Every kernelspec directory (one holding a ``kernel.json``) under ``kernels/``."""
    return sorted(p.parent for p in kernels_dir().glob("*/kernel.json"))
