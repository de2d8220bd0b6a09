"""The languages a sandbox runs: E2B's names for them, their kernels, and ``envs=`` in each.

E2B's ``run_code(language=...)`` and ``create_code_context(language=...)``
take a language name (``"r"``, ``"js"``, ``"ts"``, ``"bash"``...). A client
names a *language*, never a kernelspec: the name goes through
:data:`LANGUAGES`, a fixed table, so nothing a client sends can pick another
kernel (or a path). Each language has a default context, a stateful kernel
started on its first use, as E2B's sandboxes have.

``run_code(envs=...)`` sets variables for one execution only; each kernel
speaks its own language, so each gets its own two cells around the code: one
that saves the old values and sets the new, one that puts the old back. The
values are written as string literals of that language (JSON's literals are
R's and JavaScript's; bash gets ``shlex`` quoting), never spliced in raw.

Python, R, JavaScript/TypeScript (Deno), bash and Java (JJava) are served; the
kernelspec of each is :func:`jupyter_exec.engine.languages.kernel_for`'s. A JVM
cannot change its own environment, so for Java, as in E2B's Java kernel, both the
sandbox's ``envs`` and ``run_code(envs=...)`` are system properties
(``System.getProperty``); JSON's string literals are Java's too.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from jupyter_exec.docker.image import LANGUAGES_IMAGE
from jupyter_exec.engine.languages import kernel_for
from jupyter_exec.exceptions import InvalidArgument

__all__ = [
    "LANGUAGES",
    "Language",
    "check_installed",
    "installed",
    "language_named",
    "refuse_language",
]

_BASH_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Language:
    """One language a sandbox runs: its E2B name, its kernelspec, its label for people."""

    name: str
    kernel_name: str
    label: str
    kernel_env: dict[str, str] = field(default_factory=dict)
    """Set in its kernels' environment (Deno: no colour codes in the results' text)."""

    def set_env_code(self, env_vars: dict[str, str]) -> str:
        """The cell that keeps the old values of ``env_vars`` and sets the new ones."""
        if self.name == "java":  # as E2B's Java kernel: system properties (System.getProperty)
            puts = "".join(
                f"_e2bSaved.put({json.dumps(k)}, System.getProperty({json.dumps(k)})); "
                f"System.setProperty({json.dumps(k)}, {json.dumps(v)}); "
                for k, v in env_vars.items()
            )
            return f"var _e2bSaved = new java.util.HashMap<String, String>();\n{{ {puts}}}"
        if self.name == "python":
            names = json.dumps(env_vars)
            return (
                "# jupyter-exec e2b: environment for the next cell (run_code(envs=...))\n"
                f"import os as _e2b_os, json as _e2b_json\n_e2b_new = _e2b_json.loads({names!r})\n"
                "_e2b_saved_env = {k: _e2b_os.environ.get(k) for k in _e2b_new}\n"
                "_e2b_os.environ.update(_e2b_new)\ndel _e2b_os, _e2b_json, _e2b_new"
            )
        if self.name == "r":
            pairs = ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in env_vars.items())
            return (
                f".e2b_new <- c({pairs})\n"
                ".e2b_saved_env <- Sys.getenv(names(.e2b_new), unset = NA, names = TRUE)\n"
                "invisible(do.call(Sys.setenv, as.list(.e2b_new)))\nrm(.e2b_new)"
            )
        if self.name in ("javascript", "typescript"):
            return (
                f"{{ const _e2bNew = {_literal(json.dumps(env_vars))};\n"
                "  const _e2bVars = JSON.parse(_e2bNew);\n"
                "  (globalThis as any).__e2bSavedEnv = Object.fromEntries(\n"
                "    Object.keys(_e2bVars).map((k) => [k, Deno.env.get(k)]));\n"
                "  for (const [k, v] of Object.entries(_e2bVars)) Deno.env.set(k, v as string); }\n"
                "void 0;"
            )
        lines = []
        for i, (key, value) in enumerate(env_vars.items()):
            _bash_name(key)
            lines.append(
                f'if [ -n "${{{key}+x}}" ]; then _e2b_had_{i}=1; _e2b_old_{i}="${key}"; '
                f"else _e2b_had_{i}=0; fi; export {key}={shlex.quote(value)}"
            )
        return "\n".join(lines)

    def restore_env_code(self, env_vars: dict[str, str]) -> str:
        """The cell that puts back what :meth:`set_env_code` kept."""
        if self.name == "java":
            return (
                "{ for (var _e2bE : _e2bSaved.entrySet()) { if (_e2bE.getValue() == null) "
                "System.clearProperty(_e2bE.getKey()); else "
                "System.setProperty(_e2bE.getKey(), _e2bE.getValue()); } }"
            )
        if self.name == "python":
            return (
                "# jupyter-exec e2b: restore the environment after run_code(envs=...)\n"
                "import os as _e2b_os\n"
                "for _e2b_k, _e2b_v in _e2b_saved_env.items():\n"
                "    _e2b_os.environ.pop(_e2b_k, None) if _e2b_v is None else "
                "_e2b_os.environ.__setitem__(_e2b_k, _e2b_v)\n"
                "del _e2b_os, _e2b_saved_env"
            )
        if self.name == "r":
            return (
                "for (.e2b_k in names(.e2b_saved_env)) {\n"
                "  if (is.na(.e2b_saved_env[[.e2b_k]])) Sys.unsetenv(.e2b_k) else\n"
                "    do.call(Sys.setenv, setNames(list(.e2b_saved_env[[.e2b_k]]), .e2b_k))\n"
                "}\nrm(.e2b_saved_env, .e2b_k)"
            )
        if self.name in ("javascript", "typescript"):
            return (
                "{ const _e2bSaved = (globalThis as any).__e2bSavedEnv ?? {};\n"
                "  for (const [k, v] of Object.entries(_e2bSaved)) {\n"
                "    if (v === undefined) Deno.env.delete(k); else Deno.env.set(k, v as string);\n"
                "  }\n  delete (globalThis as any).__e2bSavedEnv; }\nvoid 0;"
            )
        lines = []
        for i, key in enumerate(env_vars):
            lines.append(
                f'if [ "$_e2b_had_{i}" = 1 ]; then export {key}="$_e2b_old_{i}"; '
                f"else unset {key}; fi; unset _e2b_had_{i} _e2b_old_{i}"
            )
        return "\n".join(lines)

    def startup_code(self, envs: dict[str, str]) -> str | None:
        """A first cell for a new kernel given the sandbox's ``envs``: Java reads them as
        system properties, as in E2B's Java kernel (the others read its environment)."""
        if self.name != "java" or not envs:
            return None
        sets = "".join(
            f"System.setProperty({json.dumps(k)}, {json.dumps(v)}); " for k, v in envs.items()
        )
        return f"{{ {sets}}}"

    def check_env(self, env_vars: dict[str, str]) -> None:
        """Refuse names this language cannot set safely (bash: identifiers only)."""
        if self.name == "bash":
            for key in env_vars:
                _bash_name(key)


def _literal(value: str) -> str:
    """``value`` as a string literal of R and JavaScript (JSON's escapes are theirs)."""
    return json.dumps(value, ensure_ascii=False)


def _bash_name(key: str) -> None:
    if not _BASH_NAME_RE.match(key):
        raise InvalidArgument(
            f"{key!r} cannot be an environment variable of a bash context: names are "
            "letters, digits and '_', not starting with a digit"
        )


PYTHON = Language("python", kernel_for("python"), "Python")
_JS = Language("javascript", kernel_for("javascript"), "JavaScript (Deno)", {"NO_COLOR": "1"})
_TS = Language("typescript", kernel_for("typescript"), "TypeScript (Deno)", {"NO_COLOR": "1"})
_R = Language("r", kernel_for("r"), "R (IRkernel)")
_BASH = Language("bash", kernel_for("bash"), "bash (bash_kernel)")
JAVA = Language("java", kernel_for("java"), "Java (JJava)")

LANGUAGES: dict[str, Language] = {
    "python": PYTHON,
    "python3": PYTHON,
    "r": _R,
    "js": _JS,
    "javascript": _JS,
    "ts": _TS,
    "typescript": _TS,
    "bash": _BASH,
    "java": JAVA,
}
"""E2B's language names -> the language. The one place a client's word picks a kernel."""

DEFAULT_LISTED = ("python", "javascript")
"""The default contexts E2B lists in every sandbox, started or not."""

_REFUSED: dict[str, str] = {}


def language_named(name: object) -> Language:
    """The language a client means by ``name`` (None: Python); anything else is refused."""
    if name is None:
        return PYTHON
    if not isinstance(name, str):
        raise InvalidArgument("'language' must be a string, such as 'python' or 'r'")
    found = LANGUAGES.get(name.strip().lower())
    if found is not None:
        return found
    served = ", ".join(sorted(LANGUAGES))
    why = _REFUSED.get(name.strip().lower())
    reason = f": {why}" if why else ""
    raise InvalidArgument(
        f"this sandbox does not run {name[:40]!r}{reason}; it runs {served}. For shell "
        "commands there is also sandbox.commands.run(...)"
    )


def refuse_language(language: object, backend: str = "local", image: str | None = None) -> Language:
    """The language a client asks for, if this sandbox's backend can run it; else refused.

    A Docker sandbox runs another language's kernel in the languages image
    (:data:`~jupyter_exec.docker.image.LANGUAGES_IMAGE`) unless the server names an image
    of its own, which has Python only as far as we know; Java has no Docker kernel."""
    found = language_named(language)
    if found is PYTHON or backend == "local":
        return found
    if backend == "docker" and found is JAVA:
        raise InvalidArgument(
            "Java has no Docker kernel (JJava speaks TCP, which a sandbox's network-less "
            "container does not have): use a local sandbox for language='java'"
        )
    if backend != "docker" or image not in (None, LANGUAGES_IMAGE):
        where = f"image {image!r}" if image else f"{backend!r} backend"
        raise InvalidArgument(
            f"this sandbox's kernels run on the {where}, which has Python only for "
            f"{found.label}: it runs in a local sandbox, or a Docker one on the languages image"
        )
    return found


def installed(found: Language, backend: str = "local") -> bool:
    """Whether ``found``'s kernel is here: its kernelspec on this machine (its name looked up,
    nothing parsed), or, for a Docker sandbox, in the languages image (checked at start)."""
    from jupyter_client.kernelspec import KernelSpecManager

    if found is PYTHON or backend == "docker":
        return True
    return found.kernel_name in KernelSpecManager().find_kernel_specs()


def check_installed(found: Language, backend: str = "local") -> None:
    """Refuse a language whose kernelspec this server does not have, naming what to install."""
    if not installed(found, backend):
        raise InvalidArgument(
            f"{found.label} is not installed on this server (no kernelspec "
            f"{found.kernel_name!r}); install its kernel (jupyter-exec kernels install "
            f"{found.name}) to use language={found.name!r}"
        )
