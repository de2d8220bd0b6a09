"""JupyterExecApp: the jupyter_server extension that serves jupyter-exec sessions over REST.

A thin shell: configuration as traits (``c.JupyterExecApp.*`` in
``jupyter_server_config.py`` or ``--JupyterExecApp.*`` on the command line),
one :class:`~jupyter_exec.server.sessions.ServerSessions` in the web app's
settings, the handlers of ``handlers.py``, and a listener that lets the
session notebooks survive a person's saves from JupyterLab.

The sessions are held by an :class:`~jupyter_exec.manager.AsyncSessionManager`,
a configurable child of this app, so its limits and idle culling are set as
``c.AsyncSessionManager.max_sessions``, ``.max_sessions_per_backend``,
``.cull_idle_timeout`` and ``.cull_interval`` in the same config file.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Float, Integer, Unicode, observe

from jupyter_exec.manager import AsyncSessionManager
from jupyter_exec.server.handlers import SETTINGS_KEY, default_handlers
from jupyter_exec.server.refusals import translate_refusals
from jupyter_exec.server.sessions import ServerSessions

__all__ = ["JupyterExecApp"]

CONTENTS_EVENTS = "https://events.jupyter.org/jupyter_server/contents_service/v1"


class JupyterExecApp(ExtensionApp):
    """Stateful, recorded code execution on the server's kernels, under ``/api/exec``."""

    name = "jupyter_exec"
    load_other_extensions = True
    classes = [*ExtensionApp.classes, AsyncSessionManager]  # its options in --help-all

    work_dir = Unicode(
        "jupyter-exec",
        help="Parent folder (relative to the server root) of the folders of sessions created "
        "without a work_dir: each such session gets a new folder of its own, "
        "<work_dir>/<session name>, for its notebook and output files (never one another "
        "session used, so no Docker kernel can leave files for a local one).",
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

    approval_timeout = Float(
        120.0,
        help="Seconds a Docker kernel's request to a host its network policy leaves to a "
        'person ("ask": true) waits as a pending approval (GET /api/exec/approvals) before '
        "it is denied.",
    ).tag(config=True)

    max_sessions = Integer(
        20,
        help="Most sessions at once (0: no limit); each holds a kernel. Sets the session "
        "manager's limit unless c.AsyncSessionManager.max_sessions is set (which then wins).",
    ).tag(config=True)

    sessions: ServerSessions
    manager: AsyncSessionManager

    def initialize_settings(self) -> None:
        """Create the session manager and registry; listen for saves of session notebooks."""
        self.manager = self._make_manager()
        self.sessions = ServerSessions(
            self.serverapp,
            manager=self.manager,
            default_work_dir=self.work_dir,
            kernel_names={"local": self.kernel_name, "docker": self.docker_kernel_name},
            timeout=self.timeout,
            startup_timeout=self.startup_timeout,
            approval_timeout=self.approval_timeout,
        )
        self.settings[SETTINGS_KEY] = self.sessions
        assert self.serverapp is not None
        translate_refusals(self.serverapp.kernel_manager)
        assert self.serverapp.event_logger is not None
        self.serverapp.event_logger.add_listener(
            schema_id=CONTENTS_EVENTS, listener=self._on_contents_event
        )

    def _make_manager(self) -> AsyncSessionManager:
        """The extension's session manager: configured as ``c.AsyncSessionManager.*``.

        A few traits are fixed here rather than taken from the config: the
        server handles SIGTERM and stops extensions itself (``handle_sigterm``
        off), and warm pools cannot serve the extension, whose kernels must
        come from the server's kernel manager (so they show in /api/kernels
        and JupyterLab), so no pooled kernel is started to sit unused.
        """
        assert self.serverapp is not None
        mine = _config_of(self, "AsyncSessionManager")
        fixed: dict[str, Any] = {
            "handle_sigterm": False,
            "pool_size": 0,
            "pools": [],
            "zygote_size": 0,
        }
        if "max_sessions" not in mine:
            fixed["max_sessions"] = self.max_sessions
        if mine.get("pool_size") or mine.get("pools") or mine.get("zygote_size"):
            self.log.warning(
                "jupyter-exec: c.AsyncSessionManager pools (and zygote_size) are ignored by "
                "the server extension: "
                "its sessions run on the Jupyter server's own kernels"
            )
        return AsyncSessionManager(parent=self, root_dir=self.serverapp.root_dir, **fixed)

    @observe("max_sessions")
    def _max_sessions_changed(self, change: dict[str, Any]) -> None:
        manager = getattr(self, "manager", None)
        if manager is not None:
            manager.max_sessions = change["new"]

    def initialize_handlers(self) -> None:
        self.handlers.extend(default_handlers)

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Start the session manager (its culler) once the server's event loop runs."""
        await self.sessions.start()

    async def _on_contents_event(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        """A notebook saved through the server (JupyterLab) may have dropped agent cells."""
        if data.get("action") == "save" and isinstance(data.get("path"), str):
            self.sessions.notebook_saved(data["path"])

    async def stop_extension(self) -> None:
        """Stop the manager, disconnecting the sessions; the server shuts its kernels down."""
        await self.sessions.close()


def _config_of(app: ExtensionApp, name: str) -> dict[str, Any]:
    """What the config sets for the child class ``name``: ``c.<name>.*``, or scoped to the app."""
    found = dict(app.config.get(name) or {})
    found.update(app.config.get(type(app).__name__, {}).get(name) or {})
    return found
