"""Checks of the README that the documentation build runs before Sphinx.

* It stays a front page: at most ``MAX_BYTES`` (the rest lives in ``docs/``).
* Every relative link points at a file that exists (the docs pages it sends readers to).
* Its examples hold, by the same rules as the site's (:mod:`examples_check`).
* The commands it promises are the ones CI runs: ``scripts/test`` and ``scripts/docs`` in
  ``.ci/run``, and ``scripts/demo`` / ``scripts/test`` named in the README.

Usage: ``python docs/_ext/readme_check.py README.md``; exits 1 with one line per problem.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from examples_check import check_block

MAX_BYTES = 15_000
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
COMMANDS_CI_RUNS = ("scripts/test", "scripts/docs")
COMMANDS_README_NAMES = ("scripts/demo", "scripts/test")


def fenced_blocks(text: str) -> Iterator[tuple[int, str, str]]:
    """``(first line of code, language, code)`` for each fenced block of a Markdown text."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        fence = match["fence"]
        language = match["info"].strip().split(" ")[0].strip("{}")
        start = i + 1
        i += 1
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                break
            i += 1
        yield start + 1, language, "\n".join(lines[start:i])
        i += 1


def outside_code(text: str) -> str:
    """The text with fenced blocks and inline code removed (links are looked for in it)."""
    kept: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence is None and match is not None:
            fence = match["fence"]
        elif fence is not None and line.strip().startswith(fence) and not line.strip(" `~"):
            fence = None
        elif fence is None:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def problems(readme: Path) -> list[str]:
    root = readme.resolve().parent
    raw = readme.read_bytes()
    text = raw.decode("utf-8")
    found: list[str] = []
    if len(raw) > MAX_BYTES:
        found.append(
            f"{readme}: {len(raw):,} bytes, over the {MAX_BYTES:,} a front page may have; "
            "move the detail into a page under docs/ and link to it"
        )
    for match in LINK.finditer(outside_code(text)):
        target = match["target"]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = (root / target.split("#", 1)[0]).resolve()
        if not path.exists():
            found.append(f"{readme}: the link {target!r} points at nothing ({path})")
    for first_line, language, code in fenced_blocks(text):
        _kind, block_problems, _count = check_block(language, code)
        found.extend(f"{readme}:{first_line + p.line - 1}: {p.message}" for p in block_problems)
    for command in COMMANDS_README_NAMES:
        if command not in text:
            found.append(f"{readme}: does not name {command}, one of the commands it promises")
    ci = root / ".ci" / "run"
    ci_text = ci.read_text(encoding="utf-8") if ci.exists() else ""
    for command in COMMANDS_CI_RUNS:
        if not re.search(rf"^[^#\n]*\b{re.escape(command)}\b", ci_text, re.MULTILINE):
            found.append(f"{ci}: does not run {command}, which the README says CI runs")
    return found


def main(argv: list[str]) -> int:
    readme = Path(argv[1] if len(argv) > 1 else "README.md")
    found = problems(readme)
    for line in found:
        print(line, file=sys.stderr)
    if not found:
        print(f"{readme}: {len(readme.read_bytes()):,} bytes, links and examples hold")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
