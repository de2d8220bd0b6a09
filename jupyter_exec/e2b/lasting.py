"""How the E2B server's sandboxes outlive it: a mixin of ``Sandboxes`` (e2b/sandboxes.py).

Loading the sandboxes of the root from before a restart (no kernel started),
giving a new sandbox a token derived from the host key and a salt (so it opens
the sandbox again after a restart; :mod:`jupyter_exec.e2b.saved`), keeping its
entry up to date (its lifecycle and whether it is paused included), and resuming
its default context's notebook on first use (the manager's
:class:`~jupyter_exec.manager.dormant.DormantSessions`, shared with the REST and MCP
servers: a sandbox's default context is dormant until then).
"""

from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.e2b.saved import SandboxRegistry, SavedSandbox
from jupyter_exec.exceptions import JupyterExecError
from jupyter_exec.manager import AsyncSessionManager
from jupyter_exec.manager.dormant import DormantSessions, resume_into

if TYPE_CHECKING:
    from jupyter_exec.e2b.sandboxes import Context, Sandbox

__all__ = ["Lasting"]

log = logging.getLogger("jupyter_exec.e2b")


class Lasting:
    """Sandboxes across restarts; see the module docstring."""

    manager: AsyncSessionManager
    saved: SandboxRegistry | None
    dormant: DormantSessions[tuple[Sandbox, Path]] | None = None
    """Default contexts from before a restart, by session name: their sandbox and notebook."""
    _notebooks: dict[str, str]
    """Sandbox id -> its default context's notebook stem, as last saved."""

    # Provided by Sandboxes.
    def _new(self, sandbox_id: str, token: str | None, **fields: Any) -> Sandbox:
        raise NotImplementedError

    def _options(self, sandbox: Sandbox) -> dict[str, Any]:
        raise NotImplementedError

    def load(self) -> None:
        """The sandboxes of this root from before a restart (once the manager has started).

        No kernel starts here: a sandbox's default context resumes on first use.
        One whose end has passed is forgotten instead.
        """
        self.saved = SandboxRegistry(self.manager.root)
        now = time.time()
        dormant: dict[str, tuple[Sandbox, Path]] = {}
        for saved in self.saved.load():
            if saved.end is not None and saved.end <= now:
                self.saved.remove(saved.id)
                continue
            try:
                token = self.saved.token(saved.id, saved.salt)
            except JupyterExecError as exc:
                log.warning("sandbox %s cannot come back: %s", saved.id, exc)
                continue
            sandbox = self._new(
                saved.id, token, template=saved.template, metadata=saved.metadata,
                started=saved.started, end=saved.end, salt=saved.salt,
                on_timeout=saved.on_timeout, pause_memory=saved.pause_memory,
                auto_resume=saved.auto_resume, paused=saved.paused,
            )  # fmt: skip
            self._notebooks[saved.id] = saved.notebook
            notebook = self.manager.root / saved.id / f"{saved.notebook}.ipynb"
            dormant[saved.id] = (sandbox, notebook)  # its default context's session
            log.info("sandbox %s: back from before the restart", saved.id)
        self.dormant = DormantSessions(
            dormant,
            wake=self._wake,
            forget=lambda _: None,  # the sandbox's entry stays: it is awake, not gone
            live=self.manager.__contains__,
        )

    def _token(self, sandbox_id: str) -> tuple[str, str | None]:
        """A new sandbox's token and salt: derived, so it works after a restart too."""
        if self.saved is not None:
            salt = self.saved.new_salt()
            try:
                return self.saved.token(sandbox_id, salt), salt
            except JupyterExecError as exc:
                log.warning("sandbox %s will not outlive the server: %s", sandbox_id, exc)
        return secrets.token_urlsafe(24), None

    def _remember(self, sandbox: Sandbox) -> None:
        """Keep (or update) the sandbox's entry; only one whose token is derived."""
        if self.saved is None or sandbox.salt is None:
            return
        if sandbox.id in self.manager:
            path = self.manager.get(sandbox.id).notebook_path
            if path is not None:
                self._notebooks[sandbox.id] = path.stem
        notebook = self._notebooks.get(sandbox.id)  # (its context closed: a pause without memory)
        if notebook is None:
            return
        self.saved.save(
            SavedSandbox(
                id=sandbox.id, template=sandbox.template, metadata=dict(sandbox.metadata),
                started=sandbox.started, end=sandbox.end, notebook=notebook,
                salt=sandbox.salt, on_timeout=sandbox.on_timeout,
                pause_memory=sandbox.pause_memory, auto_resume=sandbox.auto_resume,
                paused=sandbox.paused,
            )
        )  # fmt: skip

    async def _resumed(self, sandbox: Sandbox, context: Context) -> None:
        """The default context of a sandbox from before the restart: its notebook resumed."""
        if self.dormant is not None:
            await self.dormant.wake(context.session_name)

    async def _wake(self, dormant: tuple[Sandbox, Path]) -> None:
        sandbox, notebook = dormant
        options = self._options(sandbox)
        backend = {**self.manager.session_defaults, **options}.get("backend")
        await resume_into(
            self.manager, sandbox.id, notebook, options, backend=str(backend or "local")
        )
