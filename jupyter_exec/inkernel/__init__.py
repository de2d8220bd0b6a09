"""The halves of the project that run inside a kernel, and the one loader that sends them.

Each module here is sent to a kernel as source text and registered there under a private
name in ``sys.modules`` (:func:`module_call_code`): the stream guard (:mod:`.streams`),
the environment record (:mod:`.env`), files home from a remote kernel (:mod:`.remote`),
copy-on-write forks and snapshots (:mod:`.fork`), and the per-cell state (:mod:`.state`,
:mod:`.generations`). A kernel may run on another interpreter, in a container or on
another host, where this package is not installed: so these modules import only the
standard library (and what a kernel has: IPython, ipykernel), never ``jupyter_exec``,
and their host-side helpers import from the project inside the function that needs it.
The host side that asks for each (the guard, the state writer, the fork) lives in its
own layer and imports the module only to read its names and its source.
"""

from __future__ import annotations


def module_call_code(source_file: str, module: str, call: str, name: str, step: str) -> str:
    """Code that registers the module in ``source_file`` once in the kernel, as ``module``
    in ``sys.modules``, then runs ``module.<call>``.

    It runs in a namespace of its own: no name is left in the user's, in the parent or in
    a child. ``name`` and ``step`` name the code in tracebacks (``<jupyter-exec fork>``,
    ``<jupyter-exec fork call>``).
    """
    with open(source_file, encoding="utf-8") as f:
        text = f.read()
    body = (
        "import sys, types\n"
        f"module = sys.modules.get({module!r})\n"
        "if module is None:\n"
        f"    module = types.ModuleType({module!r})\n"
        f"    exec(compile(source, '<jupyter-exec {name}>', 'exec'), module.__dict__)\n"
        f"    sys.modules[{module!r}] = module\n"
        f"module.{call}\n"
    )
    return (
        f"exec(compile({body!r}, '<jupyter-exec {name} {step}>', 'exec'), "
        f"{{'__name__': '_jupyter_exec_{name}_{step}', 'source': {text!r}}})"
    )
