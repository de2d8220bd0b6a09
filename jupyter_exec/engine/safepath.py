"""Local Python kernels start without searching their working directory first.

``python -m ipykernel_launcher`` puts the working directory at the front of
``sys.path``, so a file ``ipykernel_launcher.py`` (or ``zmq.py``,
``IPython.py``...) in the work dir would run instead of the kernel, on the
host, as the user; and IPython then adds ``''`` before site-packages, so a
``pandas.py`` there shadows pandas. A work dir is where code a kernel ran
writes files, so the host must not import from it before its own packages.

Every local IPython kernel jupyter-exec starts (the engine's, a warm pool's,
the server extension's) is started with:

* ``PYTHONSAFEPATH=1`` in its environment (Python 3.11+): nothing is put
  before the standard library and site-packages while ipykernel, IPython
  and their dependencies load, and IPython adds no ``''`` either;
* :data:`STARTUP` as its ``PYTHONSTARTUP`` file: once the kernel is up,
  before any cell, the working directory goes to the *end* of ``sys.path``
  (so ``import mymodule`` of the user's own file still works, and never
  shadows an installed package) and ``PYTHONSAFEPATH`` leaves the kernel's
  environment again, so the user's subprocesses (``!python script.py``)
  behave as they always did. A ``PYTHONSAFEPATH`` the person set stays.

Python 3.10 and older ignore ``PYTHONSAFEPATH``: the launcher's own import
still searches the working directory there (the code above then moves it to
the end for every later import). What holds for them is that no untrusted
kernel ever shares a local session's folder (:mod:`jupyter_exec.boundary.folders`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["MARK", "STARTUP", "is_ipykernel", "safe_python"]

MARK = "JUPYTER_EXEC_SAFEPATH"
"""Set beside ``PYTHONSAFEPATH`` when jupyter-exec (not the person) set it."""

STARTUP = str(Path(__file__).with_name("safepath_startup.py"))
"""The kernel's ``PYTHONSTARTUP``: the cwd last on ``sys.path``, the variables gone, then the
startup file the kernel was given before, if any (:mod:`jupyter_exec.engine.safepath_startup`)."""


def is_ipykernel(argv: Sequence[str]) -> bool:
    """Whether a kernelspec's argv starts an IPython kernel (the ones this applies to)."""
    return any("ipykernel" in str(arg) for arg in argv)


def safe_python(env: dict[str, str]) -> list[str]:
    """Set ``env`` (a local IPython kernel's, changed in place) so the kernel starts
    without its working directory on ``sys.path``; the extra kernel arguments to pass."""
    if env.get("PYTHONSAFEPATH"):
        return []  # the person's own choice: the working directory is never searched
    env["PYTHONSAFEPATH"] = "1"
    env[MARK] = "1"
    if env.get("PYTHONSTARTUP"):  # (an E2B sandbox's): ours runs it next
        env["JUPYTER_EXEC_STARTUP_NEXT"] = env["PYTHONSTARTUP"]
    env["PYTHONSTARTUP"] = STARTUP
    return []
