"""The package's layout is its architecture: checked from the source, no import needed.

What docs/architecture.md promises is held here: the root holds only the public surface, no
module imports back into a circle at run time (imports under ``TYPE_CHECKING`` do not run;
imports inside functions do, later), the inner folders have no circle even for type checkers,
and every module keeps the layer order declared once in ``docs/layers.py``: it imports only
inwards, with no exemption.
"""

from __future__ import annotations

import ast
import functools
import runpy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "jupyter_exec"

LAYERS_FILE = PACKAGE.parent / "docs" / "layers.py"
"""The one declaration of the layers, inner to outer (the architecture page draws it too)."""


@functools.cache
def _declared() -> dict[str, Any]:
    """``LAYERS``, ``VOCABULARY`` and ``VOCABULARY_REACHES``, read as plain data."""
    return runpy.run_path(str(LAYERS_FILE))


def _layer_of(module: str) -> int | None:
    """The layer claiming ``module``, by the declaration's own rule."""
    found: int | None = _declared()["layer_of"](module)
    return found


def _package_of(module: str) -> str:
    """The folder a module lives in (``engine``), or the module's own name at the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_imports(tree: ast.AST, modules: set[str], typing: bool = False) -> Iterator[str]:
    """Every ``jupyter_exec`` module the code imports when it runs (not for type checkers,
    unless ``typing``).

    ``from jupyter_exec.x import y`` imports the module ``jupyter_exec.x.y`` when there is one,
    else it takes the name ``y`` from ``jupyter_exec.x``. (The package ``__init__`` that Python
    also runs on the way is left out: a submodule importing its sibling through it is no circle.)
    """
    for node in ast.iter_child_nodes(tree):
        if not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for other in node.orelse:
                yield from _runtime_imports(other, modules)
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("jupyter_exec"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    yield full if full in modules else node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("jupyter_exec"))
        yield from _runtime_imports(node, modules, typing)


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Module -> the modules it imports at run time (parsed once per run; read, never changed)."""
    sources = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in sources.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = set(_runtime_imports(tree, set(sources)))
        graph[name] = {t for t in targets if t in sources and t != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            step = next(targets, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_the_root_holds_only_the_public_surface() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 15, modules


def test_no_module_imports_back_into_a_circle() -> None:
    assert _circles(_graph()) == []


def test_the_circle_finder_sees_a_circle() -> None:
    """The check above is not vacuous: a made-up circle is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_every_module_has_a_declared_layer() -> None:
    assert [name for name in _graph() if _layer_of(name) is None] == []


def _wrong_imports(name: str, targets: set[str]) -> list[str]:
    """The imports of ``name`` that break the declared order (see docs/layers.py)."""
    declared = _declared()
    layers = declared["LAYERS"]
    vocabulary = {f"jupyter_exec.{m}" for m in declared["VOCABULARY"]}
    reach = next(
        i
        for i, layer in enumerate(layers)
        if declared["VOCABULARY_REACHES"] in layer.get("packages", [])
    )
    here, package = _layer_of(name), _package_of(name)
    assert here is not None
    lowest = min(i for i, layer in enumerate(layers) if layer.get("packages"))
    wrong = []
    for target in sorted(targets):
        there = _layer_of(target)
        assert there is not None
        if _package_of(target) == package and name not in vocabulary:
            continue  # a folder's modules use each other freely (circles are checked apart)
        if name in vocabulary:
            ok = there <= reach  # the vocabulary stands on the engine's constants, no higher
        elif here == lowest:
            ok = False  # sent to kernels as source: it may import nothing of the project
        elif target in vocabulary:  # inner layers speak only the error tree
            ok = target == "jupyter_exec.exceptions" or here >= reach or here == there
        elif there == here:  # a root module of a layer uses that layer; peer folders never
            peers = layers[here].get("packages", [])
            ok = not (package in peers and _package_of(target) in peers)
        else:
            ok = there < here
        if not ok:
            wrong.append(f"{name} ({layers[here]['title']}) -> {target} ({layers[there]['title']})")
    return wrong


def test_every_module_imports_only_inward() -> None:
    """No exemption: every folder, the root and every ``__main__`` keep the declared order."""
    wrong = [w for name, targets in sorted(_graph().items()) for w in _wrong_imports(name, targets)]
    assert wrong == []


def test_the_order_check_sees_a_wrong_import() -> None:
    """The check above is not vacuous: an inner layer reaching out, a peer reaching sideways
    and the in-kernel halves importing the project are each found."""
    assert _wrong_imports("jupyter_exec.engine.runner", {"jupyter_exec.session.session"})
    assert _wrong_imports("jupyter_exec.state.durable", {"jupyter_exec.cli.run"})
    assert _wrong_imports("jupyter_exec.mcp.tools", {"jupyter_exec.e2b.app"})
    assert _wrong_imports("jupyter_exec.network.proxy", {"jupyter_exec.remote.client"})
    assert _wrong_imports("jupyter_exec.inkernel.state", {"jupyter_exec.exceptions"})
    assert _wrong_imports("jupyter_exec.boundary.paths", {"jupyter_exec.models"})
    assert _wrong_imports("jupyter_exec.models", {"jupyter_exec.session.session"})
    assert not _wrong_imports("jupyter_exec.session.session", {"jupyter_exec.state.durable"})


def test_the_state_machinery_knows_the_session_only_as_a_protocol() -> None:
    graph = _graph()
    state = [n for n in graph if n.startswith("jupyter_exec.state")]
    assert state
    assert [n for n in state if "jupyter_exec.session.session" in graph[n]] == []


WITHOUT_TYPE_CIRCLES = ("inkernel", "boundary", "network", "remote", "cluster", "engine")
WITHOUT_TYPE_CIRCLES += ("docker", "state", "notebook", "agents", "integrations", "mcp", "cli")
"""Folders whose modules do not name each other in a circle even under ``TYPE_CHECKING``:
the state machinery sees the session and its own parts through protocols (``state/host.py``,
``state/reload.py``'s ``Recovering``), never by importing back."""


@pytest.mark.parametrize("folder", WITHOUT_TYPE_CIRCLES)
def test_no_circle_even_for_type_checkers(folder: str) -> None:
    sources = {_module_name(p): p for p in (PACKAGE / folder).rglob("*.py")}
    graph = {
        name: set(_runtime_imports(ast.parse(path.read_text("utf-8")), set(sources), typing=True))
        & set(sources) - {name}
        for name, path in sources.items()
    }
    assert _circles(graph) == []


_SHELL_SENDS = {"execute", "kernel_info", "complete", "inspect", "history", "comm_info"}
"""A kernel client's methods that put a request on the kernel's shell channel."""
_SHELL_DOORS = {
    "jupyter_exec.engine.kernel": "KernelHandle.send_silent, and wait_ready's kernel_info",
    "jupyter_exec.engine.runner": "a session's cells",
}
"""The only modules that send on a kernel's shell channel, and what they send."""


def _shell_sends(tree: ast.AST) -> list[int]:
    """Lines that call ``<...>.kc.<shell method>(...)``, ``kc.<shell method>(...)`` or
    ``<...>.shell_channel.send(...)``."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner, method = node.func.value, node.func.attr
        owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        if (owner_name == "kc" and method in _SHELL_SENDS) or (
            owner_name == "shell_channel" and method == "send"
        ):
            found.append(node.lineno)
    return found


def test_the_host_asks_a_kernel_through_one_door() -> None:
    """Every silent host request (state, signing, environment, files, fences) goes out through
    ``KernelHandle.send_silent`` and is answered by msg_id through the kernel's one mailbox,
    each with its own deadline; nothing else writes to a kernel's shell channel."""
    strays = [
        f"{_module_name(path)}:{line}"
        for path in PACKAGE.rglob("*.py")
        if _module_name(path) not in _SHELL_DOORS
        for line in _shell_sends(ast.parse(path.read_text("utf-8")))
    ]
    assert strays == []


def test_the_door_check_sees_a_stray_request() -> None:
    assert _shell_sends(ast.parse("old.kc.execute('x', silent=True)")) == [1]
    assert _shell_sends(ast.parse("kc.shell_channel.send(msg)")) == [1]
    assert _shell_sends(ast.parse("kernel.send_silent('x')")) == []
