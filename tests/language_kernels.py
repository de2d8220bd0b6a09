"""Kernelspecs for the other languages' kernels, installed by their own installers into a folder.

The tests run real R, Deno and bash kernels. Their programs are installed on
the machine (R with IRkernel from Debian, ``bash_kernel`` and ``deno`` from
PyPI); their kernelspecs are written here into a temporary folder that goes
on ``JUPYTER_PATH``, by each kernel's own installer::

    python -m bash_kernel.install --prefix <folder>     -> kernels/bash
    deno jupyter --install  (HOME=<scratch>)              -> kernels/deno
    R: IRkernel::installspec(prefix = <folder>)          -> kernels/ir

so no test depends on what a user of the machine has installed, and
``jupyter_client`` finds them the way it finds any kernelspec.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["KERNELS", "install_language_kernels", "language_kernels"]

KERNELS = ("ir", "deno", "bash")


def _deno() -> str:
    found = shutil.which("deno") or str(Path(sys.executable).parent / "deno")
    if not Path(found).exists():
        raise RuntimeError("deno is not installed (pip install deno)")
    return found


def install_language_kernels(scratch: Path) -> Path:
    """Install the R, Deno and bash kernelspecs under ``scratch``; returns the JUPYTER_PATH entry.

    Raises when a kernel's program is missing: a language test must not pass without
    its kernel (CI installs them; see the integrator's notes).
    """
    prefix = scratch / "prefix"
    data = prefix / "share" / "jupyter"
    kernels = data / "kernels"
    quiet = {"check": True, "capture_output": True, "timeout": 300}
    subprocess.run([sys.executable, "-m", "bash_kernel.install", "--prefix", str(prefix)], **quiet)  # type: ignore[call-overload]
    home = scratch / "deno-home"
    env = {**os.environ, "HOME": str(home)}
    subprocess.run([_deno(), "jupyter", "--install", "--force"], env=env, **quiet)  # type: ignore[call-overload]
    shutil.copytree(home / ".local" / "share" / "jupyter" / "kernels" / "deno", kernels / "deno")
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    r_code = f"IRkernel::installspec(prefix = '{prefix}')"  # it runs `jupyter kernelspec`
    subprocess.run(["R", "--slave", "-e", r_code], env={**os.environ, "PATH": path}, **quiet)  # type: ignore[call-overload]
    missing = [name for name in KERNELS if not (kernels / name / "kernel.json").is_file()]
    if missing:
        raise RuntimeError(f"kernelspecs not installed: {missing}")
    return data


@pytest.fixture(scope="module")
def language_kernels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The R, Deno and bash kernelspecs on ``JUPYTER_PATH`` for one test module."""
    data = install_language_kernels(tmp_path_factory.mktemp("language-kernels"))
    with pytest.MonkeyPatch.context() as patch:
        old = os.environ.get("JUPYTER_PATH")
        patch.setenv("JUPYTER_PATH", os.pathsep.join([str(data), *filter(None, [old])]))
        yield data
