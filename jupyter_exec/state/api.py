"""The state API of a session: ``fork``, ``undo``, ``checkpoint``, ``restore``, ``checkpoints``,
``flush``.

A mixin of :class:`~jupyter_exec.AsyncSession`; the work is done by the
session's state object (:class:`~jupyter_exec.state.host.StateOperations`) and by
:func:`~jupyter_exec.state.branching.fork_session`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TypeVar

from jupyter_exec.exceptions import CheckpointError, ForkError, JupyterExecError
from jupyter_exec.state.branching import fork_session
from jupyter_exec.state.checkpoints import Checkpoint

if TYPE_CHECKING:
    from jupyter_exec.state.host import ForkHost, StateHost

__all__ = ["PYTHON_ONLY", "StateMethods", "refuse_other_languages"]

PYTHON_ONLY = ("fork", "undo", "checkpoint", "restore")
"""What only an IPython kernel can do: each is Python run inside the kernel."""

H = TypeVar("H", bound="ForkHost")
"""The session this API is mixed into: whatever class it is, it has the shape of a ForkHost."""


def refuse_other_languages(
    session: StateHost, what: str, error: type[JupyterExecError] = ForkError
) -> None:
    """Raise ``error`` saying so when ``session``'s kernel is not IPython (R, Bash, Deno...).

    The kernel's own ``runs_ipython`` decides, as it does for the stream guard
    and durable state; a session not started yet is left to the call itself.
    """
    kernel = session.kernel_slot.kernel
    if kernel is None or not kernel.kernel_info or kernel.runs_ipython:
        return
    raise error(
        f"{what} needs an IPython kernel; this session's kernel runs "
        f"{kernel.language or 'another language'!r}. Only Python sessions have "
        f"{', '.join(PYTHON_ONLY)}: each is Python run inside the kernel"
    )


class StateMethods:
    """The session API of this module, mixed into :class:`~jupyter_exec.AsyncSession`."""

    async def fork(self: H, n: int = 1, name: str | None = None) -> list[H]:
        """``n`` new sessions, each starting from this session's live state; this one goes on.

        Each has its own kernel (a copy-on-write fork: ~0.2 s, memory shared
        until written), the same work dir, and its own notebook (``<name>.ipynb``)
        and files folder: ``name`` (``<name>-<k>`` when ``n`` > 1), default
        ``<this name>-fork-<k>``. The notebook starts with this session's cells
        and says where it branched (metadata ``jupyter_exec.fork``). Waits for a
        running cell. Raises :class:`~jupyter_exec.ForkError` for a kernel that
        cannot fork (remote, not IPython, CUDA initialised) and
        :class:`~jupyter_exec.KernelNotAliveError` for a dead one. Close the
        forks yourself; a Docker session's forks share its container and end with it.
        """
        await self.wake()  # a sleeping session wakes first
        refuse_other_languages(self, "fork()")
        return await fork_session(self, n, name)

    async def undo(self: H, n: int = 1) -> None:
        """Go back to the state before the last ``n`` cells (needs ``undo_steps`` >= ``n``).

        The kernel is replaced by one started from the snapshot taken before
        those cells (~0.2 s); they stay in the notebook, marked undone
        (``jupyter_exec.undone``), so replay and resume skip them. Works after
        the kernel died, too. Asking for more steps than are kept raises
        :class:`~jupyter_exec.InvalidArgument` saying how many are available.
        """
        await self.wake()  # a sleeping session wakes first
        refuse_other_languages(self, "undo()")
        await self._state.undo(self, n)

    async def checkpoint(self: H, name: str | None = None) -> Checkpoint:
        """Remember the current state under ``name`` (default ``checkpoint-<k>``).

        In memory, a frozen copy-on-write snapshot of the kernel, kept until the
        session closes; on disk, the namespace written by the kernel to
        ``<work dir>/.<session>_checkpoints/<name>/`` (one file per variable, a
        manifest with checksums). What cannot be pickled is skipped and named in
        ``Checkpoint.skipped``. :meth:`restore` goes back to it any number of times.
        """
        await self.wake()  # a sleeping session wakes first
        refuse_other_languages(self, "checkpoint()", CheckpointError)
        return await self._state.checkpoint(self, name)

    async def restore(
        self: H,
        checkpoint: Checkpoint | str | os.PathLike[str],
        *,
        force: bool = False,
        trust_origin: bool = False,
    ) -> None:
        """Go back to ``checkpoint`` (a Checkpoint, its name, or its folder on disk).

        From its snapshot when this session still has it (~0.2 s), else loaded
        from disk into the kernel, checked whole first: a damaged or partial
        checkpoint, or one from another environment (Python major.minor, a
        stored library's version), raises :class:`~jupyter_exec.CheckpointError`
        naming the fault; ``force=True`` loads one from another environment
        anyway. Every checkpoint on disk must carry this host's MAC (one forged or
        altered in any byte is refused). One written by a Docker (or remote) kernel
        is refused for a session whose kernel runs on this host, since loading
        unpickles what that kernel wrote: ``trust_origin=True`` loads it anyway,
        for a container whose code you trust (Docker into Docker needs no flag).
        Cells recorded after it are marked undone in the notebook; the restore is
        noted in the notebook's metadata and on the next cell.
        """
        await self.wake()  # a sleeping session wakes first
        refuse_other_languages(self, "restore()", CheckpointError)
        await self._state.restore(self, checkpoint, force, trust_origin)

    def checkpoints(self: H) -> list[Checkpoint]:
        """This session's checkpoints (those on disk from earlier runs too), oldest first."""
        return self._state.list_checkpoints(self)

    async def flush(self: H) -> None:
        """Wait until the state of every cell run so far is written and signed (``save_state``).

        ``execute`` returns once a small change is written (and, for a cell that ran
        long, signed), but a large one goes on being written in the kernel while your
        code runs on, so a cell's result is never held up by its state: call this
        before something that needs the state on disk now (copying the work dir,
        killing the process on purpose, a test reading the state folder). ``close()``
        waits the same way. Waits for a running cell first (in turn with other calls);
        returns at once when the state is off, and quietly when the kernel died (it
        writes nothing more). Raises :class:`~jupyter_exec.CheckpointError` when the
        kernel does not answer in an hour.
        """
        await self._state.flush(self)
