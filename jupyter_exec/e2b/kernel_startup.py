# The PYTHONSTARTUP file of an E2B sandbox's kernels: IPython runs it in the user's namespace
# when the kernel starts, so it only loads jupyter_exec/e2b/kernel_formats.py (found beside it,
# in the package or where the server mounted both into a container) in a namespace of its own,
# installs its display formats and leaves no name behind. (No docstring: it would become the
# user's __doc__.)
import os.path as _jx_e2b_path
import runpy as _jx_e2b_runpy

_jx_e2b_runpy.run_path(
    _jx_e2b_path.join(_jx_e2b_path.dirname(__file__), "kernel_formats.py"),
    run_name="jupyter_exec_e2b_kernel_formats",
)["install"]()
del _jx_e2b_path, _jx_e2b_runpy
