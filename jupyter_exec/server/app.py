"""JupyterExecApp: the jupyter_server extension that serves jupyter-exec sessions over REST.

A thin shell: configuration as traits (``c.JupyterExecApp.*`` in
``jupyter_server_config.py`` or ``--JupyterExecApp.*`` on the command line),
one :class:`~jupyter_exec.server.sessions.ServerSessions` in the web app's
settings, the handlers of ``handlers.py``, and a listener that lets the
session notebooks survive a person's saves from JupyterLab.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Float, Integer, Unicode

from jupyter_exec.server.handlers import SETTINGS_KEY, default_handlers
from jupyter_exec.server.sessions import ServerSessions

__all__ = ["JupyterExecApp"]

CONTENTS_EVENTS = "https://events.jupyter.org/jupyter_server/contents_service/v1"


class JupyterExecApp(ExtensionApp):
    """Stateful, recorded code execution on the server's kernels, under ``/api/exec``."""

    name = "jupyter_exec"
    load_other_extensions = True

    work_dir = Unicode(
        "jupyter-exec",
        help="Folder (relative to the server root) for sessions created without a work_dir. "
        "Each session's notebook and output files go there.",
    ).tag(config=True)

    kernel_name = Unicode(
        "python3", help="Kernelspec of sessions with backend 'local' that name no kernel_name."
    ).tag(config=True)

    docker_kernel_name = Unicode(
        "python3-docker",
        help="Kernelspec of sessions with backend 'docker' (runs jupyter-exec's Docker "
        "provisioner; install it with jupyter-exec's kernelspecs).",
    ).tag(config=True)

    timeout = Float(
        600.0,
        allow_none=True,
        help="Default seconds an execution may run before it is interrupted (None: no limit). "
        "A request can set its own.",
    ).tag(config=True)

    startup_timeout = Float(60.0, help="Seconds a new kernel has to answer.").tag(config=True)

    max_sessions = Integer(
        20, help="Most sessions at once (0: no limit); each holds a kernel."
    ).tag(config=True)

    sessions: ServerSessions

    def initialize_settings(self) -> None:
        """Create the sessions registry and listen for saves of session notebooks."""
        self.sessions = ServerSessions(
            self.serverapp,
            default_work_dir=self.work_dir,
            kernel_names={"local": self.kernel_name, "docker": self.docker_kernel_name},
            timeout=self.timeout,
            max_sessions=self.max_sessions,
            startup_timeout=self.startup_timeout,
        )
        self.settings[SETTINGS_KEY] = self.sessions
        assert self.serverapp is not None
        assert self.serverapp.event_logger is not None
        self.serverapp.event_logger.add_listener(
            schema_id=CONTENTS_EVENTS, listener=self._on_contents_event
        )

    def initialize_handlers(self) -> None:
        self.handlers.extend(default_handlers)

    async def _on_contents_event(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        """A notebook saved through the server (JupyterLab) may have dropped agent cells."""
        if data.get("action") == "save" and isinstance(data.get("path"), str):
            self.sessions.notebook_saved(data["path"])

    async def stop_extension(self) -> None:
        """Disconnect the sessions; the server shuts its kernels down itself."""
        await self.sessions.close()
