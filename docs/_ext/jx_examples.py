"""Sphinx side of the example checks: every code block of every page, as it is read.

A Python block that does not compile, a ``jupyter-exec`` line the CLI parser refuses, or a JSON
block that does not load is a warning at the block's location (an error under ``-W``). A
how-to page without a single checked example is a warning too: every feature page shows one.
The rules themselves are in :mod:`examples_check`.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from docutils import nodes
from examples_check import check_block
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: pages that must carry at least one checked example (prefixes of docnames)
EXAMPLE_PAGES = ("howto/", "quickstart")


def _language(node: nodes.literal_block) -> str | None:
    language = node.get("language")
    if language in (None, "default", "none", "text"):
        return None
    return str(language)


def check_doctree(app: Sphinx, doctree: nodes.document) -> None:
    docname = app.env.docname
    counts: Counter[str] = app.env.jx_example_counts  # type: ignore[attr-defined]
    checked_here = 0
    for node in doctree.findall(nodes.literal_block):
        kind, problems, count = check_block(_language(node), node.astext())
        if kind is None:
            continue
        counts[kind] += count
        checked_here += count
        for problem in problems:
            line = (node.line or 0) + problem.line
            logger.warning(problem.message, location=(docname, line), type="jx", subtype="example")
    is_index = docname.endswith("index")
    if checked_here == 0 and docname.startswith(EXAMPLE_PAGES) and not is_index:
        logger.warning(
            "a feature page without a checked example (add a python, console or json block)",
            location=docname,
            type="jx",
            subtype="example",
        )


def start(app: Sphinx) -> None:
    app.env.jx_example_counts = Counter()  # type: ignore[attr-defined]


def report(app: Sphinx, exception: Exception | None) -> None:
    counts: Counter[str] = getattr(app.env, "jx_example_counts", Counter())
    if exception is None and counts:
        # Printed, not logged: the build runs with -q, and this line is the proof it checked.
        print(
            f"examples checked in the pages read: {counts['python']} Python compiled, "
            f"{counts['shell']} CLI lines parsed, {counts['json']} JSON loaded",
            file=sys.stderr,
        )


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", start)
    app.connect("doctree-read", check_doctree)
    app.connect("build-finished", report)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
