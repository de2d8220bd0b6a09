"""The package's layers, inner to outer: the one declaration of the architecture.

``tests/test_layout.py`` enforces it on every module's run-time imports, with no exemption: a
module may import its own folder, any folder of an inner layer, and the public vocabulary
(:data:`VOCABULARY`); never another folder of its own layer, never an outer layer.
``docs/conf.py`` reads it for the architecture page's drawing, module map and import check.
A layer's ``modules`` are patterns relative to the package (``sync``, ``*.__main__``); its
``packages`` are folders. Plain data and the one rule that places a module, read without
importing the package.
"""

from __future__ import annotations

import fnmatch

VOCABULARY = ["exceptions", "models", "options", "_lazy", "_version"]
"""What every layer from the engine outwards may import (inner layers: only the error tree):
the error tree, the result objects, the typed options and the lazy loader."""

VOCABULARY_REACHES = "engine"
"""The vocabulary stands on the engine's constants (MIME tables, output limits), so it may
import up to the engine, no further."""

LAYERS = [
    {
        "title": "The public surface",
        "about": (
            "What ``import jupyter_exec`` gives: the result objects, the one error tree, the "
            "typed options. The package root holds nothing else but the blocking ``Session`` "
            "(with the session layer) and ``python -m`` (with the command line)."
        ),
        "modules": ["__init__", "_version", "_lazy", "models", "exceptions", "options"],
    },
    {
        "title": "In-kernel halves (inkernel)",
        "about": (
            "Code sent to a kernel as source and run there, and the one loader that sends it. "
            "Imports nothing of the project: a kernel may run where the package is not "
            "installed."
        ),
        "packages": ["inkernel"],
    },
    {
        "title": "The boundary (boundary)",
        "about": (
            "Every decision between a kernel and the host, each taken in one place: the path "
            "resolver, the checkpoint key and origin rule, names. Imports only the error "
            "tree. See the security page."
        ),
        "packages": ["boundary"],
    },
    {
        "title": "Policy and places (network, remote, cluster)",
        "about": (
            "The network policy and the proxy that keeps secrets on TLS to the decided host; "
            "the kernel gateways' client; kernels on many machines. None imports another."
        ),
        "packages": ["network", "remote", "cluster"],
    },
    {
        "title": "The engine (engine)",
        "about": (
            "One kernel: started and watched, one cell run, its messages made nbformat "
            "outputs, the per-cell hooks a session declares, and the record: the notebook "
            "file, its metadata and run order, the sources people give."
        ),
        "packages": ["engine"],
    },
    {
        "title": "The Docker backend (docker)",
        "about": ("Our hardened Docker provisioner, its images, its forks and its reaper."),
        "packages": ["docker"],
    },
    {
        "title": "State (state)",
        "about": (
            "A session's state over time: per-cell generations, fork, undo, checkpoints, "
            "recovery. It sees the session only through the protocol in ``state/host.py``."
        ),
        "packages": ["state"],
    },
    {
        "title": "The session (session, sync)",
        "about": (
            "``AsyncSession``, the one owner of a kernel: launch and backends, each cell "
            "through the engine and its hooks, recording, sleep and wake, resume; and its "
            "blocking face ``Session``."
        ),
        "packages": ["session"],
        "modules": ["sync"],
    },
    {
        "title": "Replay (notebook)",
        "about": (
            "A recorded notebook run again in a fresh copy of its inputs, judged cell by cell "
            "and reported."
        ),
        "packages": ["notebook"],
    },
    {
        "title": "Many sessions (manager)",
        "about": (
            "Named sessions with warm pools, zygotes, limits, culling and sleep; what lets a "
            "server's sessions outlive it."
        ),
        "packages": ["manager"],
    },
    {
        "title": "Agents (agents)",
        "about": ("Code blocks in, the text a model reads out: shared by every adapter."),
        "packages": ["agents"],
    },
    {
        "title": "Framework adapters (integrations)",
        "about": (
            "AG2, smolagents, LangChain and Deep Agents, each in its framework's own interface."
        ),
        "packages": ["integrations"],
    },
    {
        "title": "The Jupyter server extension (server)",
        "about": ("REST sessions, live cells in JupyterLab, forks and branches in the browser."),
        "packages": ["server"],
    },
    {
        "title": "Protocol servers (e2b, mcp)",
        "about": ("The E2B-compatible server and the MCP server. Neither imports the other."),
        "packages": ["e2b", "mcp"],
    },
    {
        "title": "The command line (cli)",
        "about": (
            "``jupyter-exec`` and every ``python -m`` door: parse, call the layers below, print."
        ),
        "packages": ["cli"],
        "modules": ["__main__", "*.__main__"],
    },
]

PATTERNS = [
    [
        *layer.get("modules", []),
        *(p for pkg in layer.get("packages", []) for p in (pkg, f"{pkg}.*")),
    ]
    for layer in LAYERS
]
"""Per layer, the module patterns it claims (relative to the package)."""


def layer_of(module: str) -> int | None:
    """The index of the layer claiming ``module`` (``jupyter_exec.engine.kernel``, or the
    package itself): an exact name beats a pattern, a longer pattern a shorter one."""
    short = module.removeprefix("jupyter_exec.") if module != "jupyter_exec" else "__init__"
    best: tuple[tuple[bool, int], int] | None = None
    for index, patterns in enumerate(PATTERNS):
        for pattern in patterns:
            if fnmatch.fnmatchcase(short, pattern):
                score = ("*" not in pattern, len(pattern))
                if best is None or score > best[0]:
                    best = (score, index)
    return None if best is None else best[1]
