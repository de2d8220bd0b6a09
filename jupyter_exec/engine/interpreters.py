"""Which Python a kernel runs, and that interpreter's environment.

Kept apart from starting kernels because it is about the host, not the
protocol: finding an interpreter from what a user typed (a path, a venv
folder, a command), checking it can run ipykernel before any kernel is
launched (so the error says how to fix it), and giving its kernel and
subprocesses that environment's ``PATH`` as an activated venv would. The
environment and venv features use the same resolution.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from jupyter_client.kernelspec import KernelSpec

from jupyter_exec.exceptions import InvalidArgument, KernelStartError

__all__ = [
    "activate",
    "ask_interpreter",
    "kernel_interpreter",
    "kernel_spec_for_python",
    "resolve_python",
]


def resolve_python(python: str | os.PathLike[str]) -> Path:
    """An interpreter path from a path, a venv folder or a command name.

    Raises :class:`~jupyter_exec.InvalidArgument` naming the path when there
    is none there, or it is a file this user cannot run.
    """
    candidate = Path(python).expanduser()
    if candidate.is_dir():
        for sub in ("bin/python", "bin/python3", "Scripts/python.exe"):
            if (candidate / sub).exists():
                return _runnable((candidate / sub).absolute())
        raise InvalidArgument(
            f"{candidate} is a folder but not a virtual environment (no bin/python); "
            "give an interpreter or a venv"
        )
    if candidate.exists():
        return _runnable(candidate.absolute())
    found = shutil.which(str(python))
    if found:
        return Path(found)
    raise InvalidArgument(
        f"no Python interpreter at {python!r} (not a file, a venv or a command on PATH)"
    )


def _runnable(exe: Path) -> Path:
    if not exe.is_file() or not os.access(exe, os.X_OK):
        raise InvalidArgument(
            f"the interpreter {exe} is not executable (or not a file); "
            f"make it executable (chmod +x {exe}) or give another interpreter"
        )
    return exe


def kernel_interpreter(argv: Sequence[str]) -> Path:
    """The interpreter a kernelspec's argv runs (the stock spec's plain "python" is this one)."""
    argv0 = argv[0] if argv else sys.executable
    return Path(sys.executable if argv0 in ("python", "python3") else argv0)


def activate(exe: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` as if ``exe``'s environment were activated (changed in place, and returned).

    Its folder goes first on PATH and a venv's root into VIRTUAL_ENV, so ``pip``
    and console scripts in ``%%bash`` cells and subprocesses are the kernel's own.
    """
    bin_dir = str(exe.parent)
    path = env.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        env["PATH"] = f"{bin_dir}{os.pathsep}{path}" if path else bin_dir
    if (exe.parent.parent / "pyvenv.cfg").exists():
        env.setdefault("VIRTUAL_ENV", str(exe.parent.parent))
    return env


def ask_interpreter(
    exe: Path, code: str, *, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """``exe -c code``, its output captured; an interpreter that cannot run (or, with
    ``check``, whose code fails) is an :class:`InvalidArgument` naming it."""
    try:
        return subprocess.run(
            [str(exe), "-c", code], capture_output=True, text=True, timeout=60, check=check
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise InvalidArgument(f"cannot run the interpreter {exe}: {exc}") from None


def kernel_spec_for_python(python: str | os.PathLike[str]) -> KernelSpec:
    """A kernelspec that runs ipykernel with ``python``, checking ipykernel is there.

    The check finds ipykernel without importing it: the import (IPython, zmq, tornado) costs
    about 0.25 s of CPU, paid again by the kernel itself a moment later, where a broken
    install still fails the start with its own error.
    """
    exe = resolve_python(python)
    probe = ask_interpreter(
        exe,
        "import importlib.util as u, sys\n"
        "if u.find_spec('ipykernel') is None: sys.exit(1)\n"
        "print(sys.version.split()[0])",
    )
    if probe.returncode != 0:
        raise KernelStartError(
            f"{exe} cannot run an IPython kernel: ipykernel is not installed there.\n"
            f"Fix: {exe} -m pip install ipykernel"
        )
    env = activate(exe, {"PATH": os.environ.get("PATH", "")})
    return KernelSpec(
        argv=[str(exe), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        display_name=f"Python {probe.stdout.strip()} ({exe})",
        language="python",
        interrupt_mode="signal",
        env=env,
        metadata={"debugger": True},
    )
