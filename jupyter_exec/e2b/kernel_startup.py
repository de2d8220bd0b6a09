# The PYTHONSTARTUP file of an E2B sandbox's kernels: IPython runs it in the user's namespace
# when the kernel starts, so it only loads kernel_formats.py and kernel_images.py (found beside
# it, in the package or where the server mounted them into a container), each in a namespace of
# its own, installs them and leaves no name behind. (No docstring: it would become the user's
# __doc__.)
import os.path as _jx_e2b_path
import runpy as _jx_e2b_runpy

for _jx_e2b_name in ("kernel_formats", "kernel_images"):
    _jx_e2b_runpy.run_path(
        _jx_e2b_path.join(_jx_e2b_path.dirname(__file__), f"{_jx_e2b_name}.py"),
        run_name=f"jupyter_exec_e2b_{_jx_e2b_name}",
    )["install"]()
del _jx_e2b_path, _jx_e2b_runpy, _jx_e2b_name
