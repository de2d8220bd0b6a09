"""Sphinx configuration of the jupyter-exec documentation (built by ``scripts/docs``).

The stack is the Jupyter projects' own: Sphinx, MyST Markdown for the pages, the PyData theme.
Everything that describes the code is generated from it by the small extensions in ``_ext/``
(public API, CLI, configuration, REST, module map), and every example on every page is
checked (``_ext/jx_examples.py``). No network is used at build time.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import jupyter_exec  # noqa: E402  (installed in .venv-docs, editable)

project = "jupyter-exec"
author = "the jupyter-exec authors"
copyright = "the jupyter-exec authors, BSD-3-Clause"
version = release = jupyter_exec.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "jx_reference",
    "jx_openapi",
    "jx_examples",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "_static", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

# -- MyST -------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
myst_heading_anchors = 3

# -- autodoc ----------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_class_signature = "separated"
autodoc_default_options = {"exclude-members": "__init__, __new__"}

# -- warnings: nitpicky, with the targets that cannot resolve offline named here ------------
# No intersphinx (no network at build time): names from the standard library and from the
# libraries we build on are not cross-referenced. Private jupyter_exec modules are not
# documented as API, so type hints that name them are not links either. Everything else, above
# all a reference to a public jupyter_exec name that does not exist, is an error.
nitpicky = True
_EXTERNAL = (
    "pathlib",
    "os",
    "typing",
    "typing_extensions",
    "collections",
    "asyncio",
    "concurrent",
    "datetime",
    "types",
    "argparse",
    "logging",
    "contextlib",
    "traitlets",
    "nbformat",
    "jupyter_client",
    "jupyter_server",
    "jupyter_core",
    "docker",
    "tornado",
    "zmq",
    "mcp",
    "autogen",
    "ag2",
    "enum",
    "io",
    "subprocess",
    "threading",
)
_BUILTINS = (
    "str|int|float|bool|bytes|dict|list|tuple|set|frozenset|object|type|None|Any|Callable"
    "|Exception|BaseException|ValueError|TypeError|KeyError|OSError|ImportError|TimeoutError"
    "|RuntimeError|LookupError|Ellipsis|Literal|Self|PathLike|Path|Awaitable|Iterator|Iterable"
    "|Sequence|Mapping|Coroutine|Generator|AsyncIterator|TracebackType"
)
nitpick_ignore_regex = [
    (r"py:.*", rf"({'|'.join(_EXTERNAL)})(\..*)?"),
    (r"py:.*", rf"({_BUILTINS})"),
    (r"py:.*", r"jupyter_exec\.[a-z_]+(\.[a-z_]+)*\.[A-Za-z_]+"),  # private modules' names
    # type aliases
    (r"py:.*", r"[A-Z][A-Za-z]*(Callback|Status|Kind|Language|Options|Spec|Tolerance)"),
]
suppress_warnings: list[str] = []

# -- the architecture page: every module in its layer (inner to outer) ---------------------
# Patterns are fnmatch patterns on the module name relative to jupyter_exec ("docker.*").
# A module that none matches is listed under "Not yet placed" (the build does not fail).
jx_package_path = "../jupyter_exec"


def _layers() -> list[dict[str, object]]:
    """The layers, inner to outer, from their one declaration (``docs/layers.py``, which
    ``tests/test_layout.py`` enforces): each with the module patterns it claims."""
    declared = runpy.run_path(str(HERE / "layers.py"))
    return [
        {"title": layer["title"], "about": layer.get("about", ""), "modules": patterns}
        for layer, patterns in zip(declared["LAYERS"], declared["PATTERNS"], strict=True)
    ]


jx_layers = _layers()

# -- HTML -------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"jupyter-exec {release}"
html_static_path = ["_static"]
html_css_files = ["jupyter-exec.css"]
html_theme_options = {
    "navigation_with_keys": False,
    "header_links_before_dropdown": 7,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc", "sourcelink"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_sidebars = {"index": [], "changelog": []}
