"""The session's kernel as the session shows it, and the methods that restart or replace it.

A mixin of :class:`~jupyter_exec.AsyncSession`: the kernel's views (``kernel_id``,
``language``, ``is_alive``...) and its changes. Every change of the kernel goes
through the session's :class:`~jupyter_exec.engine.core.KernelSlot`, and the
session's hooks (:mod:`jupyter_exec.engine.hooks`) hear of it::

    restart()              before_restart ─► the slot counts a generation ─► the
                           kernel restarts ─► kernel_replaced("restart")
    a cell's kernel died   the slot marks it lost ─► kernel_lost: a hook may put a
      or ran away          kernel from a snapshot in (recovery); else a restart,
                           and kernel_replaced("lost") (the saved state loads)
    replace_kernel(k, r)   the state machinery's undo, restore and recovery
    adopt_kernel(k, ...)   a fork's new session, around the kernel forked for it
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.boundary.naming import files_folder
from jupyter_exec.engine.core import KernelSlot  # at run time: the API pages resolve the type
from jupyter_exec.engine.hooks import Hooks, KernelChange, KernelEvent, Replacement
from jupyter_exec.engine.kernel import KernelHandle, interrupt_kernel, restart_kernel
from jupyter_exec.exceptions import InvalidArgument, KernelNotAliveError, SessionClosedError
from jupyter_exec.session.readthrough import ReadThrough
from jupyter_exec.session.recording import Recording

if TYPE_CHECKING:
    from jupyter_exec.options import SessionOptions

__all__ = ["KernelMethods"]


class KernelMethods:
    """Interrupt, restart and replace the kernel; mixed into :class:`~jupyter_exec.AsyncSession`."""

    _slot: KernelSlot
    hooks: Hooks
    _options: SessionOptions
    _recording: Recording | None
    _closed: bool
    _work_dir: Path | None
    _name: str | None
    _notebook_path: Path | None
    _sleeping: bool

    async def wake(self) -> None:
        raise NotImplementedError

    @property
    def kernel_slot(self) -> KernelSlot:
        """The session's kernel, its execution lock and its generation (their one owner)."""
        return self._slot

    # Read-only views of the slot, under the names the engine's own code and tests read.

    _kernel = ReadThrough[KernelHandle | None]("_slot.kernel")
    _lock = ReadThrough[asyncio.Lock]("_slot.lock")
    _generation = ReadThrough[int]("_slot.generation")

    @property
    def kernel_id(self) -> str | None:
        return self._kernel.kernel_id if self._kernel else None

    @property
    def language_info(self) -> dict[str, Any]:
        return dict(self._kernel.kernel_info.get("language_info", {})) if self._kernel else {}

    @property
    def language(self) -> str:
        """What the session runs: ``python``, ``r``, ``bash``, ``javascript`` or ``typescript``
        as asked (``language=``), else the kernel's own ``language_info.name`` once started."""
        if self._options.language is not None:
            return self._options.language
        return self._kernel.language if self._kernel is not None else ""

    @property
    def is_alive(self) -> bool:
        """Whether the kernel process is running (a cheap check for local kernels)."""
        return self._kernel is not None and not self._closed and self._kernel.process_alive()

    async def check_alive(self) -> bool:
        """Ask the backend whether the kernel is alive (accurate for every backend)."""
        return self._kernel is not None and not self._closed and await self._kernel.is_alive()

    def _live_kernel(self) -> KernelHandle:
        if self._closed:
            raise SessionClosedError("the session is closed")
        kernel = self._slot.kernel
        if kernel is None:
            raise KernelNotAliveError(
                "the session has not been started (use `async with` or start())"
            )
        return kernel

    async def interrupt(self) -> None:
        """Interrupt the running cell (KeyboardInterrupt in the kernel); state is kept.
        A sleeping session runs nothing: nothing to do."""
        if self._sleeping and not self._closed:
            return
        await interrupt_kernel(self._live_kernel())

    async def restart(self, note: str = "restarted by request") -> None:
        """Restart the kernel (state is lost; a waiting cell notices); the next cell notes why.
        A sleeping session wakes first."""
        await self.wake()
        await self._restart(note, "restart")

    async def _restart(self, note: str, reason: Replacement) -> None:
        kernel = self._live_kernel()
        await self.hooks.before_restart(KernelEvent(kernel, note, self._slot.known_dead(kernel)))
        kernel = self._live_kernel()  # a hook may have put another in (a Docker session's first)
        self._slot.restarting()
        await restart_kernel(kernel, self._options.startup_timeout)
        self._slot.restarted(kernel)
        assert self._recording is not None
        self._recording.restart_note = note
        await self.hooks.kernel_replaced(KernelChange(reason, kernel, kernel))

    async def _restart_in_cell(self, note: str) -> None:
        """The runner's restart (a dead or runaway kernel): a hook may bring back the state
        from before the cell (an undo snapshot) instead of an empty kernel; else a restart,
        after which the hooks may load the newest saved state."""
        kernel = self._live_kernel()
        self._slot.mark_lost(kernel)
        if not await self.hooks.kernel_lost(KernelEvent(kernel, note, dead=True)):
            await self._restart(note, "lost")

    async def replace_kernel(self, new: KernelHandle, reason: Replacement) -> KernelHandle | None:
        """Make ``new`` serve the session (an undo's, a restore's or a recovery's kernel,
        started from a snapshot); the kernel it replaced, for the caller to retire.

        A cell still waiting on the old kernel ends (the generation changes), and
        the session's hooks hear of it (``kernel_replaced``). The state machinery
        calls this holding the session's lock (or from within a cell).
        """
        old = self._slot.swap(new)
        await self.hooks.kernel_replaced(KernelChange(reason, old, new))
        return old

    def adopt_kernel(
        self, kernel: KernelHandle, work_dir: Path, notebook_path: Path | None
    ) -> Recording:
        """Become a started session around ``kernel``, which the engine did not start (a
        fork's): its work dir, its name (the options') and its notebook are set as
        ``start()`` sets them. Returns its recording, for the caller to seed."""
        if self._closed:
            raise SessionClosedError("a closed session cannot adopt a kernel")
        if self._slot.kernel is not None:
            raise InvalidArgument("this session has a kernel already; only a new one adopts one")
        name = self._options.name
        assert name is not None
        self._work_dir, self._name, self._notebook_path = work_dir, name, notebook_path
        self._slot.place(kernel)
        self._recording = Recording(work_dir, files_folder(name), notebook_path)
        return self._recording
