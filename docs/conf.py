"""Sphinx configuration of the jupyter-exec documentation (built by ``scripts/docs``).

The stack is the Jupyter projects' own: Sphinx, MyST Markdown for the pages, the PyData theme.
Everything that describes the code is generated from it by the small extensions in ``_ext/``
(public API, CLI, configuration, REST, module map), and every example on every page is
checked (``_ext/jx_examples.py``). No network is used at build time.
"""

from __future__ import annotations

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
jx_layers = [
    {
        "title": "Models, errors and names",
        "about": "Plain data and vocabulary every other layer shares: the result objects, the "
        "one error tree, MIME tables, naming rules, the typed options. No I/O, no kernel.",
        "modules": [
            "__init__",
            "_version",
            "models",
            "exceptions",
            "mime",
            "naming",
            "options",
            "network",
            "network.policy",
            "network.rules",
        ],
    },
    {
        "title": "Translation and input",
        "about": "Functions from one representation to another, tested without a kernel: "
        "kernel messages to nbformat outputs, output comparison, the files people give us to "
        "run, Docker options to engine arguments.",
        "modules": ["outputs", "compare", "sources", "docker.options", "network.redact"],
    },
    {
        "title": "Files in the work dir",
        "about": "Everything written on the host: output files, spills, the notebook and its "
        "atomic saves, link-safe writes in folders a kernel can write.",
        "modules": ["store", "recorder", "safefs", "server.recorder", "runorder", "workdir"],
    },
    {
        "title": "Kernels: launch and backends",
        "about": "How a kernel is started, watched and stopped: jupyter_client for local "
        "kernels, our Docker provisioner, remote servers and gateways, environments.",
        "modules": [
            "kernel",
            "interpreters",
            "receiver",
            "launch",
            "backends",
            "environments",
            "venvs",
            "docker",
            "docker.*",
            "remote",
            "remote.*",
            "forking",
            "snapshots",
            "inkernel_fork",
            "inkernel_state",
            "network.proxy",
            "network.forwarder",
            "network.wire",
            "network.intercept",
            "network.tls",
            "network.bundle",
            "network.shared",
        ],
    },
    {
        "title": "One cell",
        "about": "Running one piece of code on a kernel: the cell runner (deadline, "
        "interrupt, death), the stream guard that keeps output floods in the kernel's work "
        "dir instead of host memory (its host side and the code it runs in the kernel), and "
        "stateless script mode, and the code blocks taken from messages and Markdown files.",
        "modules": ["runner", "guard", "inkernel", "scripts", "codeblocks", "inflight"],
    },
    {
        "title": "Sessions and managers",
        "about": "The engine (``AsyncSession``) and its collaborators (the recording of each "
        "cell, resuming from a notebook), its blocking face (``Session``), and many named "
        "sessions with warm pools, limits and culling.",
        "modules": [
            "session",
            "recording",
            "resume",
            "state",
            "sync",
            "manager",
            "manager.*",
            "branching",
            "checkpoints",
            "checkpoint_trust",
            "durable",
            "recovery",
            "state_api",
            "notebookmeta",
        ],
    },
    {
        "title": "Features on sessions",
        "about": "What is built from sessions but is not a front end itself: replay, the "
        "agent runner shared by every agent adapter, and the text a model is shown.",
        "modules": ["replay", "replay_report", "replay_judge", "agent", "llm"],
    },
    {
        "title": "Front ends",
        "about": "Thin views: parse input, call the layers below, serialise the result. The "
        "command line, the Jupyter server extension, the MCP and E2B servers, the agent "
        "adapters.",
        "modules": [
            "__main__",
            "*.__main__",
            "cli",
            "cli.*",
            "server",
            "server.*",
            "mcp_server",
            "mcp_sessions",
            "mcp_tools",
            "mcp_state",
            "mcp_ask",
            "e2b",
            "e2b.*",
            "integrations",
            "integrations.*",
        ],
    },
]

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
