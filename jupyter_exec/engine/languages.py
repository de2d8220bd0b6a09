"""The names people give the languages a session runs, said one way, and each one's kernel.

Models and people fence code as ``py``, ``ipython3``, ``bash`` or ``console``;
a caller asks for ``Session(language="R")`` or ``language="ts"``. The engine,
the code-block extractor, the script mode and every front end need the one
answer, so it lives here, below all of them::

    normalise_language(fence tag)   ─► python, sh, r, javascript, typescript, or the tag itself
    canonical_language(name)        ─► one of LANGUAGES, or InvalidArgument naming them
    kernel_for(language)            ─► the kernelspec that runs it (python3, ir, bash, deno, java)

JavaScript and TypeScript share one kernel, Deno's, which runs both. Java's is JJava
(PyPI's ``jjava``, on a JDK), on this machine only for now.
"""

from __future__ import annotations

import re

from jupyter_exec.exceptions import InvalidArgument

__all__ = [
    "LANGUAGES",
    "LANGUAGE_KERNELS",
    "canonical_language",
    "install_hint",
    "installed_languages",
    "kernel_for",
    "language_of_kernel",
    "normalise_language",
]

LANGUAGES: tuple[str, ...] = ("python", "r", "bash", "javascript", "typescript", "java")
"""The languages a session can be asked for by name (``Session(language=...)``)."""

LANGUAGE_KERNELS: dict[str, str] = {
    "python": "python3",
    "r": "ir",
    "bash": "bash",
    "javascript": "deno",
    "typescript": "deno",
    "java": "java",
}
"""Each language's kernelspec name, as its own installer names it."""

_PYTHON = frozenset({"python", "py", "python3", "ipython", "ipython3", "pycon"})
_SHELL = frozenset({"sh", "bash", "shell", "console", "zsh", "shell-session"})
_R = frozenset({"r", "rscript", "ir"})
_JAVASCRIPT = frozenset({"javascript", "js", "node", "nodejs", "mjs"})
_TYPESCRIPT = frozenset({"typescript", "ts", "deno", "tsx"})
_JAVA = frozenset({"java", "jshell", "jjava"})
_SHELL_HINT_RE = re.compile(
    r"^\s*(\$ |pip |apt(-get)? |ls\b|cd |echo |cat |mkdir |curl |wget |git )"
)


def _word(tag: str) -> str:
    word = tag.strip().split()[0].lower() if tag.strip() else ""
    return word.lstrip("{.").rstrip("}")


def normalise_language(tag: str, code: str = "") -> str:
    """``python`` / ``sh`` / ``r`` / ``javascript`` / ``typescript`` / ``java`` for the names people
    use for them (other tags as given, lowercased); inferred when ``tag`` is empty."""
    word = _word(tag)
    if word in _PYTHON:
        return "python"
    if word in _SHELL:
        return "sh"
    if word in _R:
        return "r"
    if word in _JAVASCRIPT:
        return "javascript"
    if word in _TYPESCRIPT:
        return "typescript"
    if word in _JAVA:
        return "java"
    if word:
        return word
    first = next((line for line in code.splitlines() if line.strip()), "")
    return "sh" if _SHELL_HINT_RE.match(first) or first.startswith("#!/bin/") else "python"


def install_hint(language: str) -> str:
    """The command that installs ``language``'s kernel (empty for Python, which ships)."""
    if language == "python":
        return "pip install ipykernel"
    return f"jupyter-exec kernels install {language}"


def canonical_language(name: object) -> str:
    """One of :data:`LANGUAGES` for ``name`` (``"R"``, ``"sh"``, ``"js"``, ``"ts"``, ``"py"``...).

    Anything else raises :class:`~jupyter_exec.InvalidArgument` naming the
    languages there are and how their kernels are installed.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgument(f"language must be one of {', '.join(LANGUAGES)}, not {name!r}")
    word = normalise_language(name)
    word = "bash" if word == "sh" else word
    if word not in LANGUAGE_KERNELS or len(name.split()) != 1:
        raise InvalidArgument(
            f"unknown language {name[:40]!r}: use one of {', '.join(LANGUAGES)} (installed "
            f"here: {', '.join(installed_languages()) or 'none'}; install the others' kernels "
            "with: jupyter-exec kernels install r bash javascript typescript java)"
        )
    return word


def installed_languages() -> list[str]:
    """The languages whose kernels are installed here (their kernelspecs found by Jupyter)."""
    from jupyter_client.kernelspec import KernelSpecManager

    try:
        found = set(KernelSpecManager().find_kernel_specs())
    except OSError:  # an unreadable Jupyter path: say nothing is known to be there
        return []
    return [language for language in LANGUAGES if LANGUAGE_KERNELS[language] in found]


def kernel_for(language: str) -> str:
    """The kernelspec name that runs ``language`` (``python`` -> ``python3``, ``r`` -> ``ir``,
    ``bash`` -> ``bash``, ``javascript`` and ``typescript`` -> ``deno``); aliases accepted."""
    return LANGUAGE_KERNELS[canonical_language(language)]


def language_of_kernel(kernel_name: str, spec_language: str | None = None) -> str | None:
    """The language a kernelspec runs, from its name or its ``language`` field (None: not
    one of ours)."""
    for language, name in LANGUAGE_KERNELS.items():
        if kernel_name == name and language != "javascript":
            return language
    if spec_language:
        word = normalise_language(spec_language)
        word = "bash" if word == "sh" else word
        return word if word in LANGUAGE_KERNELS else None
    return None
