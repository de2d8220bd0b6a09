"""The names people give the languages a session runs, said one way, and each one's kernel.

Models and people fence code as ``py``, ``ipython3``, ``bash`` or ``console``;
a caller asks for ``Session(language="R")`` or ``language="ts"``. The engine,
the code-block extractor, the script mode and every front end need the one
answer, so it lives here, below all of them::

    normalise_language(fence tag)   ─► python, sh, r, javascript, typescript, or the tag itself
    canonical_language(name)        ─► one of LANGUAGES, or InvalidArgument naming them
    kernel_for(language)            ─► the kernelspec that runs it (python3, ir, bash, deno, java)

JavaScript and TypeScript share one kernel, Deno's, which runs both. Java's is JJava
(PyPI's ``jjava``, on a JDK), on this machine only for now. What each language is
lives in its record (:mod:`jupyter_exec.engine.language_records`); the tables here
are views of those records, kept for the modules that read them.
"""

from __future__ import annotations

import re

from jupyter_exec.engine.language_records import LANGUAGE_RECORDS, Language, record_of_tag
from jupyter_exec.exceptions import InvalidArgument

__all__ = [
    "LANGUAGES",
    "LANGUAGE_KERNELS",
    "canonical_language",
    "install_hint",
    "installed_languages",
    "is_default_language",
    "kernel_for",
    "language_of_kernel",
    "language_record",
    "normalise_language",
]

LANGUAGES: tuple[str, ...] = tuple(LANGUAGE_RECORDS)
"""The languages a session can be asked for by name (``Session(language=...)``)."""

LANGUAGE_KERNELS: dict[str, str] = {name: r.kernel for name, r in LANGUAGE_RECORDS.items()}
"""Each language's kernelspec name, as its own installer names it."""

_TAGS: dict[str, str] = {
    alias: record.tag for record in LANGUAGE_RECORDS.values() for alias in record.aliases
}
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
    if word in _TAGS:
        return _TAGS[word]
    if word:
        return word
    first = next((line for line in code.splitlines() if line.strip()), "")
    return "sh" if _SHELL_HINT_RE.match(first) or first.startswith("#!/bin/") else "python"


def install_hint(language: str) -> str:
    """The command that installs ``language``'s kernel (named exactly: no alias)."""
    record = LANGUAGE_RECORDS.get(language)
    return record.install_hint if record is not None else f"jupyter-exec kernels install {language}"


def canonical_language(name: object) -> str:
    """One of :data:`LANGUAGES` for ``name`` (``"R"``, ``"sh"``, ``"js"``, ``"ts"``, ``"py"``...).

    Anything else raises :class:`~jupyter_exec.InvalidArgument` naming the
    languages there are and how their kernels are installed.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgument(f"language must be one of {', '.join(LANGUAGES)}, not {name!r}")
    record = record_of_tag(normalise_language(name))
    if record is None or len(name.split()) != 1:
        others = " ".join(r.name for r in LANGUAGE_RECORDS.values() if not r.bundled)
        raise InvalidArgument(
            f"unknown language {name[:40]!r}: use one of {', '.join(LANGUAGES)} (installed "
            f"here: {', '.join(installed_languages()) or 'none'}; install the others' kernels "
            f"with: jupyter-exec kernels install {others})"
        )
    return record.name


def language_record(name: object) -> Language:
    """The record of the language ``name`` means (aliases accepted, as
    :func:`canonical_language` takes them; anything else is refused as it refuses it)."""
    return LANGUAGE_RECORDS[canonical_language(name)]


def is_default_language(language: str | None) -> bool:
    """Whether ``language`` (exactly as given: no alias) is the one a session runs unless
    told, or None; a session of any other language runs that language's own kernel."""
    record = LANGUAGE_RECORDS.get(language) if language is not None else None
    return language is None or (record is not None and record.default)


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
    for record in LANGUAGE_RECORDS.values():
        if kernel_name == record.kernel and record.owns_kernel:
            return record.name
    if spec_language:
        found = record_of_tag(normalise_language(spec_language))
        return found.name if found is not None else None
    return None
