"""Where a sandbox path is on the host: E2B's ``/home/user`` is the sandbox's work dir.

The SDK names files the way E2B's Linux sandboxes lay them out: the user's
home ``/home/user`` is the default cwd, and code reads what ``files.write``
put there by relative name. Here the work dir plays that part::

    "/home/user/data/a.csv"  ->  <root>/<sandbox id>/data/a.csv
    "data/a.csv"             ->  the same (relative to the home)
    "/etc/passwd", "../x"    ->  WorkDirError: outside the sandbox's files

Only the mapping lives here; every host-side operation on the result goes
through :mod:`jupyter_exec.boundary.paths` (:mod:`jupyter_exec.e2b.files`, and
:meth:`SandboxPaths.folder` for a cwd), which refuses links planted on the way.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from jupyter_exec.boundary.naming import check_text
from jupyter_exec.boundary.paths import Folder
from jupyter_exec.exceptions import StorageError, WorkDirError

__all__ = ["HOME", "SandboxPaths"]

HOME = "/home/user"
"""The sandbox's home as the SDK names it, which is the work dir here."""


class SandboxPaths:
    """The mapping between one sandbox's paths and its work dir ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = HOME

    def ensure(self) -> Path:
        """The work dir, made if no kernel or file has made it yet."""
        self.root.mkdir(exist_ok=True)
        return self.root

    def relative(self, path: str | None) -> str:
        """``path`` relative to the work dir ('' for the work dir itself), or WorkDirError."""
        if path is None or path in ("", "~"):
            return ""
        check_text(path, f"the path {path!r}")
        pure = PurePosixPath(path)
        if pure.is_absolute():
            home = PurePosixPath(HOME)
            if pure != home and home not in pure.parents:
                raise WorkDirError(
                    f"{path!r} is outside the sandbox's files: use a path under {HOME} "
                    "(the sandbox's work dir) or a relative one"
                )
            pure = pure.relative_to(home)
        elif pure.parts[:1] == ("~",):
            pure = PurePosixPath(*pure.parts[1:])
        if ".." in pure.parts:
            raise WorkDirError(f"{path!r} leaves the sandbox's files ('..'); remove the '..'")
        return "/".join(p for p in pure.parts if p not in ("", "."))

    def shown(self, relative: str) -> str:
        """The path the client sees for ``relative``."""
        return f"{HOME}/{relative}" if relative else HOME

    def folder(self, path: str | None, *, create: bool = False) -> tuple[Path, str]:
        """A folder's host path and shown path (for a context's or a command's cwd).

        The folder is opened from the work dir down without following links (made, with
        ``create``), so a link the sandbox planted (``ln -s / /home/user/esc``) is refused
        with a :class:`~jupyter_exec.StorageError` (``ELOOP``) before any kernel, mount or
        loan is made from it; a file where a folder is named is one too (``ENOTDIR``).
        """
        relative = self.relative(path)
        self.ensure()
        try:
            with Folder.open(self.root, relative, create=create) as opened:
                return opened.path, self.shown(relative)
        except StorageError as exc:  # said in the sandbox's terms, not the host's
            raise StorageError(str(exc).replace(str(self.root), HOME), exc.errno) from None
