"""The environment a session ran in, kept in its notebook: ``metadata.jupyter_exec.environment``.

::

    session start ─► the kernelspec, the backend and, for a Docker kernel, the image
                     (tag and id, asked of the engine) ─► environment (static part)
    first cell    ─► inkernel_env installed in the kernel (once per kernel process, in the
                     one silent request of every helper: engine.installs): the
                     baseline of modules and an ``open`` audit hook
    every cell    ─► a user_expressions entry returns what changed (interpreter,
                     platform, packages the cells imported, sha256 of work-dir files
                     they read) ─► merged into the notebook metadata, saved with the cell

Replay reads it back (:mod:`jupyter_exec.notebook.envdiff`) and says what differs here
before it runs anything. The in-kernel half is :mod:`jupyter_exec.inkernel.env`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from jupyter_exec.boundary import replies
from jupyter_exec.engine.installs import Installs, Outcome
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.inkernel import Install
from jupyter_exec.inkernel import env as inkernel_env

__all__ = ["EXPRESSION_KEY", "docker_image", "expressions", "install", "merge", "parse", "plan"]

log = logging.getLogger("jupyter_exec")

EXPRESSION_KEY = "jupyter_exec_environment"
_EXPRESSION = f"__import__('sys').modules[{inkernel_env.MODULE!r}].report()"
_INSTALL_TIMEOUT = 30.0
MAX_REPORT_CHARS = 1 << 20
"""A kernel's report longer than this is ignored (the kernel said something else)."""
MAX_ENTRIES = 1000
"""At most this many packages, and files, are kept in the record."""


_CALL = "install(__import__('os').getcwd())"


async def install(kernel: KernelHandle) -> bool:
    """Install the capture in ``kernel`` once per kernel process; whether it is active.

    A kernel that cannot take it (not Python) runs without it: its notebook then
    records only what the host knows (kernelspec, backend, image). A session installs
    it with the other helpers, in one request (:func:`plan`); this asks alone.
    """
    if kernel.environment_capture is not None:
        return kernel.environment_capture
    await Installs.alone(kernel, None, plan, _INSTALL_TIMEOUT)  # a death: not active
    return bool(kernel.environment_capture)


def plan(installs: Installs) -> None:
    """Add the capture to ``installs`` unless its kernel decided already."""
    kernel = installs.kernel
    if kernel.environment_capture is not None:
        return
    if not kernel.runs_ipython:  # the capture is Python source: never sent to another kernel
        kernel.environment_capture = False
        return

    def done(outcome: Outcome) -> None:
        kernel.environment_capture = outcome.ok
        if not outcome.ok:
            log.debug("kernel %s runs without the environment capture", kernel.kernel_id)

    installs.add(Install("environment", inkernel_env.__file__, inkernel_env.MODULE, _CALL), done)


async def expressions(kernel: KernelHandle) -> dict[str, str]:
    """The ``user_expressions`` entry a cell carries (empty when the kernel has no capture)."""
    return {EXPRESSION_KEY: _EXPRESSION} if await install(kernel) else {}


def parse(user_expressions: Mapping[str, Any]) -> dict[str, Any] | None:
    """The environment a cell's reply reported; None when unchanged or not reported."""
    report = replies.answer(user_expressions, EXPRESSION_KEY, MAX_REPORT_CHARS)
    return report if isinstance(report, dict) else None


def _strings(value: Any, limit: int) -> dict[str, str]:
    """Up to ``limit`` entries of ``value`` that map a short string to a short string."""
    if not isinstance(value, Mapping):
        return {}
    found = {
        k: v
        for k, v in value.items()
        if isinstance(k, str) and isinstance(v, str) and len(k) <= 300 and len(v) <= 300
    }
    return dict(sorted(found.items())[:limit])


def merge(current: Mapping[str, Any], reported: Mapping[str, Any]) -> dict[str, Any]:
    """The notebook's environment with a kernel's report in it (packages and files add up).

    The report is the kernel's word (a Docker kernel is untrusted): only short strings
    are kept, at most :data:`MAX_ENTRIES` per table, so it cannot swell the notebook.
    """
    out = dict(current)
    for key in ("interpreter", "platform"):
        if isinstance(reported.get(key), Mapping):
            out[key] = _strings(reported[key], 10)
    for key in ("packages", "files"):
        if isinstance(reported.get(key), Mapping):
            merged = _strings(out.get(key), MAX_ENTRIES)  # what is recorded stays
            for name, value in _strings(reported[key], MAX_ENTRIES).items():
                if name in merged or len(merged) < MAX_ENTRIES:
                    merged[name] = value
            out[key] = dict(sorted(merged.items()))
    return out


async def docker_image(kernel: KernelHandle) -> dict[str, str] | None:
    """The image a Docker kernel runs (its tag and id, from the engine); None for others."""
    from jupyter_exec.state.forking import container_of

    provisioner = container_of(kernel)
    if provisioner is None:
        return None
    tag = str(provisioner.image_tag or "")
    container_id = provisioner.container_id
    if container_id is None:
        return {"tag": tag} if tag else None

    def ask() -> str:
        client = provisioner.docker_client()
        return str(client.containers.get(container_id).attrs.get("Image", ""))

    try:
        image_id = await asyncio.to_thread(ask)
    except Exception as exc:  # the docker SDK raises assorted types; the id is a nicety
        log.debug("could not read the image id of container %s: %s", container_id, exc)
        return {"tag": tag} if tag else None
    return {"tag": tag, "id": image_id}
