"""Which kernel a REST replay runs a notebook on, decided from what the server itself saw.

A notebook's ``kernelspec`` is written by whoever writes the file, and a Docker
kernel can write every file in its work dir: trusting it would let a container
name the host's ``python3`` for the next replay of its notebook, and so run its
cells on the host. So the server remembers, for every session it started (forks
included), the notebook it recorded and, for a Docker session, its work dir,
with the kernelspec each ran; a replay that names no ``kernel_name`` runs:

* a notebook a session recorded: on that session's kernelspec;
* any other notebook in a Docker session's work dir: on that session's (Docker)
  kernelspec, whatever the file says;
* anything else: on the notebook's own kernelspec (a person's notebook), else
  the server's local default.

A request that names ``kernel_name`` is the person's own choice and is followed.
What the server saw is kept for its life (a restarted server has seen nothing).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jupyter_exec.server.entry import ServerSession

__all__ = ["ReplayOrigins"]


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


@dataclass
class ReplayOrigins:
    """The kernelspecs of the notebooks and Docker work dirs of this server's sessions."""

    notebooks: dict[Path, str] = field(default_factory=dict)
    docker_dirs: dict[Path, str] = field(default_factory=dict)

    def remember(self, entry: ServerSession) -> None:
        """Note a session the server started (called as it is added)."""
        self.notebooks[_real(entry.notebook)] = entry.kernel_name
        if entry.backend == "docker":
            self.docker_dirs[_real(entry.work_dir)] = entry.kernel_name

    def kernel_for(self, notebook: Path, named_in_file: str | None) -> str | None:
        """The kernelspec to replay ``notebook`` on (None: the server's local default)."""
        real = _real(notebook)
        if real in self.notebooks:
            return self.notebooks[real]
        for folder, kernel_name in self.docker_dirs.items():
            if real.is_relative_to(folder):
                return kernel_name
        return named_in_file
