"""A session's durable state: checkpoints its kernel writes to disk, automatic ones, and the
names each cell changed (what a restore after a kernel death cannot give back).

The in-kernel half is :mod:`jupyter_exec.inkernel.state`, installed once per
kernel process (a probe file proves the kernel shares the work dir; a remote
kernel works in a folder of its own on its host, makes the probe there itself,
and gets the changed names and the per-cell generations, but no checkpoints on
disk: those are read and signed here, file by file)::

    each cell     user_expressions: the names it changed ─► changes[(cell, names)]
    checkpoint()  save(.<session>_checkpoints/<name>) in the kernel ─► manifest read back,
                  stamped with the kernel's origin (local / docker + image / remote, as
                  the host knows it) and signed with the host's key (checkpoint_trust);
                  no unpickling on the host
    after a cell  checkpoint_every seconds since the last automatic one, names changed,
                  the namespace under AUTO_MAX_BYTES ─► auto-<k>, the previous one removed
    restore       the host's MAC, the manifest and every file's sha256 checked here; one
                  written by a Docker or remote kernel is refused for a kernel on the
                  host unless trusted (trust_origin=True); the kernel's Python and
                  library versions compared, then load() in the kernel (all or nothing,
                  checked again against the manifest the host checked)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.boundary import replies
from jupyter_exec.boundary import trust as checkpoint_trust
from jupyter_exec.engine.installs import Installs, Outcome
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.exceptions import (
    CheckpointError,
    KernelNotAliveError,
    StorageError,
    WorkDirError,
)
from jupyter_exec.inkernel import Install
from jupyter_exec.inkernel import state as inkernel_state
from jupyter_exec.inkernel.state import CHANGED_EXPRESSION, MODULE
from jupyter_exec.state.checkpoints import (
    Checkpoint,
    checkpoints_folder,
    copy_checkpoint,
    environment_mismatches,
    on_disk,
    read_checkpoint,
    sign_checkpoint,
)
from jupyter_exec.state.generations import Generations
from jupyter_exec.state.kernel_calls import (
    INSTALL_TIMEOUT,
    SAVE_TIMEOUT,
    InKernelHalf,
    ask,
    kernel_folders,
    kernel_origin,
)

if TYPE_CHECKING:
    from jupyter_exec.state.host import StateHost

__all__ = ["AUTO_MAX_BYTES", "DurableState", "ask", "kernel_folders", "kernel_origin"]

log = logging.getLogger("jupyter_exec")

AUTO_MAX_BYTES = 64 << 20
"""Automatic checkpoints are taken only while the namespace is under this many bytes: writing
64 MB costs about half a second (100 MB: 0.6 to 0.8 s, ``--only checkpoint``), at most once per
``checkpoint_every``: under 1 % of a minute."""
AUTO_PREFIX = "auto-"
STATE = "state"
"""The in-kernel half's entry in a batch of installs (the generations need it)."""
CHANGES_KEY = "jupyter_exec_changed"
MAX_CHANGED_CHARS = 2 << 20
"""The names a cell changed, as the kernel's raw answer: past 2 MiB (some 150,000 names),
no answer (the cell's changes are not noted)."""


class TooLarge(Exception):
    """The namespace is past an automatic checkpoint's budget (the kernel wrote nothing)."""


@dataclass(frozen=True)
class Loaded:
    """What a load from disk brought back."""

    checkpoint: Checkpoint
    names: tuple[str, ...]


class DurableState(InKernelHalf):
    """What one session keeps for checkpoints on disk; owned by its ``SessionState``."""

    what = "durable checkpoints"

    def __init__(self, every: float | None) -> None:
        super().__init__()
        self.every = every or 0.0
        self.changes: list[tuple[int, frozenset[str]]] = []
        """Per recorded cell: the names it changed, as the kernel reported them."""
        self.taken: list[Checkpoint] = []
        """Durable checkpoints this session took, oldest first (what a restart gets back)."""
        self.last_auto = time.monotonic()
        self.auto_paused_until = 0.0
        self.generations = Generations(False, 0)
        """The per-cell generations (``save_state``), set up with the session's options."""
        self.trusted: set[Path] = set()
        """Checkpoints of another origin the person trusted (``trust_origin=True``) for this
        session: a recovery after a kernel death may load them again."""

    # -- the in-kernel half ------------------------------------------------------------

    def plan(self, session: StateHost, installs: Installs) -> None:
        """Add the in-kernel half to ``installs`` unless its kernel has it or refused it (or
        is not IPython, or the work dir takes no probe: then it is refused here)."""
        kernel = installs.kernel
        if self.installed is kernel or self.refused is kernel:
            return
        if not kernel.runs_ipython:  # the in-kernel half is Python source
            self.unavailable = f"durable state needs an IPython kernel, not {kernel.language!r}"
            self.refused = kernel
            return
        remote = is_remote(kernel)
        try:  # a remote kernel's work dir is its own folder on its host: it makes the probe
            probe = f".jupyter-exec-probe-{secrets.token_hex(8)}" if remote else installs.probe()
        except (WorkDirError, StorageError) as exc:
            self.unavailable = f"the work dir cannot be written: {exc}"
            self.refused = kernel
            return

        def done(outcome: Outcome) -> None:
            if self.took(outcome, session, kernel, checkpoints_folder(session.name)):
                self.unavailable = None

        call = f"install_in_own_folder({probe!r})" if remote else f"install({probe!r})"
        installs.add(Install(STATE, inkernel_state.__file__, MODULE, call), done)

    def expressions(self, kernel: KernelHandle, needed: bool) -> dict[str, str]:
        """What a cell's execute_request asks for besides its code: the names it changed,
        once there is a snapshot or checkpoint they could be lost against (``needed``)."""
        if self.installed is not kernel or not (needed or self.taken):
            return {}
        return {CHANGES_KEY: CHANGED_EXPRESSION}

    def after_cell(self, cell_index: int | None, found: Mapping[str, Any] | None) -> None:
        """Note the names the cell ``cell_index`` changed, from its reply."""
        if cell_index is None:
            return
        names = replies.answer(found, CHANGES_KEY, MAX_CHANGED_CHARS)
        if isinstance(names, list) and names:
            self.changes.append((cell_index, frozenset(str(n) for n in names)))

    async def changes_after_error(self, kernel: KernelHandle, cell_index: int | None) -> None:
        """The names a cell that raised changed (its reply carried no user_expressions)."""
        if self.installed is not kernel or cell_index is None:
            return
        with contextlib.suppress(CheckpointError, KernelNotAliveError):
            names = await ask(kernel, "", CHANGED_EXPRESSION, INSTALL_TIMEOUT)
            if isinstance(names, list) and names:
                self.changes.append((cell_index, frozenset(str(n) for n in names)))

    def forget_before(self, cell_index: int) -> None:
        """Drop what cells before ``cell_index`` changed: no state to come back to is older."""
        if self.changes and self.changes[0][0] < cell_index:
            self.changes = [c for c in self.changes if c[0] >= cell_index]

    def changed_since(self, cell_index: int, undone: set[int]) -> set[str]:
        """Names changed by the cells from ``cell_index`` on that still count (not undone)."""
        found: set[str] = set()
        for index, names in self.changes:
            if index >= cell_index and index not in undone:
                found |= names
        return found

    # -- writing -----------------------------------------------------------------------

    async def save(
        self,
        session: StateHost,
        kernel: KernelHandle,
        name: str,
        meta: dict[str, Any],
        *,
        max_bytes: int = 0,
        flush: bool = True,
    ) -> Checkpoint:
        """Have the kernel write checkpoint ``name``; read back and checked here."""
        refuse_remote(kernel, "write a checkpoint to disk")
        if not await self.ensure(session, kernel):
            raise CheckpointError(f"cannot write a checkpoint to disk: {self.unavailable}")
        origin = kernel_origin(kernel)
        checkpoint_trust.check_outside(kernel_folders(session, kernel))
        relative = f"{checkpoints_folder(session.name)}/{name}"
        body = {**meta, "name": name, "session": session.name}
        done = await ask(
            kernel, "", call_expression("save", relative, body, max_bytes, flush), SAVE_TIMEOUT
        )
        if isinstance(done, dict) and done.get("too_large"):
            raise TooLarge(f"the namespace is larger than {max_bytes} bytes")
        # A kernel on the host is trusted to say what it wrote; another's word signs nothing
        # it could not have written anyway (its checkpoint is signed as its origin's).
        digest = done.get("sha256") if isinstance(done, dict) else None
        trusted_digest = str(digest) if origin["backend"] == "local" and digest else None
        if origin["backend"] == "local" and trusted_digest is None:
            raise CheckpointError(
                "the kernel did not say what it wrote; the checkpoint is unsigned"
            )
        made = await asyncio.to_thread(
            sign_checkpoint, session.work_dir, relative, origin, trusted_digest
        )
        self.taken.append(made)
        return made

    async def auto(
        self, session: StateHost, kernel: KernelHandle, meta: Callable[[], dict[str, Any]]
    ) -> Checkpoint | None:
        """An automatic checkpoint, when one is due and cheap (see the module's docstring);
        ``meta()`` (its metadata) is only asked for then."""
        now = time.monotonic()
        if self.every <= 0 or now - self.last_auto < self.every or now < self.auto_paused_until:
            return None
        last = self.taken[-1] if self.taken else None
        if last is not None and not self.changed_since(last.cell_index, set()):
            return None
        if self.installed is not kernel or is_remote(kernel):
            return None
        self.last_auto = now
        number = 1 + max((int(c.name[len(AUTO_PREFIX) :]) for c in self._autos(session)), default=0)
        try:
            made = await self.save(
                session, kernel, f"{AUTO_PREFIX}{number}", {**meta(), "automatic": True},
                max_bytes=AUTO_MAX_BYTES, flush=False,
            )  # fmt: skip
        except TooLarge:  # back off: looked at again after ten intervals
            self.auto_paused_until = now + 10 * self.every
            return None
        except CheckpointError as exc:
            log.info("session %s: no automatic checkpoint: %s", session.name, exc)
            return None
        for old in self._autos(session):
            if old.name != made.name:
                self.taken = [c for c in self.taken if c.path != old.path]
                with contextlib.suppress(CheckpointError):
                    relative = f"{checkpoints_folder(session.name)}/{old.name}"
                    await ask(kernel, "", call_expression("discard", relative), INSTALL_TIMEOUT)
        return made

    def _autos(self, session: StateHost) -> list[Checkpoint]:
        return [
            c
            for c in on_disk(session.work_dir, session.name)
            if c.automatic and c.name[len(AUTO_PREFIX) :].isdigit()
        ]

    def rewound(self, cell_index: int | None, to: Checkpoint | None = None) -> None:
        """The state went back to before cell ``cell_index`` (None: another session's state,
        ``to``: the checkpoint it came from): later checkpoints are another timeline's."""
        self.generations.rewound(cell_index)
        kept = [c for c in self.taken if cell_index is not None and c.cell_index <= cell_index]
        if to is not None and to.path not in {c.path for c in kept}:
            kept.append(to)
        self.taken = kept

    def latest(self) -> Checkpoint | None:
        """The newest durable checkpoint this session took and that is still on disk."""
        self.taken = [c for c in self.taken if c.path is not None and c.path.is_dir()]
        return self.taken[-1] if self.taken else None

    # -- loading -----------------------------------------------------------------------

    async def load(
        self,
        session: StateHost,
        kernel: KernelHandle,
        checkpoint: Checkpoint,
        *,
        force: bool = False,
        trust_origin: bool = False,
    ) -> Loaded:
        """Replace the kernel's namespace with ``checkpoint`` from disk, checked whole first.

        A checkpoint outside this session's work dir is copied in first (a Docker
        kernel sees nothing else). One written by a Docker or remote kernel is
        refused for a kernel on the host unless ``trust_origin``. A different Python
        or library version raises :class:`CheckpointError` naming it, unless ``force``.
        """
        if checkpoint.path is None:
            raise CheckpointError(f"checkpoint {checkpoint.name!r} was never written to disk")
        refuse_remote(kernel, "load a checkpoint from disk")
        work_dir = session.work_dir
        checkpoint_trust.check_outside(kernel_folders(session, kernel))
        relative = _inside(work_dir, checkpoint.path)
        # The MAC and manifest are checked here; the files are hashed by the kernel, from the
        # memory it then unpickles (so nothing swapped on disk since is ever unpickled), and
        # one from elsewhere also as it is copied in (a damaged copy is refused there).
        checked = await asyncio.to_thread(
            read_checkpoint,
            work_dir if relative else checkpoint.path.parent,
            relative or checkpoint.path.name,
            verify=False,
        )
        trusted = trust_origin or checked.path in self.trusted
        checkpoint_trust.check_origin(
            checked.name, checked.origin, kernel_origin(kernel), trusted=trusted
        )
        if not await self.ensure(session, kernel):
            raise CheckpointError(f"cannot load a checkpoint from disk: {self.unavailable}")
        stored = checked.environment
        kernel_env = await ask(
            kernel,
            "",
            call_expression("environment", sorted(stored.get("libraries") or {})),
            INSTALL_TIMEOUT,
        )
        mismatches = environment_mismatches(stored, kernel_env)
        if mismatches and not force:
            raise CheckpointError(
                f"checkpoint {checked.name!r} was taken in another environment: "
                f"{'; '.join(mismatches)} (restore(..., force=True) loads it anyway)",
                mismatches,
            )
        if relative is None:
            relative = await asyncio.to_thread(copy_checkpoint, checked, work_dir, session.name)
        try:
            result = await ask(
                kernel, "", call_expression("load", relative, checked.digest), SAVE_TIMEOUT
            )
        except CheckpointError as exc:
            raise CheckpointError(f"checkpoint {checked.name!r} was not loaded: {exc}") from None
        if trust_origin and checked.origin.get("backend") != "local" and checked.path:
            self.trusted.add(checked.path)
        return Loaded(checked, tuple(str(n) for n in result.get("names", [])))


def _inside(work_dir: Path, path: Path) -> str | None:
    """``path`` relative to ``work_dir`` when it is inside it (lexically), else None."""
    try:
        relative = Path(os.path.abspath(path)).relative_to(os.path.abspath(work_dir))
    except ValueError:
        return None
    return relative.as_posix() if relative.parts else None


def is_remote(kernel: KernelHandle) -> bool:
    """Whether ``kernel`` runs behind a server, in a folder of its own on another host."""
    return kernel_origin(kernel)["backend"] == "remote"


def refuse_remote(kernel: KernelHandle, what: str) -> None:
    """A checkpoint on disk is read and signed here, file by file: a remote kernel's files
    are on its host (its per-cell state is kept there instead, :mod:`.generations`)."""
    if is_remote(kernel):
        raise CheckpointError(
            f"cannot {what}: the kernel is remote, and its files are on its host, not in "
            "this session's work dir (its per-cell state is saved there, save_state)"
        )


def call_expression(function: str, *args: Any) -> str:
    """A ``user_expressions`` entry that calls ``function`` of the installed module; its
    value is the result as JSON text (IPython's display of a long list would cut it short)."""
    arguments = json.dumps(list(args))
    return (
        f"__import__('json').dumps(__import__('sys').modules[{MODULE!r}].{function}"
        f"(*__import__('json').loads({arguments!r})))"
    )
