"""What a kernel process installs before its first cell, sent as one silent request.

The in-kernel halves (:mod:`jupyter_exec.inkernel`) are installed once per kernel
process, each by the party that needs it: the per-cell state and its generations
(the state's hook), the stream guard and the environment record (the recording).
Each party *plans* its entry here (its host-side checks, its refusals that need no
kernel) and says what to do with the kernel's answer; one request then carries them
all (:func:`jupyter_exec.inkernel.install_expression`)::

    first recorded cell on a kernel process
      session ─► hooks.kernel_installs(batch)   the state: state, generations
              ─► recording.plan_installs(batch) the guard, the environment record
              ─► batch.send()  one silent request; each entry's Outcome to its party
    later, any party alone (a checkpoint before any cell, a fork's kernel...)
      party.ensure ─► a batch of one, the same plan and the same outcome handling

A kernel that raised installing an entry, or did not answer in time, *refused* it
(the party says why, as before); an entry not tried (one it needs failed, the kernel
died) leaves the party free to try again. The probe file that proves a kernel shares
the work dir is made once per batch, whoever asks for it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jupyter_exec.boundary import replies
from jupyter_exec.boundary.paths import Folder
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.exceptions import KernelNotAliveError, StorageError, WorkDirError
from jupyter_exec.inkernel import NOT_TRIED, Install, install_expression, install_outcomes

__all__ = ["INSTALL_TIMEOUT", "Installs", "Outcome"]

log = logging.getLogger("jupyter_exec")

INSTALL_TIMEOUT = 30.0
"""Seconds a kernel has to answer a batch (each entry is a few ms of compiling)."""
MAX_ANSWER_CHARS = 1 << 16
KEY = "jupyter_exec_install"


@dataclass(frozen=True)
class Outcome:
    """What became of one entry of a batch."""

    ok: bool
    refused: bool = False
    """The kernel raised installing it, or did not answer in time: the party refuses it."""
    why: str = ""
    """Why not, as ``ename: evalue`` of what the kernel raised, or the host's reason."""
    error: tuple[str, str] | None = None
    """What the kernel raised, (error name, message), when it did."""
    died: bool = False
    """Not tried: the kernel died first."""

    @property
    def refusal(self) -> str:
        """Why the kernel refused it, as a party reports it (``unavailable``)."""
        return f"the kernel could not do it: {self.why}" if self.error else self.why


class Installs:
    """One kernel process's batch of entries to install, and the probe they share."""

    def __init__(self, kernel: KernelHandle, work_dir: Path | None) -> None:
        self.kernel = kernel
        self.work_dir = work_dir
        self._entries: list[tuple[Install, Callable[[Outcome], None]]] = []
        self._probe: str | None = None
        self._probe_error: WorkDirError | StorageError | None = None

    @classmethod
    async def alone(
        cls,
        kernel: KernelHandle,
        work_dir: Path | None,
        plan: Callable[[Installs], None],
        timeout: float = INSTALL_TIMEOUT,
        *,
        quiet_death: bool = True,
    ) -> None:
        """One party's entry in a batch of its own (a kernel before its first cell, a fork's
        kernel...): ``plan`` adds it, the outcome goes where ``plan`` said. A dead kernel
        raises :class:`KernelNotAliveError` unless ``quiet_death`` (the entry was told)."""
        installs = cls(kernel, work_dir)
        plan(installs)
        try:
            await installs.send(timeout)
        except KernelNotAliveError:
            if not quiet_death:
                raise

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return [install.name for install, _ in self._entries]

    def probe(self) -> str:
        """A file made in the work dir for this batch: an entry that finds it knows the kernel
        shares the dir. Raises :class:`WorkDirError` / :class:`StorageError` when it cannot
        be made (every asker gets the same error)."""
        if self._probe is not None:
            return self._probe
        if self._probe_error is not None:
            raise self._probe_error
        if self.work_dir is None:
            self._probe_error = WorkDirError("the session has no work dir")
            raise self._probe_error
        name = f".jupyter-exec-probe-{secrets.token_hex(8)}"
        try:
            with Folder.open(self.work_dir) as folder:
                os.close(folder.create(name))
        except (WorkDirError, StorageError) as exc:
            self._probe_error = exc
            raise
        self._probe = name
        return name

    def add(self, install: Install, done: Callable[[Outcome], None]) -> None:
        """Install ``install`` with the batch; ``done`` gets its outcome (every entry's is
        given, in order, before :meth:`send` returns or raises)."""
        self._entries.append((install, done))

    async def send(self, timeout: float = INSTALL_TIMEOUT) -> None:
        """Send every entry in one silent request and hand each its outcome.

        Raises :class:`KernelNotAliveError` when the kernel died meanwhile (after every
        entry was told, ``died``): a party that asked alone raised it before too.
        """
        entries, self._entries = self._entries, []
        try:
            if not entries:
                return
            outcomes = await self._ask([install for install, _ in entries], timeout)
        finally:
            self._remove_probe()
        died = False
        for (_install, done), outcome in zip(entries, outcomes, strict=True):
            died = died or outcome.died
            done(outcome)
        if died:
            raise KernelNotAliveError("the kernel died while installing jupyter-exec's helpers")

    async def _ask(self, installs: list[Install], timeout: float) -> list[Outcome]:
        names = [install.name for install in installs]
        try:
            content = await self.kernel.run_silent(
                "",
                time.monotonic() + timeout,
                expressions={KEY: install_expression(installs)},
                died="",
            )
        except KernelNotAliveError:
            return [Outcome(False, why="the kernel died", died=True) for _ in names]
        if content is None:
            why = f"the kernel did not answer within {timeout:.0f} s"
            return [Outcome(False, refused=True, why=why) for _ in names]
        found = (content.get("user_expressions") or {}).get(KEY) or {}
        if content.get("status") != "ok":
            found = content
        if found.get("status") != "ok":  # the whole batch raised: every entry with it
            error = (
                replies.printable(found.get("ename", "error"), 100),
                replies.printable(found.get("evalue", "no answer")),
            )
            return [_refused(error) for _ in names]
        answer = replies.answer({KEY: found}, KEY, MAX_ANSWER_CHARS)
        told = install_outcomes(names, answer)
        return [Outcome(True) if told[n] is None else _refused(told[n]) for n in names]

    def _remove_probe(self) -> None:
        probe, self._probe = self._probe, None
        if probe is not None and self.work_dir is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.work_dir / probe)


def _refused(error: tuple[str, str] | None) -> Outcome:
    assert error is not None
    name, message = replies.printable(error[0], 100), replies.printable(error[1])
    if name == NOT_TRIED:
        return Outcome(False, why=message, error=(name, message))
    return Outcome(False, refused=True, why=f"{name}: {message}", error=(name, message))
