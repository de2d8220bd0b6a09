"""The JSON the REST API shows of sessions, checkpoints and executions.

The shapes are the OpenAPI spec's schemas (``Session``, ``Checkpoint``,
``Execution``); every path in them is an API path under the server root with
its ``/files/`` URL, never a host path, so a response tells a client nothing of
the server's disk beyond its root. Pure reads: nothing here changes a session.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.exceptions import JupyterExecError
from jupyter_exec.models import Execution
from jupyter_exec.server.entry import ServerSession
from jupyter_exec.server.listing import live_fields
from jupyter_exec.server.network import policy_model
from jupyter_exec.state.session_state import Checkpoint

if TYPE_CHECKING:
    from jupyter_exec.network import NetworkPolicy
    from jupyter_exec.server.paths import ServerRoot
    from jupyter_exec.server.saved import SavedSession

__all__ = ["Views"]


class Views:
    """The JSON models of :class:`~jupyter_exec.server.sessions.ServerSessions`."""

    serverapp: Any
    root: ServerRoot
    _sessions: dict[str, ServerSession]
    _dormant_cells: dict[str, int]

    if TYPE_CHECKING:  # provided by Sleeping (declared only)

        def sleeping_fields(self, session_id: str) -> dict[str, Any]: ...

        def policy_for_wake(self, session_id: str) -> NetworkPolicy | None: ...

    def model(self, entry: ServerSession) -> dict[str, Any]:
        """The JSON model of a session (the ``Session`` schema of the OpenAPI spec)."""
        notebook_api = self.root.api_path(entry.notebook)
        return {
            "id": entry.id,
            "name": entry.name,
            "backend": entry.backend,
            "kernel": {
                "id": entry.kernel_id,
                "name": entry.kernel_name,
                "alive": entry.kernel_id in self.serverapp.kernel_manager,
            },
            "owns_kernel": entry.kernel_id != entry.borrowed,
            "work_dir": self.root.api_path(entry.work_dir),
            "notebook": {"path": notebook_api, "url": self.root.url_of(notebook_api)},
            "jupyter_session_id": entry.jupyter_session_id,
            "created": entry.created,
            "cells": len(recorder) if (recorder := entry.session.recorder) is not None else 0,
            "busy": entry.session.busy,
            "parent": entry.parent,
            "forks": [f for f in entry.forks if f in self._sessions],
            "undo_steps": entry.session.options.undo_steps,
            "network": policy_model(entry.policy),
            "sleeping": entry.session.sleeping,
            **live_fields(entry, self.serverapp.kernel_manager),
        }

    def saved_model(self, saved: SavedSession) -> dict[str, Any]:
        """A session from before the server restarted, not used since: ``status: dormant``.

        It has no kernel yet (``kernel.id`` null); its first use brings it back. ``cells``
        counts its notebook's cells, read once (the panel polls the listing).
        """
        cells = self._dormant_cells.get(saved.id)
        if cells is None:
            cells = self._dormant_cells[saved.id] = _recorded_cells(self.root, saved.notebook)
        return {
            "id": saved.id,
            "name": saved.name,
            "backend": saved.backend,
            "kernel": {"id": None, "name": saved.kernel_name, "alive": False},
            "owns_kernel": True,
            "work_dir": saved.work_dir,
            "notebook": {"path": saved.notebook, "url": self.root.url_of(saved.notebook)},
            "jupyter_session_id": None,
            "created": saved.created,
            "cells": cells,
            "busy": False,
            "parent": None,
            "forks": [],
            "undo_steps": saved.undo_steps,
            "network": policy_model(self.policy_for_wake(saved.id)),
            "sleeping": False,
            "status": "dormant",
            "last_activity": None,
            "running": None,
            **self.sleeping_fields(saved.id),  # one this run put to sleep says so
        }

    def checkpoint_model(self, checkpoint: Checkpoint) -> dict[str, Any]:
        """A checkpoint as JSON (the ``Checkpoint`` schema); a durable one's file as an API path."""
        path = getattr(checkpoint, "path", None)
        shown = None
        if isinstance(path, (str, os.PathLike)):  # a checkpoint kept on disk
            with contextlib.suppress(JupyterExecError, ValueError):
                shown = self.root.api_path(Path(path))
        return {
            "name": checkpoint.name,
            "cell_index": checkpoint.cell_index,
            "created": checkpoint.created.isoformat(),
            "session": checkpoint.session,
            "path": shown,
        }

    def execution_model(self, execution: Execution) -> dict[str, Any]:
        """An Execution as JSON, with every file as its API path and ``/files/`` URL."""
        data = execution.to_dict()
        models: dict[Path, dict[str, str]] = {}  # saved outputs are also in execution.files

        def file(path: Path) -> dict[str, str]:
            if path not in models:
                models[path] = self._file(path)
            return dict(models[path])

        data["files"] = [file(p) for p in execution.files]
        data["spilled"] = [file(p) for p in execution.spilled]
        for result, out in zip(execution.results, data["results"], strict=True):
            out["files"] = {mime: file(path) for mime, path in result.files.items()}
        return data

    def _file(self, path: Path) -> dict[str, str]:
        api = self.root.api_path(path)
        return {"path": api, "url": self.root.url_of(api)}


def _recorded_cells(root: ServerRoot, notebook: str) -> int:
    """How many cells a dormant session's notebook holds (0 if it cannot be read now)."""
    from jupyter_exec.engine.recorder import read_notebook

    try:
        return len(read_notebook(root.resolve(notebook)).cells)
    except (JupyterExecError, OSError, ValueError):
        return 0
