"""Code that runs inside the kernel: what environment the session's cells ran in.

Why in the kernel: only the kernel knows which distributions its cells
imported and which work-dir files they read. Installed once per kernel
process (:func:`jupyter_exec.session.envrecord.plan`), it keeps
two things, both cheap:

* the top-level module names present at install (the kernel's own imports),
  so the packages reported are those the *cells* brought in: each report maps
  the new top-level names of ``sys.modules`` to distributions as
  ``importlib.metadata.packages_distributions()`` does, but for those names only
  (:func:`providers`: a distribution's ``top_level.txt``, else only the few whose
  ``RECORD`` names a file under one of them are read whole; the full map built
  every distribution's file list and metadata, 0.4 to 0.8 s on the cell after a first
  ``import matplotlib``, now about 20 ms); what IPython imports to show a traceback
  (``stack_data``, ``executing``... imported the first time a cell fails or is
  interrupted) is the kernel's own and joins the baseline: counted as the cells',
  it cost the next cell that scan, 0.25 to 0.7 s after a timeout;
* an audit hook on ``open`` events that notes files opened for reading under
  the work dir (at most :data:`MAX_FILES`); their sha256 is taken at the next
  report, for files up to :data:`MAX_HASHED_BYTES` (and again only if their size
  or mtime changed). Measured in-process: about 0.05 ms per cell that opens a
  work-dir file 20 times, under the 0.2 ms the capture may cost.

:func:`report` returns a JSON string, or ``""`` when nothing changed since the
last report, so the per-cell ``user_expressions`` entry that calls it costs a
length comparison on most cells. Only the standard library; no name is left in
the user's namespace (the module lives in ``sys.modules`` under :data:`MODULE`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import sys
from collections.abc import Iterable
from typing import Any

MODULE = "_jupyter_exec_environment"
MAX_FILES = 200
MAX_HASHED_BYTES = 16 << 20


class Capture:
    """The environment seen so far in this kernel process."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.baseline = {name.partition(".")[0] for name in list(sys.modules)}
        self.seen_modules = len(sys.modules)
        self.known: set[str] = set()  # top-level names already mapped (or not mappable)
        self.packages: dict[str, str] = {}
        self.read: dict[str, tuple[float, int] | None] = {}  # relative path -> (mtime, size)
        self.hashes: dict[str, str] = {}
        self.pending: set[str] = set()  # read since the last report
        self.dirty = True
        # The top-level names mapped so far -> their distributions (None: none looked up).
        self._distributions: dict[str, list[str]] | None = None

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event != "open":
            return
        path, mode = args[0], args[1]
        if not isinstance(path, str) or (isinstance(mode, str) and set(mode) & set("wax+")):
            return
        if isinstance(mode, int) and mode & (os.O_WRONLY | os.O_RDWR):
            return
        full = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
        if not full.startswith(self.root + os.sep):
            return
        relative = full[len(self.root) + 1 :]
        if relative.startswith(".") or (relative not in self.read and len(self.read) >= MAX_FILES):
            return
        self.read.setdefault(relative, None)
        self.pending.add(relative)  # (re)read: hashed at the next report

    def own_imports(self, method: Any) -> Any:
        """``method`` (the shell's traceback display), with what it imports left out of the
        cells' packages: the modules present before it ran are compared after."""

        def showing(*args: Any, **kwargs: Any) -> Any:
            before = {name.partition(".")[0] for name in list(sys.modules)}
            try:
                return method(*args, **kwargs)
            finally:
                self.baseline |= {n.partition(".")[0] for n in list(sys.modules)} - before

        return showing

    def _new_packages(self) -> None:
        if len(sys.modules) == self.seen_modules:
            return
        self.seen_modules = len(sys.modules)
        stdlib: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())
        names = {n.partition(".")[0] for n in list(sys.modules)}
        fresh = {
            n
            for n in names - self.baseline - self.known - stdlib
            if not n.startswith("_") or n in ("_pytest",)
        }
        if not fresh:
            return
        from importlib import metadata

        if not hasattr(metadata, "packages_distributions"):  # Python < 3.10: not told
            return
        distributions = self._distributions = {**(self._distributions or {}), **providers(fresh)}
        for name in fresh:
            self.known.add(name)
            for dist in distributions.get(name, ()):
                try:
                    self.packages[dist] = metadata.version(dist)
                except metadata.PackageNotFoundError:
                    continue
                self.dirty = True

    def _hash_files(self) -> None:
        pending, self.pending = self.pending, set()
        for relative in sorted(pending):
            full = os.path.join(self.root, relative)
            try:
                st = os.stat(full)
            except OSError:
                continue
            stamp = (st.st_mtime, st.st_size)
            if self.read[relative] == stamp or st.st_size > MAX_HASHED_BYTES:
                continue
            digest = hashlib.sha256()
            try:
                with open(full, "rb") as handle:  # (read while the hook is told to look away)
                    for chunk in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(chunk)
            except OSError:
                continue
            self.read[relative] = stamp
            if self.hashes.get(relative) != digest.hexdigest():
                self.hashes[relative] = digest.hexdigest()
                self.dirty = True

    def report(self) -> str:
        self._new_packages()
        if self.pending:
            self._hash_files()
        if not self.dirty:
            return ""
        self.dirty = False
        return json.dumps(
            {
                **_here(),
                "packages": dict(sorted(self.packages.items())),
                "files": dict(sorted(self.hashes.items())),
            },
            sort_keys=True,
        )


def providers(names: Iterable[str]) -> dict[str, list[str]]:
    """``importlib.metadata.packages_distributions()`` for ``names`` only: each name that a
    distribution provides -> those distributions' names, as that function would list them.

    It reads every distribution's file list (``RECORD``, a path object per line) and its
    metadata; here a distribution that declares its names (``top_level.txt``) costs one
    small read, one that does not is inferred the standard library's own way only when a
    line of its ``RECORD`` starts with one of ``names`` (a superset of the files that
    inference keeps), and only the distributions that provide a name have their metadata
    read.
    """
    from importlib import metadata

    wanted = set(names)
    declared = getattr(metadata, "_top_level_declared", None)
    inferred = getattr(metadata, "_top_level_inferred", None)
    if not wanted:
        return {}
    if declared is None or inferred is None:  # another Python's internals: the full map
        everything = metadata.packages_distributions()
        return {n: list(everything[n]) for n in wanted if n in everything}
    alternatives = "|".join(re.escape(n) for n in sorted(wanted))
    starts = re.compile(rf'^"?(?:\./)*(?:{alternatives})(?:[/.,"]|$)', re.MULTILINE)
    found: dict[str, list[str]] = {}
    for dist in metadata.distributions():
        tops = declared(dist)
        if not tops:
            record = dist.read_text("RECORD")  # (none: an egg's file list, inferred as is)
            if record and starts.search(record) is None:
                continue
            tops = inferred(dist)
        mine = wanted.intersection(tops)
        if mine:
            dist_name = dist.metadata["Name"]
            for name in sorted(mine):
                found.setdefault(name, []).append(dist_name)
    return found


_capture: Capture | None = None


def install(root: str) -> None:
    """Start capturing in this kernel process (once); ``root`` is the work dir as seen here."""
    global _capture
    if _capture is None:
        _capture = Capture(root)
        sys.addaudithook(_capture.audit)
        shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
        for name in ("showtraceback", "showsyntaxerror"):
            method = getattr(shell, name, None)
            if method is not None:
                setattr(shell, name, _capture.own_imports(method))


def report() -> str:
    """The environment as JSON, or ``""`` when unchanged since the last call."""
    return "" if _capture is None else _capture.report()


def versions(names: list[str]) -> str:
    """Interpreter, platform and the installed version (or None) of each distribution."""
    from importlib import metadata

    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return json.dumps({**_here(), "packages": found})


def _here() -> dict[str, dict[str, str]]:
    """The interpreter and platform this kernel runs on (what a record and a replay compare)."""
    return {
        "interpreter": {
            "implementation": platform.python_implementation(),
            "version": platform.python_version(),
            "executable": sys.executable,
        },
        "platform": {
            "system": platform.system(),
            "machine": platform.machine(),
            "release": platform.release(),
        },
    }
