"""The namespace saved after every cell: generations the kernel writes, the host signs.

The in-kernel half is :mod:`jupyter_exec.inkernel.generations`. Per session, in
the work dir (a Docker kernel sees it too)::

    .<session>_state/objects/<hash>     one chunk (4 MiB at most) of a pickled object
                                        (protocol 5, buffers out of band), named by its
                                        xxh3-128 (or sha256 in a kernel without xxhash)
    .<session>_state/gen-<n>.json       generation n: name -> its chunks (name, sha256,
                                        size), names not saved and why, the environment,
                                        how many cells it holds
    .<session>_state/signed/<n>.json    the host's MAC of {session, n, manifest sha256,
                                        cells, origin}: only a signed generation is loaded

Each recorded cell's request carries :func:`commit_expression`: the kernel pickles the
names the cell changed there (a large change: a forked child of the kernel pickles and
writes it from its copy-on-write image) and a writer thread in the kernel stores them; the same
answer lists the generations written since, ``(n, sha256)``, and the host signs those
with its key (:mod:`jupyter_exec.boundary.trust`, the kernel never sees it), stamped with
the kernel's origin as the host knows it. The digest comes only from the kernel's own
channel, never from a file in the folder. When the commit waited for its write (a small
change, or a cell that ran longer than its state takes to write) the reply carries the
cell's own generation; its signature file is written before ``execute`` returns when the
cell ran 20 times what such a file takes to write (:meth:`Generations.sign_now_after`:
durable when it counts, at most 5 % of the cell), else while a later cell runs (every
:data:`SIGN_EVERY` seconds, awaited before that cell returns), by
:meth:`Generations.flush`, ``close()`` or the idle session's ask (one file for a burst of
small cells, none of them waiting for it). A larger write goes on in the kernel and is
signed with the next reply or ask that says it is done; a kernel killed before that
comes back from the generation before, with the recorded cells after it run again
(:meth:`Generations.newest`, ``recovery.py``). A state folder removed under a session
(its work dir deleted) turns its state off, said once in the log; nothing makes the
folder again.

Loading (:meth:`Generations.load`): the MAC, the session, the manifest's sha256 (read
here, never through a link), the origin rule (a Docker kernel's state is never loaded
by a kernel on the host without ``trust_origin``) and the budget are checked on the
host; the kernel then checks every chunk's sha256 on the bytes it unpickles.

A remote kernel (a gateway's, a Jupyter server's) writes the same files in its own
folder on its host, ``.<session>-<kernel id>_state/`` (:func:`kernel_state_folder`: one
server may run several sessions' kernels in one folder); the signatures are written
here, in the work dir's ``.<session>_state/signed/``. Its origin names the server as
this host reached it, and its generations load only into a kernel of that server (the
server restarts a dead kernel under the same id, in the same folder): the kernel checks
the manifest against the sha256 signed here, then every chunk. ``close()`` removes
that folder (:meth:`Generations.discard_remote`): a later kernel has another id.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.boundary import replies
from jupyter_exec.boundary import trust as checkpoint_trust
from jupyter_exec.boundary.paths import Folder
from jupyter_exec.engine.installs import Installs, Outcome
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.exceptions import CheckpointError, StorageError, WorkDirError
from jupyter_exec.inkernel import Install
from jupyter_exec.inkernel import generations as inkernel_generations
from jupyter_exec.inkernel.generations import MODULE
from jupyter_exec.state.kernel_calls import (
    DONE_EXPRESSION,
    INSTALL_TIMEOUT,
    SAVE_TIMEOUT,
    InKernelHalf,
    ask,
    kernel_folders,
    kernel_origin,
)

if TYPE_CHECKING:
    from jupyter_exec.state.host import StateHost

__all__ = [
    "COMMIT_KEY",
    "Generation",
    "Generations",
    "checks_by_name",
    "kernel_state_folder",
    "state_folder",
]

log = logging.getLogger("jupyter_exec")

COMMIT_KEY = "jupyter_exec_generation"
GENERATIONS = "generations"
"""The in-kernel half's entry in a batch of installs."""
SIGNED = "signed"
MAX_MANIFEST = inkernel_generations.MAX_MANIFEST
SIGN_EVERY = 0.1
"""Seconds between two signature files a session writes for fast cells (the newest counts)."""
SIGN_NOW_AFTER = 0.005
"""The least a cell runs in the kernel to have its generation signed before its result is
returned (when written by then); the bar is :data:`SIGN_COST_SHARE` times what writing a
signature file takes (measured), up to :data:`SIGN_NOW_ALWAYS`."""
SIGN_COST_SHARE = 20
"""A cell signed before its result pays at most 1/20 (5 %) of its run for it: a warm ``1+1``
is never held up by a file write (0.3 ms on an idle machine, several ms under load)."""
SIGN_NOW_ALWAYS = 0.2
"""Seconds of run after which a cell is signed before its result however slow the writes."""
_SIG_NAME = re.compile(r"^[0-9]{1,12}\.json$")


def state_folder(session: str) -> str:
    """The folder, in the work dir, where session ``session`` keeps its generations."""
    return f".{session}_state"


def kernel_state_folder(session: str, kernel: KernelHandle) -> str:
    """The folder, in the kernel's working directory, where its writer keeps the
    generations: the work dir's own for a kernel here or in Docker; for a remote kernel,
    one named after its kernel id too (a server may run several sessions' kernels in one
    folder; the id stays the same across the server's restarts of it)."""
    if kernel_origin(kernel)["backend"] != "remote":
        return state_folder(session)
    return f".{session}-{kernel.kernel_id}_state"


def discard_code(session: str, kernel: KernelHandle) -> str:
    """Code that removes a remote kernel's state folder on its host (at ``close()``: no
    later kernel can load it, a new one has another id), leaving no name behind."""
    root = f"__import__('sys').modules[{inkernel_generations.STATE_MODULE!r}].root"
    folder = kernel_state_folder(session, kernel)
    return (
        f"__import__('shutil').rmtree(__import__('os').path.join({root}, {folder!r}), "
        "ignore_errors=True)"
    )


@dataclass(frozen=True)
class Generation:
    """One signed generation: the state after the first ``cells`` recorded cells."""

    session: str
    number: int
    sha256: str
    cells: int
    origin: Mapping[str, str]
    manifest: int | None = None
    """The number of the manifest file it is (``gen-<manifest>.json``): an earlier one when
    the cell changed nothing; None: its own."""

    @property
    def file_number(self) -> int:
        return self.number if self.manifest is None else self.manifest

    def canonical(self) -> bytes:
        """What the host's MAC covers."""
        body = {
            "kind": "generation",
            "session": self.session,
            "generation": self.number,
            "manifest": self.file_number,
            "sha256": self.sha256,
            "cells": self.cells,
            "origin": dict(self.origin),
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    def record(self) -> dict[str, Any]:
        """The signature file's content."""
        return {**json.loads(self.canonical()), "mac": checkpoint_trust.mac(self.canonical())}


@dataclass(frozen=True)
class LoadedGeneration:
    """What a generation brought back into a kernel."""

    generation: Generation
    names: tuple[str, ...]
    skipped: dict[str, str]


class Generations(InKernelHalf):
    """What one session keeps of its per-cell generations; owned by its ``SessionState``."""

    what = "per-cell state"

    def __init__(self, enabled: bool, budget_bytes: int) -> None:
        super().__init__()
        self.enabled = enabled
        self.budget = budget_bytes
        self.signed: list[Generation] = []
        """Generations signed in this session's timeline, oldest first."""
        self.next_number = 1
        self.committed_in: KernelHandle | None = None
        """The kernel the last commit ran in: a commit in another one stores every name."""
        self.failures: list[str] = []
        self.notes: list[str] = []
        """What the kernel said lately of how it wrote (a large change written without a
        forked child, and why: memory short, no ``os.fork``); the first one is a warning."""
        self.unreported: list[str] = []
        """Of those, the ones no Execution carries yet (:meth:`take_notes`)."""
        self.asked_full = False
        self.work_dir: Path | None = None
        self.to_sign: tuple[Path, Generation] | None = None
        """The newest generation signed here whose signature file is not written yet."""
        self.signed_at = 0.0
        self.sign_cost = 0.001
        """Seconds a signature file took to write, lately (a running mean)."""
        self.writing: asyncio.Lock | None = None
        self.ahead: asyncio.Future[None] | None = None
        """The coalesced signature written while the next cell runs (:meth:`write_ahead`)."""
        self.handed = 0
        """The newest generation the kernel took (its commit answered): signed once written."""
        self.asking: asyncio.Lock | None = None
        """One ``flush`` at a time: the idle session's ask and any other never share a kernel
        channel (made on first use, in the session's event loop)."""

    def plan(self, session: StateHost, installs: Installs, *, needs: tuple[str, ...] = ()) -> None:
        """Add the in-kernel half to ``installs`` unless its kernel has it, refused it or
        cannot have it (state off, a key the kernel could read, a remote kernel of a server
        this session does not know). ``needs``:
        the entries of the batch it waits for (the state module, installed with it)."""
        kernel = installs.kernel
        if self.installed is kernel:
            return
        if not self.enabled or self.refused is kernel:
            return
        try:  # a key the kernel can read would sign anything: then nothing is saved
            checkpoint_trust.check_outside(kernel_folders(session, kernel))
        except CheckpointError as exc:
            self.unavailable, self.refused = str(exc), kernel
            log.warning("session %s: no per-cell state: %s", session.name, exc)
            return
        if not self._remote_ready(session, kernel):
            return
        if self.next_number == 1:
            self.next_number = 1 + max(numbers_on_disk(session.work_dir, session.name), default=0)

        def done(outcome: Outcome) -> None:
            if self.took(outcome, session, kernel, state_folder(session.name)):
                self.work_dir = session.work_dir

        call = f"install({kernel_state_folder(session.name, kernel)!r}, {self.budget})"
        entry = Install(GENERATIONS, inkernel_generations.__file__, MODULE, call, needs)
        installs.add(entry, done)

    def _remote_ready(self, session: StateHost, kernel: KernelHandle) -> bool:
        """For a remote kernel: its server is known (its origin), and the folder for its
        signatures is made here (the kernel writes its own on its host). True otherwise."""
        origin = kernel_origin(kernel)
        if origin["backend"] != "remote":
            return True
        if not origin.get("server"):
            self.unavailable = (
                "the kernel's server is not known to this session (a kernel of the Jupyter "
                "server's own gateway client): no later kernel could be proven to be of it"
            )
        else:
            try:
                _own_state_folder(session)
                return True
            except (StorageError, WorkDirError, OSError) as exc:
                self.unavailable = f"its signatures cannot be kept in the work dir: {exc}"
        self.refused = kernel
        log.warning("session %s: no per-cell state: %s", session.name, self.unavailable)
        return False

    def expressions(self, kernel: KernelHandle, cell_index: int | None) -> dict[str, str]:
        """The commit a recorded cell's request carries (evaluated after the cell ran)."""
        if self.installed is not kernel or cell_index is None:
            return {}
        full = self.committed_in is not kernel
        self.committed_in, self.asked_full = kernel, full
        number, self.next_number = self.next_number, self.next_number + 1
        keep = self.signed[-1].file_number if self.signed else 0
        return {COMMIT_KEY: _call("commit", number, cell_index + 1, full, keep)}

    async def after_cell(self, session: StateHost, kernel: KernelHandle, found: Any) -> None:
        """Sign the generations the kernel says it wrote (from its own reply); the cell's
        own, when written, on disk before this returns if the cell ran long enough (else
        its signature is noted, written with a later call: :meth:`write_ahead`)."""
        reply = (found or {}).get(COMMIT_KEY)
        if not isinstance(reply, Mapping) or reply.get("status") != "ok":
            if self.asked_full:  # it never ran (the cell raised): the next one stores all
                self.committed_in = None
            return
        answer = replies.answer(found, COMMIT_KEY)
        if answer is None:  # not one str of JSON within bounds: the kernel said nothing
            return
        self.handed = self.next_number - 1
        self.take(session, kernel, answer)
        ran = answer.get("ran") if isinstance(answer, Mapping) else None
        if (
            self.to_sign is not None
            and isinstance(ran, int | float)
            and ran >= self.sign_now_after()
        ):
            await self.write_pending()

    def sign_now_after(self) -> float:
        """Seconds of run from which a cell is signed before its result is returned."""
        bar = max(SIGN_NOW_AFTER, SIGN_COST_SHARE * self.sign_cost)
        return min(bar, SIGN_NOW_ALWAYS)

    def write_ahead(self) -> None:
        """At a cell's start: when the newest signature noted is :data:`SIGN_EVERY` old,
        write it while this cell runs (off the event loop); :meth:`caught_up` waits for it
        before this call returns. A burst of fast cells so has its state signed every tenth
        of a second, and none of them waits for a file."""
        due = time.monotonic() - self.signed_at >= SIGN_EVERY
        if self.to_sign is not None and due and self.ahead is None:
            self.ahead = asyncio.ensure_future(self.write_pending())

    async def caught_up(self) -> None:
        """Wait for the signature :meth:`write_ahead` started (before the call returns:
        nothing writes behind the caller's back)."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            await ahead

    def unsigned(self, kernel: KernelHandle) -> bool:
        """Whether ``kernel`` holds a generation it took that is not signed yet (its writer
        may still be at it), or a signature waits to be written: the session asks for it
        while idle, so that a death or a host kill after the last cell finds that cell's
        state signed."""
        newest = self.signed[-1].number if self.signed else 0
        return self.installed is kernel and (self.handed > newest or self.to_sign is not None)

    def writing_elsewhere(self) -> bool:
        """Whether the kernel's writer still has a generation this host handed it."""
        newest = self.signed[-1].number if self.signed else 0
        return self.handed > newest

    def take(self, session: StateHost, kernel: KernelHandle, answer: Any) -> None:
        """Sign what ``answer`` (the kernel's ``commit`` or ``flush``) lists as written."""
        if not isinstance(answer, Mapping):
            return
        for note in answer.get("notes") or ():  # a large change written without a child
            shown = replies.printable(note)
            said = log.info if self.notes else log.warning  # a warning once, then quieter
            said("session %s: %s", session.name, shown)
            self.notes = [*self.notes[-9:], shown]
            self.unreported = [*self.unreported[-9:], shown]
        for item in answer.get("failed") or ():
            shown = replies.printable(item)
            self.failures.append(shown)
            if isinstance(item, list) and len(item) > 2 and item[2] == "gone":
                self._folder_gone(session)
                continue
            log.warning("session %s: a generation was not written: %s", session.name, shown)
        origin = kernel_origin(kernel)
        for item in answer.get("done") or ():
            try:
                number, digest, cells = int(item[0]), str(item[1]), int(item[2])
                manifest = int(item[3]) if len(item) > 3 else number
            except (TypeError, ValueError, IndexError):
                continue
            if not re.fullmatch(r"[0-9a-f]{64}", digest) or not 0 < manifest <= number:
                continue
            if number >= self.next_number:
                continue  # not one this host asked for
            made = Generation(session.name, number, digest, cells, origin, manifest)
            self._sign_soon(session.work_dir, made)
            if not self.signed or self.signed[-1].number < number:  # the usual: the newest
                self.signed.append(made)  # (a copy and a sort of every one was O(cells))
                continue
            others = [g for g in self.signed if g.number != number]
            self.signed = sorted([*others, made], key=lambda g: g.number)

    def take_notes(self) -> tuple[str, ...]:
        """What the kernel said of its writes since the last Execution took them (the cell
        whose reply, or the idle ask before it, brought them): its ``state_notes``."""
        found, self.unreported = tuple(self.unreported), []
        return found

    def _folder_gone(self, session: StateHost) -> None:
        """The kernel's writer found the state folder removed (the work dir deleted under
        the session): the state is off from here on, said once; nothing makes it again."""
        if not self.enabled:
            return
        self.enabled = False
        self.to_sign = None
        self.unavailable = (
            f"its folder {state_folder(session.name)} was removed from the work dir; "
            "per-cell state is off for the rest of the session"
        )
        log.warning("session %s: no per-cell state: %s", session.name, self.unavailable)

    def _sign_soon(self, work_dir: Path, made: Generation) -> None:
        """Note ``made``'s signature file to write: the newest one counts, so a burst of
        small cells costs one file, not one each. It is written during a call of the
        caller's (this cell's end when it ran long, the next cell, ``flush``, ``close``)
        or by the idle session's ask, never behind a caller's back right after a result."""
        if self.to_sign is None or made.number > self.to_sign[1].number:
            self.to_sign = (work_dir, made)

    async def write_pending(self) -> None:
        """Write the newest signature waiting, if any (off the event loop)."""
        if self.writing is None:
            self.writing = asyncio.Lock()
        async with self.writing:
            pending, self.to_sign = self.to_sign, None
            if pending is None:
                return
            self.signed_at = started = time.monotonic()
            await asyncio.to_thread(_write_quietly, *pending)
            self.sign_cost = (self.sign_cost + time.monotonic() - started) / 2

    async def settled(self) -> None:
        """Wait until the newest signature noted is written."""
        await self.caught_up()
        await self.write_pending()

    async def discard_remote(self, session: StateHost, kernel: KernelHandle) -> bool:
        """At a remote session's close: remove its kernel's state folder on its host instead
        of waiting for the writer (nothing can load it later); whether the kernel is remote."""
        if kernel_origin(kernel)["backend"] != "remote":
            return False
        self.to_sign = None
        if self.installed is kernel:
            await ask(kernel, discard_code(session.name, kernel), DONE_EXPRESSION, INSTALL_TIMEOUT)
        return True

    async def flush(
        self, session: StateHost, kernel: KernelHandle, timeout: float = SAVE_TIMEOUT
    ) -> None:
        """Wait for the kernel's writer, sign what it wrote, and wait for the signature files
        (on close, so a resume starts from the last cell; tests, benchmarks)."""
        if self.asking is None:
            self.asking = asyncio.Lock()
        async with self.asking:
            if self.installed is kernel and (timeout > 0 or self.writing_elsewhere()):
                answer = await ask(kernel, "", _call("flush", timeout), timeout + 5)
                self.take(session, kernel, answer)
        await self.settled()

    def rewound(self, cells: int | None) -> None:
        """The state went back to after ``cells`` recorded cells (None: another timeline):
        the later generations are another timeline's, and their signatures go (a resume
        must never load them)."""
        kept = [g for g in self.signed if cells is not None and g.cells <= cells]
        if self.to_sign is not None and self.to_sign[1] not in kept:
            self.to_sign = None
            if kept and self.work_dir is not None:
                self._sign_soon(self.work_dir, kept[-1])
        for made in self.signed:
            if made not in kept and self.work_dir is not None:
                drop_signature(self.work_dir, made)
        self.signed = kept

    def newest(self) -> Generation | None:
        """The newest signed generation of this timeline."""
        return self.signed[-1] if self.signed else None

    async def load(
        self,
        session: StateHost,
        kernel: KernelHandle,
        made: Generation,
        *,
        trust_origin: bool = False,
        own_folder: bool = False,
    ) -> LoadedGeneration:
        """Replace ``kernel``'s namespace with generation ``made``, checked first here.

        A remote kernel's generation is on its host: only its origin is checked here (the
        same server's kernels only), and the kernel checks the manifest against the sha256
        this host signed, then every object, before it unpickles anything (its own host's
        files, into its own host's kernel).

        ``own_folder``: the session has held its folder since ``made`` was written (a wake:
        no Docker or remote kernel could work there meanwhile). A local kernel's generation
        loaded into a local kernel then has its chunks checked against their xxh3-128 names,
        which the signed manifest binds as it binds their sha256: the only writers were the
        host's own kernels (which run as the host's user already), so no one who could craft
        an xxh3 collision wrote there, and any other change or swap of a chunk is found as
        the sha256 would find it. Anything else: the sha256 of every chunk."""
        checkpoint_trust.check_outside([session.work_dir])
        where = f"generation {made.number} of session {made.session!r}"
        checkpoint_trust.check_origin(
            where, made.origin, kernel_origin(kernel), trusted=trust_origin
        )
        remote = made.origin.get("backend") == "remote"
        manifest = {} if remote else read_manifest(session.work_dir, made, self.budget)
        if not await self.ensure(session, kernel):
            raise CheckpointError(f"cannot load {where}: {self.unavailable}")
        try:
            fast = checks_by_name(made.origin, kernel_origin(kernel), own_folder)
            call = _call("load", made.file_number, made.sha256, fast)
            result = await ask(kernel, "", call, SAVE_TIMEOUT)
        except CheckpointError as exc:
            raise CheckpointError(f"{where} was not loaded: {exc}") from None
        result = result if isinstance(result, Mapping) else {}
        self.committed_in = None  # the next commit stores every name
        said = (result if remote else manifest).get("skipped")
        skipped = {str(k): str(v) for k, v in (said if isinstance(said, Mapping) else {}).items()}
        return LoadedGeneration(made, tuple(str(n) for n in result.get("names", [])), skipped)


def checks_by_name(origin: Mapping[str, Any], kernel: Mapping[str, Any], own_folder: bool) -> bool:
    """Whether a load checks each chunk against its xxh3-128 name rather than its sha256
    (:meth:`Generations.load`): only a local kernel's generation, into a local kernel, from a
    folder the session held all along. A Docker or remote kernel's chunks, and any load from
    a folder others could have worked in since (a resume), are checked by their sha256."""
    return (
        own_folder
        and origin.get("backend") == "local"
        and kernel.get("backend") == "local"
        and set(origin) == {"backend"}
    )


def _call(function: str, *args: Any) -> str:
    arguments = json.dumps(list(args))
    return (
        f"__import__('json').dumps(__import__('sys').modules[{MODULE!r}].{function}"
        f"(*__import__('json').loads({arguments!r})))"
    )


def write_signature(work_dir: Path, made: Generation) -> None:
    """Write ``made``'s signature file (never through a link the kernel planted). The state
    folder must be there (its kernel made it): one removed is not made again here."""
    with (
        Folder.open(work_dir, state_folder(made.session)) as folder,
        folder.sub(SIGNED, create=True, mode=0o700) as signed,  # the user's alone
    ):
        signed.write_atomic(f"{made.number}.json", [json.dumps(made.record()).encode()], mode=0o600)


def _own_state_folder(session: StateHost) -> None:
    """Make the session's state folder here, for the signatures of a remote kernel's
    generations (that kernel writes its own folder on its host, never this one)."""
    with Folder.open(session.work_dir) as work:
        work.sub(state_folder(session.name), create=True, mode=0o700).close()


def _write_quietly(work_dir: Path, made: Generation) -> None:
    try:
        write_signature(work_dir, made)
    except FileNotFoundError:  # the work dir, or the state folder, was removed: nothing to sign
        log.info("generation %d of %s not signed: its folder is gone", made.number, made.session)
    except (StorageError, WorkDirError, CheckpointError, OSError) as exc:
        log.warning("generation %d of %s not signed: %s", made.number, made.session, exc)


def drop_signature(work_dir: Path, made: Generation) -> None:
    """Remove ``made``'s signature file (its generation left this session's timeline)."""
    relative = f"{state_folder(made.session)}/{SIGNED}"
    try:
        with Folder.open(work_dir, relative) as signed:
            signed.unlink(f"{made.number}.json")
    except (StorageError, WorkDirError, OSError) as exc:
        log.warning("generation %d: signature not removed: %s", made.number, exc)


def numbers_on_disk(work_dir: Path, session: str) -> list[int]:
    """Generation numbers named in the session's folder (any, signed or not)."""
    found: list[int] = []
    for folder in (work_dir / state_folder(session), work_dir / state_folder(session) / SIGNED):
        try:
            names = [p.name for p in folder.iterdir()]
        except OSError:
            continue
        for name in names:
            digits = name.removeprefix("gen-").removesuffix(".json")
            if digits.isdigit() and len(digits) <= 12:
                found.append(int(digits))
    return found


def signed_on_disk(work_dir: Path, session: str) -> list[Generation]:
    """The session's generations whose signature files carry this host's MAC, oldest first
    (a forged or altered one is left out and logged)."""
    found: list[Generation] = []
    try:
        folder = Folder.open(work_dir, f"{state_folder(session)}/{SIGNED}")
    except (StorageError, WorkDirError, OSError):
        return []
    with folder:
        for path in sorted((work_dir / state_folder(session) / SIGNED).iterdir()):
            if not _SIG_NAME.match(path.name):
                continue
            try:
                record = json.loads(folder.read_bytes(path.name, limit=1 << 16))
                made = Generation(
                    str(record["session"]),
                    int(record["generation"]),
                    str(record["sha256"]),
                    int(record["cells"]),
                    {str(k): str(v) for k, v in dict(record["origin"]).items()},
                    int(record.get("manifest", record["generation"])),
                )
                checkpoint_trust.verify(made.canonical(), record.get("mac"), path)
            except (StorageError, CheckpointError, ValueError, KeyError, TypeError) as exc:
                log.warning("generation signature %s refused: %s", path, exc)
                continue
            if made.session == session and f"{made.number}.json" == path.name:
                found.append(made)
    return sorted(found, key=lambda g: g.number)


def read_manifest(work_dir: Path, made: Generation, budget: int) -> dict[str, Any]:
    """Generation ``made``'s manifest, refused unless its bytes are the ones signed and it
    fits the budget; read without following a link or opening a FIFO."""
    where = work_dir / state_folder(made.session) / f"gen-{made.file_number}.json"
    try:
        with Folder.open(work_dir, state_folder(made.session)) as folder:
            data = folder.read_bytes(where.name, limit=MAX_MANIFEST)
    except (StorageError, WorkDirError, OSError) as exc:
        raise CheckpointError(f"{where} cannot be read: {exc}") from None
    if hashlib.sha256(data).hexdigest() != made.sha256:
        raise CheckpointError(
            f"{where} is not the manifest the host signed (its sha256 differs): altered or "
            "replaced since its kernel wrote it; it was not loaded"
        )
    try:
        manifest = json.loads(data)
        names = manifest["names"]
        size = sum(int(e.get("size", 0)) for e in names.values())
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CheckpointError(f"{where} is not a valid generation manifest") from None
    if manifest.get("format") != inkernel_generations.FORMAT:
        raise CheckpointError(f"{where} is not a valid generation manifest: wrong format")
    if budget and size > budget:
        raise CheckpointError(
            f"{where} names {size >> 20} MB of objects, past the session's state budget "
            f"({budget >> 20} MB); it was not loaded"
        )
    return dict(manifest)
