"""The names people give the languages a session runs, said one way (``python``, ``sh``).

Models and people fence code as ``py``, ``ipython3``, ``bash`` or ``console``;
the engine, the code-block extractor and the script mode all need the one
answer, so it lives here, below all of them.
"""

from __future__ import annotations

import re

__all__ = ["normalise_language"]

_PYTHON = frozenset({"python", "py", "python3", "ipython", "ipython3", "pycon"})
_SHELL = frozenset({"sh", "bash", "shell", "console", "zsh", "shell-session"})
_SHELL_HINT_RE = re.compile(
    r"^\s*(\$ |pip |apt(-get)? |ls\b|cd |echo |cat |mkdir |curl |wget |git )"
)


def normalise_language(tag: str, code: str = "") -> str:
    """``python`` / ``sh`` for the names people use for them; inferred when ``tag`` is empty."""
    word = tag.strip().split()[0].lower() if tag.strip() else ""
    word = word.lstrip("{.").rstrip("}")
    if word in _PYTHON:
        return "python"
    if word in _SHELL:
        return "sh"
    if word:
        return word
    first = next((line for line in code.splitlines() if line.strip()), "")
    return "sh" if _SHELL_HINT_RE.match(first) or first.startswith("#!/bin/") else "python"
