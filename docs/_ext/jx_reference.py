"""Reference pages generated from the code, so they cannot drift from it.

Directives (used from reStructuredText, or from Markdown inside ``{eval-rst}``):

``jx-public-api``
    autodoc for every name in ``jupyter_exec.__all__``, grouped by kind: a new public name
    appears without an edit here.
``jx-cli-reference``
    the ``--help`` of ``jupyter-exec`` and of every subcommand, from
    ``jupyter_exec.cli.build_parser()``, walked recursively.
``jx-config-reference``
    every traitlets class of the package with its ``config=True`` traits (type, default,
    help), found by importing each module; also defines the ``configtrait`` object type so
    pages can link ``:configtrait:`DockerProvisioner.memory```.
``jx-module-map``
    every module of ``jupyter_exec/`` (walked with :mod:`pkgutil`, read with :mod:`ast`,
    nothing imported) with the first line of its docstring, grouped by the layers in
    ``conf.py``'s ``jx_layers``; a module no layer claims goes to a last "not placed" group.

The OpenAPI reference is in :mod:`jx_openapi`.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fnmatch
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

logger = logging.getLogger(__name__)

PACKAGE = "jupyter_exec"
HELP_WIDTH = "80"


def plain_to_rst(text: str) -> str:
    """Help text written for a terminal, made safe for reStructuredText.

    Markdown-style ```code``` becomes an rst literal; the characters rst would read as markup
    (``*``, ``|``, a trailing ``_``) are escaped.
    """
    parts = re.split(r"(`[^`]+`)", text)
    out = []
    for part in parts:
        if len(part) > 2 and part.startswith("`") and part.endswith("`"):
            out.append(f"``{part[1:-1]}``")
        else:
            part = part.replace("\\", "\\\\").replace("*", r"\*").replace("|", r"\|")
            out.append(re.sub(r"_(?=\W|$)", r"\\_", part))
    return "".join(out)


def underline(title: str, char: str) -> list[str]:
    return [title, char * max(len(title), 4), ""]


class GeneratedDirective(SphinxDirective):
    """A directive whose body is reStructuredText made by :meth:`lines`, parsed in place."""

    has_content = False

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        source = self.get_source_info()[0] or self.env.docname
        content = StringList()
        for number, line in enumerate(self.lines()):
            content.append(line, f"{source} <{self.name}>", number)
        holder = nodes.section()
        holder.document = self.state.document
        nested_parse_with_titles(self.state, content, holder)
        return list(holder.children)


# -- docstrings -------------------------------------------------------------------------

SECTION_RULE = re.compile(r"^\s*-{3,}\s*$")


def numpy_sections_as_rubrics(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """A NumPy-style ``Parameters`` / ``----------`` heading becomes a rubric, not a section.

    rst would read it as a section title inside the class description. napoleon is not used:
    it reads every attribute docstring of the form "Xxx: yyy" (most of our trait help) as a
    type annotation.
    """
    for i in range(len(lines) - 1):
        title = lines[i].strip()
        if title and SECTION_RULE.match(lines[i + 1]) and len(lines[i + 1].strip()) >= len(title):
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            lines[i] = f"{indent}.. rubric:: {title}"
            lines[i + 1] = ""


# -- public API -------------------------------------------------------------------------


class PublicApi(GeneratedDirective):
    """autodoc for ``jupyter_exec.__all__``: classes, functions, exceptions, data."""

    def lines(self) -> list[str]:
        package = importlib.import_module(PACKAGE)
        groups: dict[str, list[str]] = {
            "Classes": [],
            "Functions": [],
            "Exceptions": [],
            "Data": [],
        }
        for name in package.__all__:
            obj = getattr(package, name)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                groups["Exceptions"].append(name)
            elif inspect.isclass(obj):
                groups["Classes"].append(name)
            elif callable(obj):
                groups["Functions"].append(name)
            else:
                groups["Data"].append(name)
        out: list[str] = []
        for title, names in groups.items():
            if not names:
                continue
            out += underline(title, "-")
            for name in names:
                target = f"{PACKAGE}.{name}"
                if title == "Classes":
                    out += [f".. autoclass:: {target}", "   :members:"]
                    out += _mixed_in(getattr(package, name))
                    out += [""]
                elif title == "Exceptions":
                    out += [f".. autoexception:: {target}", "   :show-inheritance:", ""]
                elif title == "Functions":
                    out += [f".. autofunction:: {target}", ""]
                else:
                    value = getattr(package, name)
                    out += [f".. data:: {target}", f"   :value: {value!r}", ""]
        return out


def _mixed_in(cls: type) -> list[str]:
    """Document the methods a class gets from our own mixins (AsyncSession's fork, undo ...)."""
    bases = cls.__mro__[1:]
    if not any(b.__module__.startswith(PACKAGE + ".") for b in bases):
        return []
    foreign = sorted({b.__name__ for b in bases if not b.__module__.startswith(PACKAGE + ".")})
    return [f"   :inherited-members: {', '.join(foreign)}"]


# -- CLI --------------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every subcommand parser below ``parser``, depth first, each once (aliases skipped)."""
    seen: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
                yield sub
                yield from _subcommands(sub)


@contextlib.contextmanager
def _help_environment() -> Iterator[None]:
    """Fixed width and no colour, so the page does not depend on the terminal that built it."""
    saved = {key: os.environ.get(key) for key in ("COLUMNS", "NO_COLOR", "PYTHON_COLORS")}
    os.environ.update(COLUMNS=HELP_WIDTH, NO_COLOR="1", PYTHON_COLORS="0")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _help_block(parser: argparse.ArgumentParser) -> list[str]:
    with _help_environment():
        text = parser.format_help()
    return [".. code-block:: text", ""] + [f"   {line}".rstrip() for line in text.splitlines()]


def note_package_sources(directive: SphinxDirective) -> None:
    """Rebuild the page when any module changes (it is generated by importing them)."""
    for path in package_root(directive.env.app).rglob("*.py"):
        directive.env.note_dependency(str(path))


class CliReference(GeneratedDirective):
    """``--help`` of the command and of every subcommand, one section each."""

    def lines(self) -> list[str]:
        note_package_sources(self)
        cli = importlib.import_module(f"{PACKAGE}.cli")
        parser = cli.build_parser()
        out = underline(f"``{parser.prog}``", "-")
        out += [*_help_block(parser), ""]
        for sub in _subcommands(parser):
            label = "cli-" + "-".join(sub.prog.split()[1:])
            out += [f".. _{label}:", ""]
            out += underline(f"``{sub.prog}``", "-")
            out += [*_help_block(sub), ""]
        return out


class PythonText(GeneratedDirective):
    """``.. jx-python-text:: module:NAME``: a string the code defines, shown as it prints it.

    For text the program itself prints (the exit-status table of ``--help``), so a page that
    quotes it cannot fall behind.
    """

    required_arguments = 1

    def lines(self) -> list[str]:
        module_name, _, attribute = self.arguments[0].partition(":")
        note_package_sources(self)
        text = str(getattr(importlib.import_module(module_name), attribute))
        return [".. code-block:: text", ""] + [f"   {line}".rstrip() for line in text.splitlines()]


class SessionOptionsTable(GeneratedDirective):
    """Every session option (``jupyter_exec.options.option_fields()``): default and help."""

    def lines(self) -> list[str]:
        note_package_sources(self)
        options = importlib.import_module(f"{PACKAGE}.options")
        out = [".. list-table::", "   :header-rows: 1", "   :widths: 30 70", ""]
        out += ["   * - argument=default", "     - meaning"]
        for option in options.option_fields():
            out += [
                f"   * - ``{option.name}={option.default!r}``",
                f"     - {plain_to_rst(' '.join(option.help.split()))}",
            ]
        return [*out, ""]


# -- configuration ----------------------------------------------------------------------


def _package_modules() -> Iterator[str]:
    """Importable module names of the package (``__main__`` modules excluded: they run)."""
    package = importlib.import_module(PACKAGE)
    yield PACKAGE
    for info in pkgutil.walk_packages(package.__path__, PACKAGE + "."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            yield info.name


def configurable_classes() -> list[type]:
    """Every traitlets class defined in the package that has traits of its own with config."""
    from traitlets.config import Configurable

    found: dict[str, type] = {}
    for name in _package_modules():
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            logger.warning(
                "configuration reference: cannot import %s (%s: %s)",
                name,
                type(exc).__name__,
                exc,
                type="jx",
                subtype="config",
            )
            continue
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, Configurable)
                and obj.__module__.startswith(PACKAGE)
                and _own_config_traits(obj)
            ):
                found[obj.__name__] = obj
    return [found[key] for key in sorted(found)]


def _own_config_traits(cls: type) -> dict[str, Any]:
    """Traits with ``config=True`` that this package defines (not traitlets' or Jupyter's)."""
    traits = cls.class_traits(config=True)  # type: ignore[attr-defined]
    return {
        name: trait
        for name, trait in sorted(traits.items())
        if getattr(trait, "this_class", cls).__module__.startswith(PACKAGE)
    }


class ConfigReference(GeneratedDirective):
    """One section per configurable class: ``c.Class.trait`` with type, default and help."""

    def lines(self) -> list[str]:
        note_package_sources(self)
        out: list[str] = []
        for cls in configurable_classes():
            path = f"{cls.__module__}.{cls.__qualname__}"
            out += [f".. _config-{cls.__name__}:", ""]
            out += underline(cls.__name__, "-")
            doc = inspect.getdoc(cls) or ""
            first = doc.strip().split("\n\n", 1)[0].replace("\n", " ")
            out += [f"``{path}``" + (f": {first}" if first else ""), ""]
            for name, trait in _own_config_traits(cls).items():
                out += [f".. configtrait:: {cls.__name__}.{name}", ""]
                out += [f"   :type: {type(trait).__name__}"]
                out += [f"   :default: ``{trait.default_value_repr()}``"]
                out += [f"   :set it: ``c.{cls.__name__}.{name} = ...``", ""]
                help_text = plain_to_rst(" ".join((trait.help or "(no help)").split()))
                out += [f"   {help_text}", ""]
        return out


# -- module map -------------------------------------------------------------------------


def package_root(app: Sphinx) -> Path:
    return (Path(app.confdir) / app.config.jx_package_path).resolve()


def walk_modules(root: Path, prefix: str = PACKAGE) -> Iterator[tuple[str, Path]]:
    """``(dotted name, file)`` for every module and package under ``root``, without importing."""
    yield prefix, root / "__init__.py"
    for info in sorted(pkgutil.iter_modules([str(root)]), key=lambda i: i.name):
        name = f"{prefix}.{info.name}"
        if info.ispkg:
            yield from walk_modules(root / info.name, name)
        else:
            yield name, root / f"{info.name}.py"


def first_docstring_line(path: Path) -> str | None:
    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    if not doc:
        return None
    return doc.strip().splitlines()[0].strip()


def count_lines(path: Path) -> int:
    with path.open(encoding="utf-8") as handle:
        return sum(1 for _ in handle)


def layer_of(module: str, layers: list[dict[str, Any]]) -> int | None:
    """Index of the layer whose pattern matches ``module`` (relative to the package) best.

    An exact name beats a wildcard, and a longer wildcard beats a shorter one, so
    ``docker.options`` can sit in another layer than the rest of ``docker.*``.
    """
    short = module[len(PACKAGE) + 1 :] if module != PACKAGE else "__init__"
    best: tuple[tuple[bool, int], int] | None = None
    for index, layer in enumerate(layers):
        for pattern in layer["modules"]:
            if fnmatch.fnmatchcase(short, pattern):
                score = (not any(c in pattern for c in "*?["), len(pattern))
                if best is None or score > best[0]:
                    best = (score, index)
    return None if best is None else best[1]


def package_imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``module`` imports (read with :mod:`ast`, nothing run)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], node.module or ""])
            else:
                base = node.module or ""
            names = [f"{base.rstrip('.')}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            while name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in known and name != module:
                found.add(name)
    return found


class LayerCheck(GeneratedDirective):
    """Imports that point from an inner layer to an outer one: the map's honest footnote.

    Not a warning: the layers are a description, and a module that needs another place shows
    up here for a person to decide (move the module, or the import).
    """

    def lines(self) -> list[str]:
        root = package_root(self.env.app)
        layers: list[dict[str, Any]] = self.config.jx_layers
        modules = dict(walk_modules(root))
        outward = []
        for name, path in modules.items():
            here = layer_of(name, layers)
            if here is None or name == PACKAGE:  # the package face re-exports every layer
                continue
            for target in sorted(package_imports(name, path, set(modules))):
                there = layer_of(target, layers)
                if there is not None and there > here:
                    outward.append((name, here, target, there))
        if not outward:
            return [
                "Every import points inwards (or stays within its layer): no module of an "
                "inner layer imports one of an outer layer.",
                "",
            ]
        out = [
            f"{len(outward)} import(s) point outwards, from an inner layer to an outer one "
            "(found by reading every module's imports; ``jupyter_exec/__init__.py``, the "
            "public face, is left out):",
            "",
            ".. list-table::",
            "   :header-rows: 1",
            "",
            "   * - module (layer)",
            "     - imports (layer)",
        ]
        for name, here, target, there in outward:
            out += [f"   * - ``{name}`` ({here + 1})", f"     - ``{target}`` ({there + 1})"]
        return [*out, ""]


class ModuleMap(GeneratedDirective):
    """Every module of the package in its layer, with the first line of its docstring."""

    def lines(self) -> list[str]:
        root = package_root(self.env.app)
        layers: list[dict[str, Any]] = self.config.jx_layers
        placed: dict[int | None, list[tuple[str, Path]]] = {}
        for name, path in walk_modules(root):
            self.env.note_dependency(str(path))
            placed.setdefault(layer_of(name, layers), []).append((name, path))
        unplaced = placed.get(None, [])
        if unplaced:
            logger.info(
                "module map: not placed in a layer: %s", ", ".join(name for name, _ in unplaced)
            )
        out: list[str] = []
        groups = [
            (layer["title"], layer.get("about", ""), placed.get(i, []))
            for i, layer in enumerate(layers)
        ]
        groups.append(
            (
                "Not yet placed",
                "Modules that no layer in ``docs/conf.py`` (``jx_layers``) claims yet: new "
                "ones land here until someone places them.",
                unplaced,
            )
        )
        for number, (title, about, modules) in enumerate(groups, start=1):
            if not modules and title == "Not yet placed":
                continue
            out += [f".. _layer-{number}:", ""]
            out += underline(f"{number}. {title}", "^")
            if about:
                out += [about, ""]
            if not modules:
                out += ["(No module in this layer today.)", ""]
                continue
            out += [".. list-table::", "   :header-rows: 1", "   :widths: 30 8 62", ""]
            out += [
                "   * - module",
                "     - lines",
                "     - what it owns (its docstring's first line)",
            ]
            for name, path in modules:
                line = first_docstring_line(path) or "(no docstring)"
                rel = path.relative_to(root.parent).as_posix()
                count = count_lines(path)
                out += [f"   * - ``{name}``", "", f"       ``{rel}``", f"     - {count}"]
                out += [f"     - {line}"]
            out.append("")
        return out


class LayerDiagram(GeneratedDirective):
    """The layers as a text drawing, inner to outer, with how many modules each holds."""

    def lines(self) -> list[str]:
        root = package_root(self.env.app)
        layers: list[dict[str, Any]] = self.config.jx_layers
        counts = [0] * (len(layers) + 1)
        for name, _ in walk_modules(root):
            index = layer_of(name, layers)
            counts[len(layers) if index is None else index] += 1
        width = max(len(layer["title"]) for layer in layers) + 4
        drawing = []
        for number, layer in enumerate(reversed(layers)):
            index = len(layers) - number
            count = counts[index - 1]
            box = f"{index}. {layer['title']}".ljust(width)
            drawing.append(f"   {box} {count:2d} module{'s' if count != 1 else ''}")
            if number < len(layers) - 1:
                drawing.append("   " + " " * 4 + "│ imports ▼")
        if counts[-1]:
            drawing.append(f"   (not yet placed: {counts[-1]})")
        return [".. code-block:: text", "", *drawing, ""]


# -- benchmark cases --------------------------------------------------------------------

CASE_LINE = re.compile(r"^(?P<name>\S+)\s+\[(?P<group>[^\]]+)\]\s+(?P<summary>.*)$")


class BenchmarkCases(GeneratedDirective):
    """The cases ``python -m benchmarks --list`` registers: name, group, what it measures."""

    def lines(self) -> list[str]:
        root = package_root(self.env.app).parent
        for path in (root / "benchmarks").glob("*.py"):
            self.env.note_dependency(str(path))
        listing = subprocess.run(
            [sys.executable, "-m", "benchmarks", "--list"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        cases = [m for m in map(CASE_LINE.match, listing.stdout.splitlines()) if m]
        if listing.returncode != 0 or not cases:
            logger.warning(
                "benchmark cases: `python -m benchmarks --list` failed (exit %s): %s",
                listing.returncode,
                listing.stderr.strip()[-500:],
                type="jx",
                subtype="benchmarks",
            )
            return []
        out = [".. list-table::", "   :header-rows: 1", "   :widths: 15 10 75", ""]
        out += ["   * - case (``--only``)", "     - group", "     - what it measures"]
        for match in cases:
            out += [
                f"   * - ``{match['name']}``",
                f"     - {match['group']}",
                f"     - {match['summary']}",
            ]
        return [*out, ""]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("jx_layers", [], "env", types=[list])
    app.add_config_value("jx_package_path", "../jupyter_exec", "env", types=[str])
    app.add_directive("jx-public-api", PublicApi)
    app.connect("autodoc-process-docstring", numpy_sections_as_rubrics)
    app.add_directive("jx-cli-reference", CliReference)
    app.add_directive("jx-python-text", PythonText)
    app.add_directive("jx-session-options", SessionOptionsTable)
    app.add_directive("jx-config-reference", ConfigReference)
    app.add_directive("jx-module-map", ModuleMap)
    app.add_directive("jx-layer-diagram", LayerDiagram)
    app.add_directive("jx-layer-check", LayerCheck)
    app.add_directive("jx-benchmark-cases", BenchmarkCases)
    app.add_object_type(
        "configtrait",
        "configtrait",
        objname="configuration option",
        indextemplate="pair: %s; configuration option",
    )
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def print_module_map() -> None:
    """The module map as plain text, one line per module (for notes and reviews)."""
    import runpy

    here = Path(__file__).resolve().parent
    conf = runpy.run_path(str(here.parent / "conf.py"))
    layers: list[dict[str, Any]] = conf["jx_layers"]
    root = (here.parent / conf["jx_package_path"]).resolve()
    rows = [(layer_of(name, layers), name, path) for name, path in walk_modules(root)]
    titles = [layer["title"] for layer in layers] + ["Not yet placed"]
    for index, title in enumerate(titles):
        placed = [(n, p) for i, n, p in rows if (len(layers) if i is None else i) == index]
        if placed:
            print(f"{index + 1}. {title}")
        for name, path in placed:
            doc = first_docstring_line(path) or "(no docstring)"
            print(f"   {name:<36} {count_lines(path):4d}  {doc}")


if __name__ == "__main__":
    print_module_map()
