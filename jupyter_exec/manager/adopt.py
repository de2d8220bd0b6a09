"""A session on a pooled kernel: its folder renamed to the session's work dir, its preload recorded.

Both kinds of pool hand out a :class:`~jupyter_exec.manager.pool.WarmKernel`
(a kernel manager and the folder the kernel works in). The session gets that
folder as its work dir by a rename (see :mod:`jupyter_exec.manager.pool`) and
attaches to the kernel, owning it from then on. A kernel forked from a zygote
also started with the zygote's preload: the session's notebook says so in its
metadata (``jupyter_exec.preload``) and, when there was setup code, keeps it as
a first cell (metadata ``jupyter_exec.preload: true``), so a replay or a resume
of the notebook runs it before the session's own cells.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from jupyter_exec.manager.pool import WarmKernel, discard, follow_rename
from jupyter_exec.options import SessionOptions
from jupyter_exec.session.session import AsyncSession

__all__ = ["adopt", "record_preload"]

log = logging.getLogger("jupyter_exec.manager")


async def adopt(
    warm: WarmKernel, target: Path, session_name: str, opts: dict[str, Any]
) -> AsyncSession | None:
    """A started session on ``warm``'s kernel in ``target``; ``None`` if the kernel is unusable
    (it is then stopped, and the caller starts another way)."""
    if warm.folder is not None:
        try:
            os.rename(warm.folder, target)
        except OSError as exc:
            log.warning("cannot move pooled kernel dir to %s (%s); starting fresh", target, exc)
            await discard(warm)
            return None
        follow_rename(warm.km, target)
    options = {**opts, "work_dir": target, "name": session_name}
    session = AsyncSession(
        options=SessionOptions.from_mapping(
            {**options, "kernel_manager": warm.km, "owns_kernel": True}
        )
    )
    try:
        await session.start()
    except Exception as exc:
        log.warning("pooled kernel unusable (%s); starting a fresh one", exc)
        with contextlib.suppress(Exception):
            await session.close()
        await discard(WarmKernel(warm.km, None))
        return None
    if warm.preload is not None:
        record_preload(session, warm.preload)
    return session


def record_preload(session: AsyncSession, preload: Any) -> None:
    """Say in ``session``'s notebook what its kernel ran before its first cell."""
    ours = dict(session.notebook_metadata.get("jupyter_exec") or {})
    if not ours and session.notebook_path is None:
        return  # recording is off
    ours["preload"] = preload.record()
    session.set_notebook_metadata("jupyter_exec", ours)
    cell = preload.cell()
    if cell is not None:
        session.record_cell(cell)
