"""Paths seen through the server: API paths under the server root, never outside it.

Clients name folders the way Jupyter's contents API does: ``/``-separated and
relative to the server root (``ServerApp.root_dir``). Every such path is
checked here, once, by :func:`jupyter_exec.boundary.paths.inside`: component by
component from the root, and a symbolic link anywhere below the root is
refused (a :class:`~jupyter_exec.WorkDirError`, a 400), never
followed, so what a kernel planted cannot lead a session, a replay or a
Docker kernel's mount elsewhere. The path handed on is the checked one,
unresolved, and the Docker provisioner pins it again without following
links (:func:`jupyter_exec.boundary.paths.pin_dir`). Hidden components are refused too (unless the
contents
manager allows hidden files), because Jupyter's own file handler would not
serve anything inside them. Output files are handed back as URLs of that
handler (``/files/...``), so reading them goes through Jupyter's
authentication like every other request.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from jupyter_exec.boundary.naming import unsafe_character
from jupyter_exec.boundary.paths import inside
from jupyter_exec.exceptions import StorageError, WorkDirError

__all__ = ["NAME_MAX", "PATH_MAX", "ServerRoot"]

NAME_MAX = 255
"""Longest file or folder name, in bytes (Linux, macOS and Windows agree)."""

PATH_MAX = 4096
"""Longest path, in bytes, the operating system takes (Linux's limit)."""


class ServerRoot:
    """Maps between API paths (``"a/b"``), absolute paths and ``/files/`` URLs."""

    def __init__(
        self, root_dir: str | os.PathLike[str], base_url: str = "/", *, allow_hidden: bool = False
    ) -> None:
        # Trusted origin: the server's own configured root (links above it are the admin's).
        self.root = Path(os.path.realpath(root_dir))
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self.allow_hidden = allow_hidden

    def resolve(self, api_path: str) -> Path:
        """The absolute path for ``api_path``; raises :class:`WorkDirError` if it escapes the root.

        ``""`` is the root itself. Absolute paths, ``..``, backslashes and
        NUL bytes are refused outright rather than normalised, so a client
        never gets a different folder from the one it named.
        """
        if not isinstance(api_path, str):
            raise WorkDirError("a path must be a string")
        if "\x00" in api_path or "\\" in api_path:
            raise WorkDirError(f"invalid path {api_path!r}")
        found = unsafe_character(api_path)
        if found is not None:  # a folder name shown to people must read as what it is
            raise WorkDirError(f"the path {api_path!r} has {found[1]} at position {found[0]}")
        pure = PurePosixPath(api_path.strip("/")) if api_path.strip("/") else PurePosixPath()
        if api_path.startswith("/") or api_path.startswith("~"):
            raise WorkDirError(
                f"{api_path!r}: give a path relative to the server root, not an absolute one"
            )
        if len(str(self.root).encode()) + len(api_path.encode("utf-8", "replace")) >= PATH_MAX:
            raise WorkDirError(
                f"the path {api_path[:60]!r}… is too long ({len(api_path):,} characters); "
                f"a path under the server root must stay under {PATH_MAX} bytes"
            )
        for part in pure.parts:
            if len(part.encode("utf-8", "replace")) > NAME_MAX:
                raise WorkDirError(
                    f"the folder or file name {part[:60]!r}… in the path is longer than "
                    f"{NAME_MAX} bytes; use a shorter name"
                )
            if not part.strip():
                raise WorkDirError(f"{api_path!r} has a blank folder name; name every folder")
            if part == "..":
                raise WorkDirError(f"{api_path!r} would leave the server root")
            if part.startswith(".") and not self.allow_hidden:
                raise WorkDirError(
                    f"{api_path!r} has a hidden component ({part!r}); Jupyter does not serve those"
                )
        try:
            return inside(self.root, PurePosixPath(*pure.parts) if pure.parts else "")
        except StorageError as exc:  # a link (ELOOP) or a file named as a folder (ENOTDIR)
            raise WorkDirError(
                f"{api_path!r} is refused: it leads through a symlink or a file below the "
                f"server root, which is never followed ({exc})"
            ) from None

    def _inside(self, real: Path) -> bool:
        """Whether an already resolved path is the root or below it."""
        return real == self.root or self.root in real.parents

    def contains(self, path: Path) -> bool:
        return self._inside(_lexical(path))

    def api_path(self, path: Path) -> str:
        """The API path of ``path`` (which must be inside the root; compared as written)."""
        real = _lexical(path)
        if not self._inside(real):
            raise WorkDirError(f"{path} is outside the server root")
        return real.relative_to(self.root).as_posix() if real != self.root else ""

    def url_of(self, api_path: str) -> str:
        """The server-relative URL at which Jupyter's file handler serves an API path."""
        return f"{self.base_url}files/{quote(api_path)}"

    def files_url(self, path: Path) -> str:
        """The server-relative URL at which Jupyter's file handler serves ``path``."""
        return self.url_of(self.api_path(path))


def _lexical(path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute and normalised as written (links are refused on the way in)."""
    return Path(os.path.normpath(os.path.abspath(path)))
