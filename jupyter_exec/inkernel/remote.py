"""Code that runs inside a remote kernel: where it runs, and which files its cells wrote.

Why in the kernel: a kernel behind a gateway works in a folder on another
machine, and the gateways (Kernel Gateway, Enterprise Gateway) have no file
API. The kernel itself can say what changed in its working directory and
send the bytes, over the same websocket its outputs take.

Installed once per kernel process (:func:`jupyter_exec.engine.remote_files.install`),
it takes a first snapshot of the working directory (names, sizes, mtimes) and
answers three calls, each a ``user_expressions`` entry:

* :func:`where` - the host the kernel runs on: ``$JUPYTER_EXEC_HOST`` (set by
  jupyter-exec's gateway launcher to the host as the gateway named it), else the
  machine's host name;
* :func:`changes` - a JSON list of ``[relative path, size]`` of regular files
  created or modified since the last call (hidden names, links and bulky folders
  such as ``__pycache__`` left out; at most :data:`MAX_ENTRIES` files looked at),
  ``""`` when nothing changed, so most cells pay one folder scan and nothing more;
* :func:`read` - ``size`` bytes of one of those files from ``offset``, base64.

Only the standard library; no name is left in the user's namespace (the module
lives in ``sys.modules`` under :data:`MODULE`).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import stat
from collections.abc import Collection

MODULE = "_jupyter_exec_remote"
MAX_ENTRIES = 20_000
SKIP_DIRS = frozenset(
    {"__pycache__", "node_modules", ".git", ".ipynb_checkpoints", ".venv", "venv", "site-packages"}
)

_root = ""
_last: dict[str, tuple[int, int]] = {}


def install(root: str) -> str:
    """Remember ``root`` (the kernel's working directory) and what is in it now."""
    global _root, _last
    _root = os.path.abspath(root)
    _last = _scan()
    return where()


def where() -> str:
    return os.environ.get("JUPYTER_EXEC_HOST") or socket.gethostname()


def scan(
    root: str, max_entries: int, skip_paths: Collection[str] = ()
) -> dict[str, tuple[int, int]]:
    """Path -> ``(mtime_ns, size)`` of the regular files below ``root``, at most
    ``max_entries``: hidden names, links, :data:`SKIP_DIRS` and the folders ``skip_paths``
    are not entered. The host's tracker of a work dir walks it the same way
    (:class:`jupyter_exec.engine.store.WorkDirTracker`)."""
    found: dict[str, tuple[int, int]] = {}
    stack = [root]
    while stack and len(found) < max_entries:
        folder = stack.pop()
        try:
            entries = os.scandir(folder)
        except OSError:
            continue
        with entries:
            for entry in entries:
                if len(found) >= max_entries:
                    break
                if entry.name.startswith("."):
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in SKIP_DIRS and entry.path not in skip_paths:
                            stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        found[entry.path] = (st.st_mtime_ns, st.st_size)
                except OSError:
                    continue
    return found


def _scan() -> dict[str, tuple[int, int]]:
    return {os.path.relpath(path, _root): stamp for path, stamp in scan(_root, MAX_ENTRIES).items()}


def changes() -> str:
    """The files created or modified since the last call, as JSON (``""``: none)."""
    global _last
    if not _root:
        return ""
    current = _scan()
    previous, _last = _last, current
    changed = [[name, stamp[1]] for name, stamp in current.items() if previous.get(name) != stamp]
    changed.sort()
    return json.dumps(changed) if changed else ""


def read(relative: str, offset: int, size: int) -> str:
    """``size`` bytes of ``relative`` from ``offset``, base64 (``""`` past the end).

    Only a regular file below the root, reached without following a link at its end.
    """
    path = os.path.join(_root, relative)
    if os.path.isabs(relative) or ".." in relative.split(os.sep):
        raise ValueError(f"{relative!r} is not below the kernel's working directory")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not _is_regular(fd):
            raise ValueError(f"{relative!r} is not a regular file")
        os.lseek(fd, offset, os.SEEK_SET)
        return base64.b64encode(os.read(fd, size)).decode("ascii")
    finally:
        os.close(fd)


def _is_regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)
