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

A new kernel process takes several modules before its first cell (the state, its
generations, the stream guard, the environment record). Each was once a silent request
of its own, a round trip and a pass of IPython's cell transforms over tens of kB of
source apiece: 80 to 110 ms before a first ``1+1``. :func:`install_expression` puts
them all in *one* ``user_expressions`` entry of one silent request (evaluated, not run
as a cell: no transforms, no history), each installed on its own, in order, with its
own outcome, so one module's refusal is still its own (:func:`install_outcomes`).
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import marshal
import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["NOT_TRIED", "Install", "install_expression", "install_outcomes", "module_call_code"]


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


@dataclass(frozen=True)
class Install:
    """One module to register in a kernel and install there, as one entry of a batch."""

    name: str
    """What the entry is called in tracebacks and outcomes (``state``, ``guard``...)."""
    source_file: str
    module: str
    """Its name in the kernel's ``sys.modules`` (registered once per process)."""
    call: str
    """What is run on it, e.g. ``install('probe')``."""
    needs: tuple[str, ...] = ()
    """Entries of the same batch that must have installed first (else it is not tried)."""


NOT_TRIED = "NotTried"
"""The error name of an entry not tried because an entry it needs did not install."""

_BATCH = """\
import base64, importlib.util, json, sys, types, zlib
same = importlib.util.MAGIC_NUMBER == MAGIC  # the host's bytecode runs here as it is
done = {}
for name, module, source, compiled, call, needs in entries:
    missing = [n for n in needs if n in done and done[n] is not None]
    if missing:
        done[name] = [NOT_TRIED, 'needs ' + ', '.join(missing)]
        continue
    try:
        loaded = sys.modules.get(module)
        if loaded is None:
            code = None
            if same:
                try:
                    code = __import__('marshal').loads(zlib.decompress(base64.b64decode(compiled)))
                except Exception:
                    code = None
            if code is None:
                source = zlib.decompress(base64.b64decode(source)).decode('utf-8')
                code = compile(source, '<jupyter-exec ' + name + '>', 'exec')
            loaded = types.ModuleType(module)
            exec(code, loaded.__dict__)
            sys.modules[module] = loaded
        exec(compile('module.' + call, '<jupyter-exec ' + name + ' install>', 'exec'),
             {'module': loaded})
        done[name] = None
    except Exception as exc:
        done[name] = [type(exc).__name__, str(exc)]
result = json.dumps(done)
"""
"""What the batch runs in the kernel (in a namespace of its own: no name is left behind)."""


def install_expression(installs: Sequence[Install]) -> str:
    """One expression (a ``user_expressions`` entry) that installs every entry in order.

    Its value is JSON text: each entry's name to ``null`` (installed) or ``[error name,
    message]`` (what it raised; :data:`NOT_TRIED` when an entry it ``needs`` failed).
    One entry's failure does not stop the next. Each module goes as its source and as
    the host's bytecode for it: a kernel whose bytecode is the host's (the same Python
    minor version: a local kernel, most containers) loads that instead of compiling the
    source, which was most of the batch's time in the kernel (12 ms of 13 for four). Both
    go compressed (:func:`_packed`): the four modules' 300 kB were 3 ms of parsing the
    expression in the kernel, and as much again to send, sign and decode the message.
    """
    entries = []
    for each in installs:
        source, compiled = _packed(*_module_text(each.source_file, each.name))
        entries.append((each.name, each.module, source, compiled, each.call, list(each.needs)))
    namespace = {
        "__name__": "_jupyter_exec_install",
        "entries": entries,
        "NOT_TRIED": NOT_TRIED,
        "MAGIC": importlib.util.MAGIC_NUMBER,
    }
    return (
        f"(lambda ns: exec(compile({_BATCH!r}, '<jupyter-exec install>', 'exec'), ns) "
        f"or ns['result'])({namespace!r})"
    )


def _module_text(source_file: str, name: str) -> tuple[str, str]:
    """The module's source, and its bytecode compiled here (marshal, base64), cached by the
    file's size and modification time (compiled once per host process)."""
    found = os.stat(source_file)
    return _compiled(source_file, name, found.st_size, found.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _compiled(source_file: str, name: str, size: int, mtime: int) -> tuple[str, str]:
    with open(source_file, encoding="utf-8") as f:
        source = f.read()
    # dont_inherit: the flags this module compiles with (its __future__ imports) stay here.
    code = compile(source, f"<jupyter-exec {name}>", "exec", dont_inherit=True)
    return source, base64.b64encode(marshal.dumps(code)).decode("ascii")


@functools.lru_cache(maxsize=32)
def _packed(source: str, compiled: str) -> tuple[str, str]:
    """A module's source and its base64 bytecode as the batch sends them: each compressed
    (zlib), then base64 (a third of the size: the request's 300 kB were mostly bytecode)."""

    def squeezed(data: bytes) -> str:
        return base64.b64encode(zlib.compress(data, 6)).decode("ascii")

    return squeezed(source.encode("utf-8")), squeezed(base64.b64decode(compiled))


def install_outcomes(names: Sequence[str], answer: Any) -> dict[str, tuple[str, str] | None]:
    """Each entry's outcome from the batch's decoded answer: None (installed) or (error
    name, message); an entry the answer does not account for failed with ``no answer``."""
    found: dict[str, tuple[str, str] | None] = {}
    told = answer if isinstance(answer, Mapping) else {}
    for name in names:
        said = told.get(name, ("NoAnswer", "no answer"))
        if said is None:
            found[name] = None
        elif isinstance(said, list | tuple) and len(said) == 2:
            found[name] = (str(said[0]), str(said[1]))
        else:
            found[name] = ("NoAnswer", "no answer")
    return found
