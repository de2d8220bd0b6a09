"""The ``PYTHONSTARTUP`` file of the local IPython kernels jupyter-exec starts.

See :mod:`jupyter_exec.engine.safepath`: the kernel loaded with ``PYTHONSAFEPATH=1`` (its
working directory never searched); IPython runs this file in the user's namespace once it is
up, before any cell. It puts the working directory *last* on ``sys.path`` (the user's own
modules import, and never shadow an installed package), takes the variables it was started
with out of the environment again (the user's subprocesses see the environment they always
did), and then runs the ``PYTHONSTARTUP`` file the kernel was given before ours, if any (an
E2B sandbox's), as IPython would have. IPython's ``code_to_run`` would do the first part but
makes IPython skip ``PYTHONSTARTUP``; this file keeps both. It leaves no name behind.
"""


def _jupyter_exec_after_start() -> str:
    """Move the cwd last on ``sys.path``, restore the environment; the next startup file."""
    import os
    import sys

    if os.environ.pop("JUPYTER_EXEC_SAFEPATH", "") != "1":
        return ""
    os.environ.pop("PYTHONSAFEPATH", None)
    following = os.environ.pop("JUPYTER_EXEC_STARTUP_NEXT", "")
    if following:
        os.environ["PYTHONSTARTUP"] = following
    else:
        os.environ.pop("PYTHONSTARTUP", None)
    here = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", here)] + [""]
    return following


def _jupyter_exec_run_next(path: str) -> None:
    """Run ``path`` as IPython runs a ``PYTHONSTARTUP`` file (``__file__`` set, errors shown)."""
    shell = globals().get("get_ipython", lambda: None)()
    if shell is None:
        return
    ours = shell.user_ns.get("__file__")  # IPython's name for the file it runs: this one
    shell.user_ns["__file__"] = path
    try:
        shell.safe_execfile(path, shell.user_ns, raise_exceptions=False)
    finally:
        shell.user_ns["__file__"] = ours


_jupyter_exec_next = _jupyter_exec_after_start()
if _jupyter_exec_next:
    _jupyter_exec_run_next(_jupyter_exec_next)
del _jupyter_exec_after_start, _jupyter_exec_run_next, _jupyter_exec_next
