"""Asking a kernel something silently, which backend runs it (as the host knows it), and
what is kept of an in-kernel half (:class:`InKernelHalf`): shared by the checkpoints
(``durable.py``) and the per-cell generations (``generations.py``)."""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.boundary import replies
from jupyter_exec.engine.installs import Installs, Outcome
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.exceptions import CheckpointError
from jupyter_exec.state.forking import container_of

if TYPE_CHECKING:
    from jupyter_exec.state.host import StateHost

__all__ = [
    "DONE_EXPRESSION",
    "INSTALL_TIMEOUT",
    "MAX_ASK_CHARS",
    "NAMES_EXPRESSION",
    "SAVE_TIMEOUT",
    "InKernelHalf",
    "ask",
    "kernel_folders",
    "kernel_origin",
    "user_names",
]

log = logging.getLogger("jupyter_exec")

INSTALL_TIMEOUT = 30.0
SAVE_TIMEOUT = 3600.0
"""Seconds a checkpoint may take to write or load (500 MB takes a few seconds)."""
MAX_ASK_CHARS = 8 << 20
"""One answer's raw text (a manifest, the names a load brought back): past 8 MiB, the
kernel's answer is not read (see :mod:`jupyter_exec.boundary.replies`)."""


class InKernelHalf:
    """What the checkpoints and the generations each keep of their in-kernel half: the
    kernel it is installed in, one that refused it, and why it is not there."""

    what = ""
    """What the session goes without when the half is refused, as the log says it."""

    def __init__(self) -> None:
        self.installed: KernelHandle | None = None
        """The kernel the in-kernel half is installed in (a new kernel needs it again)."""
        self.refused: KernelHandle | None = None
        """A kernel the in-kernel half could not be installed in (not asked again)."""
        self.unavailable: str | None = None

    def plan(self, session: StateHost, installs: Installs) -> None:
        """Add the in-kernel half to ``installs`` (unless its kernel has it or refused it)."""
        raise NotImplementedError

    async def ensure(self, session: StateHost, kernel: KernelHandle) -> bool:
        """Install the in-kernel half in ``kernel`` (once per kernel); whether it is there.
        A session's first cell installs it with the other helpers (:meth:`plan`)."""
        if self.installed is kernel:
            return True
        await Installs.alone(
            kernel, session.work_dir, lambda i: self.plan(session, i), quiet_death=False
        )
        return self.installed is kernel

    def took(self, outcome: Outcome, session: StateHost, kernel: KernelHandle, folder: str) -> bool:
        """Note an install's ``outcome`` in ``kernel``; whether the half is there now. A
        refusal is kept (and logged); once installed, the half's own ``folder`` in the work
        dir is the kernel's files, not the cells' doing: the recording skips it."""
        if outcome.refused:
            self.unavailable = outcome.refusal
            self.refused = kernel
            log.info("session %s: no %s: %s", session.name, self.what, self.unavailable)
        if not outcome.ok:
            return False
        self.installed = kernel
        recording = session._recording
        if recording is not None:
            recording.tracker.skip_dirs.add(str((session.work_dir / folder).absolute()))
        return True


def kernel_origin(kernel: KernelHandle) -> dict[str, str]:
    """The backend that runs ``kernel``, as the host knows it (never as the kernel says):
    ``local``; ``docker`` with its image; ``remote`` with the server's URL."""
    docker = container_of(kernel)
    if docker is not None:
        return {"backend": "docker", "image": str(docker.image_tag or docker.image or "")}
    manager = type(kernel.km)
    if manager.__module__.startswith(("jupyter_exec.remote", "jupyter_server.gateway")):
        rest = getattr(kernel.km, "rest", None)
        server = getattr(rest, "base_url", None)
        # The server as this host reached it (the session's own URL), never as the kernel
        # says: a remote kernel's state loads only into a kernel of the same server.
        return {"backend": "remote", "server": str(server)} if server else {"backend": "remote"}
    return {"backend": "local"}


def kernel_folders(session: StateHost, kernel: KernelHandle) -> list[Path]:
    """The host folders ``kernel`` can read: its work dir, and a Docker kernel's mounts."""
    folders = [session.work_dir]
    docker = container_of(kernel)
    if docker is not None:
        from jupyter_exec.docker.options import parse_volume

        for text in docker.volumes or ():
            with contextlib.suppress(ValueError):
                folders.append(Path(parse_volume(str(text)).source))
        if docker.network_proxy:
            folders.append(Path(docker.network_proxy))
    return folders


async def ask(kernel: KernelHandle, code: str, expression: str, timeout: float) -> Any:
    """Run ``code`` silently and evaluate ``expression`` (JSON text) after it; its value.

    The kernel's error, if any, becomes :class:`CheckpointError`, and so does an answer
    that is not one str of JSON within :data:`MAX_ASK_CHARS`.
    """
    content = await kernel.run_silent(
        code,
        time.monotonic() + timeout,
        expressions={"r": expression},
        died="the kernel died while handling a checkpoint",
    )
    if content is None:
        raise CheckpointError(f"the kernel did not answer within {timeout:.0f} s")
    found = (content.get("user_expressions") or {}).get("r") or {}
    if content.get("status") != "ok":
        found = content
    if found.get("status") != "ok":
        raise CheckpointError(
            f"the kernel could not do it: {replies.printable(found.get('ename', 'error'), 100)}: "
            f"{replies.printable(found.get('evalue', 'no answer'))}"
        )
    text = replies.answer_str({"r": found}, "r", MAX_ASK_CHARS)
    value = None if text is None else replies.decode_json(text, MAX_ASK_CHARS)
    if value is None and text != "null":
        raise CheckpointError("the kernel's answer could not be read")
    return value


DONE_EXPRESSION = "'1'"
"""What a call asks back when only its success matters (a str of JSON, as every answer)."""


NAMES_EXPRESSION = "__import__('json').dumps(sorted(get_ipython().run_line_magic('who_ls', '')))"
"""The user's names in a kernel's namespace (IPython's own hidden ones left out), as JSON."""


async def user_names(kernel: KernelHandle, timeout: float = 10.0) -> tuple[str, ...]:
    """The names in ``kernel``'s user namespace, asked silently (empty if it does not say)."""
    content = await kernel.run_silent(
        "", time.monotonic() + timeout, expressions={"names": NAMES_EXPRESSION}
    )
    if content is None:
        return ()
    names = replies.answer(content.get("user_expressions"), "names", MAX_ASK_CHARS)
    return tuple(str(n) for n in names) if isinstance(names, list) else ()
