"""Each language's two cells around one execution with its own environment variables.

E2B's ``run_code(envs=...)`` sets variables for one execution only. A kernel
speaks its own language, so each language gets its own pair of cells: one that
keeps the old values and sets the new, one that puts the old back. The values
are written as string literals of that language (JSON's literals are R's,
JavaScript's and Java's; bash gets ``shlex`` quoting), never spliced in raw.

A JVM cannot change its own environment, so for Java, as in E2B's Java kernel,
the variables are system properties (``System.getProperty``), and a new kernel
gets the sandbox's ``envs`` as a first cell (:attr:`EnvCells.startup_code`).

The cells live here, one :class:`EnvCells` per kernel, because a language's record
(:mod:`jupyter_exec.engine.language_records`) holds them: a new language brings its own.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from jupyter_exec.exceptions import InvalidArgument

__all__ = ["BASH_ENV", "DENO_ENV", "JAVA_ENV", "PYTHON_ENV", "R_ENV", "EnvCells"]

_BASH_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Cell = Callable[[dict[str, str]], str]


def _no_startup(envs: dict[str, str]) -> str | None:
    """No first cell: the kernel reads the sandbox's ``envs`` from its environment."""
    return None


def _no_check(env_vars: dict[str, str]) -> None:
    """Any name will do: the cells quote names as string literals."""


@dataclass(frozen=True)
class EnvCells:
    """How a kernel of one language sets environment variables around one execution."""

    set_code: Cell
    """The cell that keeps the old values of the variables and sets the new ones."""
    restore_code: Cell
    """The cell that puts back what ``set_code`` kept."""
    startup_code: Callable[[dict[str, str]], str | None] = _no_startup
    """A first cell for a new kernel given the sandbox's ``envs`` (None: none needed)."""
    check: Callable[[dict[str, str]], None] = _no_check
    """Refuses, with :class:`~jupyter_exec.InvalidArgument`, names it cannot set safely."""


def _literal(value: str) -> str:
    """``value`` as a string literal of R, JavaScript and Java (JSON's escapes are theirs)."""
    return json.dumps(value, ensure_ascii=False)


def _python_set(env_vars: dict[str, str]) -> str:
    names = json.dumps(env_vars)
    return (
        "# jupyter-exec e2b: environment for the next cell (run_code(envs=...))\n"
        f"import os as _e2b_os, json as _e2b_json\n_e2b_new = _e2b_json.loads({names!r})\n"
        "_e2b_saved_env = {k: _e2b_os.environ.get(k) for k in _e2b_new}\n"
        "_e2b_os.environ.update(_e2b_new)\ndel _e2b_os, _e2b_json, _e2b_new"
    )


def _python_restore(env_vars: dict[str, str]) -> str:
    return (
        "# jupyter-exec e2b: restore the environment after run_code(envs=...)\n"
        "import os as _e2b_os\n"
        "for _e2b_k, _e2b_v in _e2b_saved_env.items():\n"
        "    _e2b_os.environ.pop(_e2b_k, None) if _e2b_v is None else "
        "_e2b_os.environ.__setitem__(_e2b_k, _e2b_v)\n"
        "del _e2b_os, _e2b_saved_env"
    )


def _r_set(env_vars: dict[str, str]) -> str:
    pairs = ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in env_vars.items())
    return (
        f".e2b_new <- c({pairs})\n"
        ".e2b_saved_env <- Sys.getenv(names(.e2b_new), unset = NA, names = TRUE)\n"
        "invisible(do.call(Sys.setenv, as.list(.e2b_new)))\nrm(.e2b_new)"
    )


def _r_restore(env_vars: dict[str, str]) -> str:
    return (
        "for (.e2b_k in names(.e2b_saved_env)) {\n"
        "  if (is.na(.e2b_saved_env[[.e2b_k]])) Sys.unsetenv(.e2b_k) else\n"
        "    do.call(Sys.setenv, setNames(list(.e2b_saved_env[[.e2b_k]]), .e2b_k))\n"
        "}\nrm(.e2b_saved_env, .e2b_k)"
    )


def _deno_set(env_vars: dict[str, str]) -> str:
    return (
        f"{{ const _e2bNew = {_literal(json.dumps(env_vars))};\n"
        "  const _e2bVars = JSON.parse(_e2bNew);\n"
        "  (globalThis as any).__e2bSavedEnv = Object.fromEntries(\n"
        "    Object.keys(_e2bVars).map((k) => [k, Deno.env.get(k)]));\n"
        "  for (const [k, v] of Object.entries(_e2bVars)) Deno.env.set(k, v as string); }\n"
        "void 0;"
    )


def _deno_restore(env_vars: dict[str, str]) -> str:
    return (
        "{ const _e2bSaved = (globalThis as any).__e2bSavedEnv ?? {};\n"
        "  for (const [k, v] of Object.entries(_e2bSaved)) {\n"
        "    if (v === undefined) Deno.env.delete(k); else Deno.env.set(k, v as string);\n"
        "  }\n  delete (globalThis as any).__e2bSavedEnv; }\nvoid 0;"
    )


def _bash_check(env_vars: dict[str, str]) -> None:
    """bash splices a variable's name into the command: identifiers only."""
    for key in env_vars:
        if not _BASH_NAME_RE.match(key):
            raise InvalidArgument(
                f"{key!r} cannot be an environment variable of a bash context: names are "
                "letters, digits and '_', not starting with a digit"
            )


def _bash_set(env_vars: dict[str, str]) -> str:
    _bash_check(env_vars)
    return "\n".join(
        f'if [ -n "${{{key}+x}}" ]; then _e2b_had_{i}=1; _e2b_old_{i}="${key}"; '
        f"else _e2b_had_{i}=0; fi; export {key}={shlex.quote(value)}"
        for i, (key, value) in enumerate(env_vars.items())
    )


def _bash_restore(env_vars: dict[str, str]) -> str:
    return "\n".join(
        f'if [ "$_e2b_had_{i}" = 1 ]; then export {key}="$_e2b_old_{i}"; '
        f"else unset {key}; fi; unset _e2b_had_{i} _e2b_old_{i}"
        for i, key in enumerate(env_vars)
    )


def _java_set(env_vars: dict[str, str]) -> str:
    puts = "".join(
        f"_e2bSaved.put({json.dumps(k)}, System.getProperty({json.dumps(k)})); "
        f"System.setProperty({json.dumps(k)}, {json.dumps(v)}); "
        for k, v in env_vars.items()
    )
    return f"var _e2bSaved = new java.util.HashMap<String, String>();\n{{ {puts}}}"


def _java_restore(env_vars: dict[str, str]) -> str:
    return (
        "{ for (var _e2bE : _e2bSaved.entrySet()) { if (_e2bE.getValue() == null) "
        "System.clearProperty(_e2bE.getKey()); else "
        "System.setProperty(_e2bE.getKey(), _e2bE.getValue()); } }"
    )


def _java_startup(envs: dict[str, str]) -> str | None:
    """The sandbox's ``envs`` as system properties, as E2B's Java kernel reads them."""
    if not envs:
        return None
    sets = "".join(
        f"System.setProperty({json.dumps(k)}, {json.dumps(v)}); " for k, v in envs.items()
    )
    return f"{{ {sets}}}"


PYTHON_ENV = EnvCells(_python_set, _python_restore)
R_ENV = EnvCells(_r_set, _r_restore)
DENO_ENV = EnvCells(_deno_set, _deno_restore)
"""JavaScript's and TypeScript's: one Deno kernel runs both."""
BASH_ENV = EnvCells(_bash_set, _bash_restore, check=_bash_check)
JAVA_ENV = EnvCells(_java_set, _java_restore, startup_code=_java_startup)
