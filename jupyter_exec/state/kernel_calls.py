"""Asking a kernel something silently, and which backend runs it (as the host knows it):
shared by the checkpoints (``durable.py``) and the per-cell generations (``generations.py``)."""

from __future__ import annotations

import ast
import contextlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.exceptions import CheckpointError
from jupyter_exec.state.forking import container_of

if TYPE_CHECKING:
    from jupyter_exec.state.host import StateHost

__all__ = [
    "INSTALL_TIMEOUT",
    "SAVE_TIMEOUT",
    "ask",
    "kernel_folders",
    "kernel_origin",
    "user_names",
]

INSTALL_TIMEOUT = 30.0
SAVE_TIMEOUT = 3600.0
"""Seconds a checkpoint may take to write or load (500 MB takes a few seconds)."""


def kernel_origin(kernel: KernelHandle) -> dict[str, str]:
    """The backend that runs ``kernel``, as the host knows it (never as the kernel says)."""
    docker = container_of(kernel)
    if docker is not None:
        image = getattr(docker, "_image_tag", "") or getattr(docker, "image", "")
        return {"backend": "docker", "image": str(image or "")}
    manager = type(kernel.km)
    if manager.__module__.startswith(("jupyter_exec.remote", "jupyter_server.gateway")):
        return {"backend": "remote"}
    return {"backend": "local"}


def kernel_folders(session: StateHost, kernel: KernelHandle) -> list[Path]:
    """The host folders ``kernel`` can read: its work dir, and a Docker kernel's mounts."""
    folders = [session.work_dir]
    docker = container_of(kernel)
    if docker is not None:
        from jupyter_exec.docker.options import parse_volume

        for text in getattr(docker, "volumes", None) or ():
            with contextlib.suppress(ValueError):
                folders.append(Path(parse_volume(str(text)).source))
        proxy = getattr(docker, "network_proxy", "")
        if proxy:
            folders.append(Path(proxy))
    return folders


async def ask(kernel: KernelHandle, code: str, expression: str, timeout: float) -> Any:
    """Run ``code`` silently and evaluate ``expression`` (JSON text) after it; its value.

    The kernel's error, if any, becomes :class:`CheckpointError`.
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
            f"the kernel could not do it: {found.get('ename', 'error')}: "
            f"{found.get('evalue', 'no answer')}"
        )
    try:
        value = ast.literal_eval(found["data"]["text/plain"])
        return json.loads(value) if isinstance(value, str) else value
    except (KeyError, ValueError, SyntaxError, TypeError):
        raise CheckpointError("the kernel's answer could not be read") from None


NAMES_EXPRESSION = "sorted(get_ipython().run_line_magic('who_ls', ''))"
"""The user's names in a kernel's namespace (IPython's own hidden ones left out)."""


async def user_names(kernel: KernelHandle, timeout: float = 10.0) -> tuple[str, ...]:
    """The names in ``kernel``'s user namespace, asked silently (empty if it does not say)."""
    content = await kernel.run_silent(
        "", time.monotonic() + timeout, expressions={"names": NAMES_EXPRESSION}
    )
    if content is None:
        return ()
    found = (content.get("user_expressions") or {}).get("names") or {}
    try:
        names = ast.literal_eval((found.get("data") or {}).get("text/plain", "[]"))
    except (ValueError, SyntaxError):
        return ()
    return tuple(str(n) for n in names) if isinstance(names, list) else ()
