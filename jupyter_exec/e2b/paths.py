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

The work dir is opened once and its descriptor held (:meth:`SandboxPaths.held`): a file, a
context's cwd or a command's cwd is reached from that descriptor one component at a time,
never through a link and never by resolving the work dir's path again. A sandbox's kernel can
rename or replace anything inside it, and on a non-root host it runs as our own uid, so a link
it planted there would look like one the person made.
"""

from __future__ import annotations

import contextlib
import os
import threading
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
        self._held: Folder | None = None
        self._lock = threading.Lock()  # files are served from worker threads

    def ensure(self) -> Path:
        """The work dir, made if no kernel or file has made it yet."""
        self.root.mkdir(exist_ok=True)
        return self.root

    def held(self) -> Folder:
        """The work dir, opened once (made if missing) and held until :meth:`close`.

        Opened again only when the folder held was removed (no name left for it), so a
        person who deletes a sandbox's folder gets a fresh one, not writes into nowhere.
        """
        with self._lock:
            if self._held is not None:
                with contextlib.suppress(OSError):
                    if os.fstat(self._held.fd).st_nlink > 0:
                        return self._held
                self._held.close()
                self._held = None
            self.ensure()
            self._held = Folder.open(self.root)
            return self._held

    def open(self, relative: str, *, create: bool = False) -> Folder:
        """The folder ``relative`` (from :meth:`relative`) reached from the held work dir.

        Each component is opened with ``O_NOFOLLOW`` relative to the one before (made, with
        ``create``): a link is refused (``ELOOP``), a file where a folder is named too.
        """
        held = self.held()
        folder = Folder(os.dup(held.fd), held.path)
        try:
            for part in (p for p in relative.split("/") if p):
                inner = folder.sub(part, create=create)
                folder.close()
                folder = inner
        except BaseException:
            folder.close()
            raise
        return folder

    def close(self) -> None:
        """Let go of the held work dir (the sandbox is gone)."""
        with self._lock:
            if self._held is not None:
                self._held.close()
                self._held = None

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

        The folder is opened from the held work dir down without following links (made, with
        ``create``), so a link the sandbox planted (``ln -s / /home/user/esc``) is refused
        with a :class:`~jupyter_exec.StorageError` (``ELOOP``) before any kernel, mount or
        loan is made from it; a file where a folder is named is one too (``ENOTDIR``).
        """
        relative = self.relative(path)
        try:
            with self.open(relative, create=create) as opened:
                return opened.path, self.shown(relative)
        except StorageError as exc:  # said in the sandbox's terms, not the host's
            raise StorageError(str(exc).replace(str(self.root), HOME), exc.errno) from None
