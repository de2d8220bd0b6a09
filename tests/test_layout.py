"""The package's layout is its architecture: checked from the source, no import needed.

What docs/architecture.md promises of the subpackages is held here: the root holds only the
public surface, no module imports back into a circle at run time (imports under
``TYPE_CHECKING`` do not run; imports inside functions do, later), and the inner layers never
reach for a front end.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "jupyter_exec"

FRONT_ENDS = {"cli", "server", "e2b", "mcp", "agents", "integrations", "manager"}
"""Outer layers: what people and programs call. Nothing inside may import them."""

INNER = {
    "boundary": {"exceptions"},  # the boundary needs nothing but the error tree
    "network": {"exceptions", "boundary"},  # one printable() for what a kernel sends
    "remote": {"exceptions", "boundary"},  # a gateway's words reach people through printable()
    "cluster": {"exceptions", "boundary"},  # its launcher imports nothing (tests/cluster/)
    "engine": None,  # None: anything but a front end
    "state": None,
    "notebook": None,
    "docker": None,
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_imports(tree: ast.AST, modules: set[str]) -> Iterator[str]:
    """Every ``jupyter_exec`` module the code imports when it runs (not for type checkers).

    ``from jupyter_exec.x import y`` imports the module ``jupyter_exec.x.y`` when there is one,
    else it takes the name ``y`` from ``jupyter_exec.x``. (The package ``__init__`` that Python
    also runs on the way is left out: a submodule importing its sibling through it is no circle.)
    """
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
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
        yield from _runtime_imports(node, modules)


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


@pytest.mark.parametrize("inner", sorted(INNER))
def test_inner_layers_never_import_a_front_end(inner: str) -> None:
    allowed = INNER[inner]
    wrong = []
    for name, targets in _graph().items():
        if not name.startswith(f"jupyter_exec.{inner}") or name.endswith(".__main__"):
            continue
        for target in targets:
            top = target.split(".")[1]
            if top == inner:
                continue
            if top in FRONT_ENDS or (allowed is not None and top not in allowed):
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def test_the_state_machinery_knows_the_session_only_as_a_protocol() -> None:
    graph = _graph()
    state = [n for n in graph if n.startswith("jupyter_exec.state")]
    assert state
    assert [n for n in state if "jupyter_exec.engine.session" in graph[n]] == []
