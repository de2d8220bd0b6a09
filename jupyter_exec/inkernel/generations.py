"""Code that runs inside an IPython kernel: the namespace saved after every cell, incrementally.

Installed after :mod:`jupyter_exec.inkernel.state` (whose hooks say which names each
cell changed) by :func:`jupyter_exec.state.generations.install_code`. Every path is relative
to the work dir (the kernel's working directory, proven by the state module's probe).

* A ``post_run_cell`` hook adds the names the cell changed to ``dirty`` (silent runs,
  the host's own, trigger no hook).
* With each recorded cell's reply the host evaluates :func:`commit` (a
  ``user_expressions`` entry, so no extra round trip). A small change (at most
  :data:`FORK_FROM` bytes in memory) is pickled there (protocol 5; array and DataFrame
  buffers out of band, read in place) and written at once or by a writer thread; a cell
  that changed nothing costs a dict copy. A large change is written by a **forked child**
  (Redis' background save): the commit ``os.fork()``s, the child pickles, hashes and writes
  from its copy-on-write image of the namespace as the cell left it, reports on a pipe and
  ``os._exit``s; the writer thread reads the report and reaps the child (in order with the
  other generations: one child at a time, a large change meanwhile is forked at the next
  cell's start). Without a fork (memory short, no ``os.fork``) the kernel pickles it itself
  and the next cell's ``pre_run_cell`` waits until the writer is done with buffers that cell
  could change; the reply's ``notes`` say why.
* Objects are stored as **chunks**: each part of the pickle cut into :data:`CHUNK` bytes,
  ``objects/<xxh3-128>`` (``<sha256>`` in a kernel without xxhash), written only when no
  such file exists (an unchanged chunk is never written again, nor hashed with sha256); the
  manifest lists every chunk's name, sha256 and size. The generation's manifest
  ``gen-<n>.json`` is written last (tmp, rename: a kill mid-write leaves the previous
  generation whole); what the host no longer needs is pruned (every :data:`PRUNE_EVERY`
  small generations) and ``(n, sha256 of the manifest)`` noted, which :func:`commit`
  returns to the host to sign; the files are fsynced by the host's :func:`flush`
  (``close()``, ``Session.flush()``), never on a cell's path (a killed process loses
  nothing it wrote).
* :func:`commit` waits for its own generation (so the reply carries it, and nothing is
  left writing in the work dir once the caller has the result) when that is cheap: the
  write is small (:data:`SMALL_WRITE`), or the cell ran :data:`DURABLE_AFTER` or more and
  the write should take at most :data:`DURABLE_SHARE` of its run at the writer's measured
  rate (durable when it counts; never waited for longer than that share). A larger write
  goes on in the background and is signed when done (a shorter cell never waits for a
  forked child: the fork is all it pays); the state folder, once made, is never made
  again by a later write: a write whose folder was removed fails, said so (``gone``).
* :func:`load` reads a manifest the host checked (its sha256), every chunk it names (no
  link, no FIFO: ``O_NOFOLLOW`` and a regular file; a plain hex name; its sha256 checked on
  the bytes unpickled), unpickles them all, and only then replaces the namespace: all or
  nothing.

It needs only the standard library and IPython (xxhash when the kernel has it).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import pickle
import platform
import queue
import re
import stat
import sys
import threading
import time
import types
import warnings
from typing import Any

MODULE = "_jupyter_exec_generations"
STATE_MODULE = "_jupyter_exec_state"
FORMAT = "jupyter-exec-generation"
VERSION = 2
"""2: objects stored as chunks (1: one file per object, still loaded)."""
OBJECTS = "objects"
TMP = ".tmp-"
MAX_MANIFEST = 64 << 20
_ADDRESS = re.compile("[0-9a-f]{32}|[0-9a-f]{64}")

folder = ""
"""The state folder, relative to the work dir."""
budget = 0
"""Bytes the objects of this session may take on disk (0: no limit)."""
dirty: set[str] = set()
"""Names changed since the last commit."""
mapping: dict[str, dict[str, Any]] = {}
"""Name -> its stored entry, as of the last commit (what the next generation starts from)."""
skipped: dict[str, str] = {}
"""Names the last commit could not store, and why."""
done: list[list[Any]] = []
"""``[generation, manifest sha256, cells]`` written since the host last asked."""
failed: list[list[Any]] = []
"""``[generation, reason]`` the writer could not write."""
_queue: queue.SimpleQueue[Any] | None = None
_lock = threading.Lock()
_last: list[Any] = []
"""``[manifest number, sha256]`` of the last manifest written (what an unchanged cell reuses)."""
_inflight = 0
"""Generations handed to the writer and not yet written."""
_live = 0
"""Of those, the ones that read buffers a cell could change."""
_idle = threading.Condition()
WRITER_DELAY = 0.003
"""Seconds the writer waits before a generation its commit does not wait for: the cell's
reply leaves first (the writer's Python holds the GIL between its system calls)."""
SMALL_WRITE = 1 << 20
"""Bytes of changed objects a commit always waits for (a millisecond or two to write)."""
SMALL_WAIT_MOST = 5.0
"""Seconds a commit waits for a small write at most (a disk that stalls)."""
DURABLE_AFTER = 1.0
"""Seconds of run from which a cell waits for a larger write of its state (a host killed
right after it then re-runs no completed cell that ran this long), when that is cheap
(:data:`DURABLE_SHARE`). A shorter cell's larger write goes on after its reply (the host
signs it when an idle ask or the next reply says it is done): a 0.2 s cell that changed a
column of a 1 GB frame paid 2 to 3 times its run waiting for the forked child."""
DURABLE_SHARE = 1.0
"""The most of its run a cell waits for its state's write (expected at the writer's rate,
and bounded by it): all of it. A cell whose run took longer than its state takes to save is
signed before its result returns ("durable when it counts": a host killed right after it
re-runs no completed cell of a second or more); a write that should take longer than the
run goes on after the reply."""
_rate = 400e6
"""Bytes per second the writer stores (hash and write), measured on writes of 1 MB or more."""
_queued = 0
"""Bytes handed to the writer and not yet written."""
_cell_started = 0.0
"""``time.monotonic()`` when the current cell started (``pre_run_cell``)."""
_folder_made = False
"""This process made (or found) the state folder: a later write never makes it again."""
_unsynced: dict[str, None] = {}
"""Paths written and not fsynced yet, in order (:func:`_sync`)."""
PRUNE_EVERY = 16
"""Generations of small changes between two prunes (a prune lists and removes files: 0.6 ms
a cell, when every cell pruned); a large change, ``flush`` and a budget near full prune."""
_unpruned = 0
_prune_from = 0
_used: int | None = None
"""Bytes in the objects folder as this process's writes left it (None: counted again at the
next write). Counting stats every object file: 0.08-0.25 ms of every small commit here, more
as objects accumulate; a prune, a child's write or a failed one count again."""
"""Generations written since the last prune, and the oldest the host needed then."""
_refs: dict[str, frozenset[str]] = {}
"""Manifest file name -> the object hashes it names (what pruning keeps), as written."""
CHUNK = 4 << 20
"""Bytes of one stored chunk: a changed column of a large frame rewrites its own chunks."""
_fast: Any
try:
    from xxhash import xxh3_128 as _fast
except ImportError:  # a kernel without xxhash: chunks are named by their sha256
    _fast = None
"""The fast hash naming chunks (xxh3-128, 15x sha256 on a GB), or None."""
_known: dict[str, str] = {}
"""Chunk address -> its sha256, for chunks this process wrote or loaded (a chunk met again
is not hashed with sha256 nor written again while its file is there)."""
_learned: dict[str, str] = {}
"""Of those, the ones a forked child learned (reported to the parent)."""
FORK_FROM = SMALL_WRITE
"""Bytes of changed objects (estimated from their sizes in memory) from which a commit
forks a child to pickle, hash and write them: the cell pays for the fork (a few ms for
a GB: copy-on-write), not for the bytes. Smaller changes are written in the commit."""
fork_writes = hasattr(os, "fork") and hasattr(os, "register_at_fork")
"""Whether large changes are written by a forked child (else by the writer thread)."""
MEMORY_MARGIN = 256 << 20
"""Bytes of memory a fork must leave free beyond the changed objects (the copies the next
cells may make of the pages the child still reads); less than that: no fork."""
_deferred: list[Any] = []
"""A child job whose fork waits for the running child (taken by the next cell's start)."""
notes: list[str] = []
"""Why a large change was not written by a forked child (said once to the host)."""
_parent_pid = 0
forked = 0
"""Writer children forked by this process (tests, benchmarks)."""


class FolderGone(OSError):
    """The state folder was removed after this process wrote to it (its work dir went)."""


def install(relative: str, budget_bytes: int) -> None:
    """Hook the cells (once per process) and remember the folder and the budget."""
    global folder, budget, _folder_made, _parent_pid, _used
    _parent_pid = os.getpid()
    if relative != folder:  # a fork's session writes a folder of its own: made on first write
        _folder_made = False
        _used = None
    folder, budget = relative, int(budget_bytes)
    shell = sys.modules["IPython"].get_ipython()
    if not getattr(shell, "_jupyter_exec_generation_hooks", False):
        shell.events.register("post_run_cell", _post_run_cell)
        shell.events.register("pre_run_cell", _pre_run_cell)
        shell._jupyter_exec_generation_hooks = True
        os.register_at_fork(after_in_child=_forked)


def _forked() -> None:
    """A fork has no writer thread: a new one starts on its first commit."""
    global _queue, _lock, _inflight, _live, _idle, _queued, _used
    _queue, _lock, _inflight, _live, _idle = None, threading.Lock(), 0, 0, threading.Condition()
    _queued = 0
    _used = None
    _deferred.clear()
    _last[:] = []


def _post_run_cell(result: Any = None) -> None:
    state = sys.modules.get(STATE_MODULE)
    if state is not None:
        dirty.update(state.changed)


def _root() -> str:
    return os.path.join(sys.modules[STATE_MODULE].root, folder)


# -- saving -------------------------------------------------------------------------------


def commit(generation: int, cells: int, full: bool, keep_from: int) -> dict[str, Any]:
    """Hand generation ``generation`` (the state after ``cells`` recorded cells) to the
    writer; what was written since the last call. ``full``: store every name (a kernel new
    to this folder). ``keep_from``: the oldest generation the host still needs."""
    global dirty, mapping
    _start_deferred(wait=True)  # (a cell's start took it already: never waits here)
    state = sys.modules[STATE_MODULE]
    names = set(state.user_names())
    todo = names if full else (dirty & names)
    entries = {} if full else {n: e for n, e in mapping.items() if n in names}
    lost = {n: r for n, r in skipped.items() if n in names and n not in todo}
    pending: list[tuple[str, dict[str, Any], list[Any]]] = []
    live = False  # buffers a later cell could change: that cell waits for the writer
    child: _Child | None = None
    if todo:
        ns = state._shell().user_ns
        estimate = sum(_size_of(ns[n]) for n in todo)
        if estimate >= FORK_FROM:
            child = _Child(estimate)
        dumps, _about = state._serialiser()
        for name in sorted(todo):
            entries.pop(name, None)
            lost.pop(name, None)
            value = ns[name]
            if isinstance(value, types.ModuleType):
                if getattr(value, "__spec__", None) is None:
                    lost[name] = "a module made at run time cannot be imported again"
                else:
                    entries[name] = {"kind": "module", "module": value.__name__}
                continue
            if child is not None:  # pickled by the child (or by :func:`_start` without one)
                entries[name] = child.names[name] = {
                    "kind": "pickle",
                    "type": state._type_name(value),
                    "modules": [],
                }
                continue
            used: set[str] = set()
            try:
                parts = dumps(value, used)
            except Exception as exc:  # whatever the object's own reducer raises
                lost[name] = f"{type(exc).__name__}: {exc}".strip()[:300]
                continue
            kept = [memoryview(p) for p in parts]
            live = live or any(not v.readonly for v in kept[1:])
            entry = {"kind": "pickle", "type": state._type_name(value), "modules": sorted(used)}
            entries[name] = entry
            pending.append((name, entry, kept))
    size = sum(v.nbytes for _n, _e, parts in pending for v in parts)
    if live and size <= SMALL_WRITE:  # a copy of a small change: the next cell never waits
        pending = [(n, e, [p[0], *(bytes(v) for v in p[1:])]) for n, e, p in pending]
        live = False
    if child is not None:
        size = child.estimate
    dirty = set()
    mapping = entries
    same = not pending and child is None and lost == skipped and not full
    skipped.clear()
    skipped.update(lost)
    ran = time.monotonic() - _cell_started if _cell_started else 0.0
    written: threading.Event | None = None
    inline: tuple[Any, ...] | None = None
    start: tuple[Any, ...] | None = None
    global _inflight, _queued
    with _lock:
        if same and _inflight == 0 and _last and not todo:
            # Nothing changed: this generation is the last manifest, for one more cell.
            done.append([generation, _last[1], cells, _last[0]])
        else:
            global _live
            _inflight += 1
            if live:
                with _idle:
                    _live += 1
            idle = _inflight == 1  # the writer has nothing else: write here, now
            _queued += size
            share = DURABLE_SHARE * ran if ran >= DURABLE_AFTER else 0.0
            wait = _queued <= SMALL_WRITE or _queued / _rate <= share
            written = threading.Event()
            body = {
                "generation": generation,
                "cells": cells,
                "keep_from": keep_from,
                "live": live,
                "size": size,
                "queued": size,
                "waited": wait,
            }
            job = (body, dict(entries), child or pending, dict(lost), written)
            if child is not None:
                start = job
                _writer().put(job)
            elif wait and idle and size <= SMALL_WRITE:
                inline = job
            else:
                _writer().put(job)
            if not wait:
                written = None
            limit = SMALL_WAIT_MOST if _queued <= SMALL_WRITE else share
    if start is not None:
        if idle:  # the writer has nothing before it: fork now (or once the reply is sent)
            start[2].reached.set()
        _deferred.append(start)  # else the next cell's start forks it (or a flush, a load)
        if written is not None:  # waited for: forked here
            _start_deferred(wait=False)
        else:
            _fork_after_reply(start[2])
    if inline is not None:
        _run(*inline)
    elif written is not None:  # (the lock is free: the writer takes it to report)
        written.wait(limit)
    with _lock:
        reported, done[:] = list(done), []
        broken, failed[:] = list(failed), []
    said, notes[:] = list(notes), []
    return {"done": reported, "failed": broken, "ran": round(ran, 6), "notes": said}


def _fork_after_reply(child: _Child) -> None:
    """Fork ``child`` right after the cell's reply is sent, not before it: a callback of the
    kernel's event loop, which runs before the loop takes the next message (and the next
    cell's start, a flush and a load fork it first if it has not run). The cell's result
    leaves without the fork's tens of milliseconds for a GB. Forked here when the kernel
    runs no event loop, or when it will not fork (memory short, no ``os.fork``): the
    reply then says why."""
    events = sys.modules.get("asyncio")
    loop = None
    with contextlib.suppress(RuntimeError, AttributeError):
        loop = events.get_running_loop() if events is not None else None
    if loop is None or not fork_writes or _memory_short(child.estimate):
        _start_deferred(wait=False)
        return
    loop.call_soon(_start_deferred, False)


def _size_of(value: Any) -> int:
    """Bytes ``value`` holds in memory, quickly: arrays and frames fully, others shallowly
    (what decides whether a child writes it)."""
    with contextlib.suppress(Exception):
        usage = getattr(value, "memory_usage", None)
        if callable(usage) and hasattr(value, "columns"):  # a DataFrame
            return int(usage(index=True, deep=False).sum())
        nbytes = getattr(value, "nbytes", None)
        if isinstance(nbytes, int):
            return nbytes
    with contextlib.suppress(Exception):
        return sys.getsizeof(value)
    return 0


# -- the forked writer ----------------------------------------------------------------------


class _Child:
    """The large names of one generation, pickled, hashed and written by a forked child
    from its copy-on-write image of the kernel (Redis' background save): the cell pays for
    the fork, the writer thread waits for the child's report and takes it in order."""

    def __init__(self, estimate: int) -> None:
        self.estimate = estimate
        self.names: dict[str, dict[str, Any]] = {}
        """Name -> its entry (shared with ``mapping``: later generations see its hash)."""
        self.pid = 0
        self.fd = -1
        self.pending: list[Any] = []
        """Without a child (:func:`_start` could not fork): the names pickled here."""
        self.started = threading.Event()
        self.reached = threading.Event()
        """The writer wrote every generation before this one (their hashes are in the
        entries the child's manifest names): it may fork."""

    def finish(
        self, body: dict[str, Any], entries: dict[str, Any], lost: dict[str, str], synced: list[str]
    ) -> str:
        """In the writer thread: the manifest's sha256, once the child wrote it (or the
        generation written here when there is no child)."""
        global _unpruned, _prune_from, _used
        self.reached.set()
        self.started.wait()
        if not self.pid:
            return _write_generation(body, entries, self.pending, lost, synced)
        _used = None  # the child wrote chunks this process did not count
        try:
            data = bytearray()
            while chunk := os.read(self.fd, 1 << 16):  # (the child closes it once it reported)
                data += chunk
        finally:
            os.close(self.fd)
        try:
            report = json.loads(data)
        except ValueError:
            dirty.update(self.names)  # the next commit stores them again
            status = self.reap()
            raise OSError(
                f"the writer process ended before it wrote (wait status {status})"
            ) from None
        if report.get("error"):
            dirty.update(self.names)
            problem = FolderGone if report.get("gone") else OSError
            raise problem(str(report["error"]))
        for name, entry in report["names"].items():
            kept = self.names[name]
            kept.clear()
            kept.update(entry)
        lost.update(report["lost"])
        synced += report["synced"]
        _known.update(report["learned"])
        _refs[f"gen-{body['generation']}.json"] = frozenset(report["refs"])
        _unpruned, _prune_from = int(report["unpruned"]), int(body["keep_from"])
        body["size"], body["took"] = int(report["size"]), float(report["took"])
        return str(report["digest"])

    def reap(self) -> int:
        """Wait for the child to end (it sends its files to disk after its report, and the
        next child forks only once it ended: one copy-on-write image at a time); its wait
        status. Never a zombie."""
        pid, self.pid = self.pid, 0
        if not pid:
            return 0
        with contextlib.suppress(ChildProcessError):
            return os.waitpid(pid, 0)[1]
        return 0


def _start(job: tuple[Any, ...]) -> None:
    """Fork the child that writes ``job`` (in the main thread, between cells: the child's
    image is the state the cell left); when it cannot fork, pickle here and say why."""
    body, entries, child, lost, _written = job
    why = _fork(body, entries, child, lost) if fork_writes else "no os.fork here"
    if why is None:
        return
    notes.append(f"the state of a large change was written in the kernel, not by a child: {why}")
    global _live
    ns = sys.modules[STATE_MODULE]._shell().user_ns
    child.pending = _pickled(child.names, ns)
    if any(not v.readonly for _n, _e, parts in child.pending for v in parts[1:]):
        body["live"] = True  # the next cell waits for the writer to read them
        with _idle:
            _live += 1
    child.started.set()


def _pickled(names: dict[str, dict[str, Any]], ns: dict[str, Any]) -> list[Any]:
    """Each of ``names`` pickled (buffers read in place); an entry that cannot be says why."""
    dumps, _about = sys.modules[STATE_MODULE]._serialiser()
    pending = []
    for name, entry in names.items():
        used: set[str] = set()
        try:
            parts = dumps(ns[name], used)
        except Exception as exc:  # whatever the object's own reducer raises
            entry["skipped"] = f"{type(exc).__name__}: {exc}".strip()[:300]
            continue
        entry["modules"] = sorted(used)
        pending.append((name, entry, [memoryview(p) for p in parts]))
    return pending


def _fork(
    body: dict[str, Any], entries: dict[str, Any], child: _Child, lost: dict[str, str]
) -> str | None:
    """Fork ``child``; None when it runs, else why it could not."""
    global _parent_pid
    short = _memory_short(child.estimate)
    if short:
        return short
    read, write = os.pipe()
    _parent_pid = os.getpid()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded ... fork()"
            pid = os.fork()
    except OSError as exc:
        os.close(read)
        os.close(write)
        return f"fork failed: {exc}"
    if pid == 0:  # pragma: no cover (the child: measured by what it writes)
        os.close(read)
        _child_main(write, body, entries, child, lost)
    os.close(write)
    global forked
    forked += 1
    child.pid, child.fd = pid, read
    child.started.set()
    return None


def _child_main(
    fd: int, body: dict[str, Any], entries: dict[str, Any], child: _Child, lost: dict[str, str]
) -> None:
    """The child: pickle, hash and write one generation, report it, exit. Only this thread
    lives here (the kernel's others stayed in the parent): nothing but pickling and file
    writes, no output, no lock of the parent's, ``os._exit``."""
    report: dict[str, Any]
    synced: list[str] = []
    try:
        gc.disable()  # a collection would copy every page it touches
        with contextlib.suppress(OSError):
            os.nice(10)  # the kernel's next cells first
        _die_with_parent()
        # the one the OOM killer takes first
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
        started = time.monotonic()
        _learned.clear()
        pending = _pickled(child.names, sys.modules[STATE_MODULE]._shell().user_ns)
        body["size"] = sum(v.nbytes for _n, _e, parts in pending for v in parts)
        digest = _write_generation(body, entries, pending, lost, synced)
        report = {
            "digest": digest,
            "names": child.names,
            "lost": lost,
            "synced": synced,
            "refs": sorted(_hashes(entries)),
            "learned": _learned,
            "unpruned": _unpruned,
            "size": body["size"],
            "took": time.monotonic() - started,
        }
    except BaseException as exc:
        report = {
            "error": f"{type(exc).__name__}: {exc}"[:300],
            "gone": isinstance(exc, FolderGone),
        }
    try:
        view = memoryview(json.dumps(report).encode())
        while view:
            view = view[os.write(fd, view) :]
        os.close(fd)  # the writer thread has the report: the generation is signed meanwhile
        if "error" not in report:
            _drop_cache(synced)
    finally:
        os._exit(0)


def _die_with_parent() -> None:
    """The child ends with the kernel (Linux): a killed kernel leaves no writer behind."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    if os.getppid() != _parent_pid:  # it died before that
        os._exit(0)


def _memory_short(estimate: int) -> str | None:
    """Why forking now risks the memory (None: it does not): the next cells may copy every
    page of the changed objects the child still reads, so that much must be free."""
    free = _memory_free()
    if free is None or free >= estimate + MEMORY_MARGIN:
        return None
    return f"memory short ({free >> 20} MB free, {estimate >> 20} MB to write)"


def _memory_free() -> int | None:
    """Bytes of memory available to this process: the machine's, or its cgroup's if less."""
    found: list[int] = []
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        with contextlib.suppress(OSError, ValueError):
            with open(limit_file) as f:
                limit = f.read().strip()
            if limit != "max" and int(limit) < 1 << 60:  # (v1 says "no limit" with 2**63)
                with open(usage_file) as f:
                    found.append(int(limit) - int(f.read().strip()))
    return min(found) if found else None


def _start_deferred(wait: bool) -> None:
    """Fork the generation that waits for the writer (one child at a time, and the
    generations before it written: its manifest names their chunks), in the main thread,
    with the namespace still as its cell left it; ``wait``: until the writer is there."""
    if not _deferred:
        return
    child = _deferred[0][2]
    if not wait and not child.reached.is_set():
        return
    child.reached.wait()
    _start(_deferred.pop(0))


def _pre_run_cell(info: Any = None) -> None:
    """A cell waits until the writer is done with buffers it could change (an array the
    last cell made): the writer reads them in place, never copied on the cell's path."""
    global _cell_started
    _start_deferred(wait=True)  # a large change queued behind the running child
    with _idle:
        while _live:
            _idle.wait()
    _cell_started = time.monotonic()


def _writer() -> queue.SimpleQueue[Any]:
    global _queue
    if _queue is None:
        _queue = queue.SimpleQueue()
        threading.Thread(target=_write_loop, args=(_queue,), daemon=True).start()
    return _queue


def _write_loop(jobs: queue.SimpleQueue[Any]) -> None:
    while True:
        job = jobs.get()
        if job[0] == "flush":
            job[1].set()
            continue
        if not job[0]["waited"] and not isinstance(job[2], _Child):
            time.sleep(WRITER_DELAY)
        _run(*job)


def _run(
    body: dict[str, Any],
    entries: dict[str, dict[str, Any]],
    pending: Any,
    lost: dict[str, str],
    written: threading.Event,
) -> None:
    """Write one generation handed over by :func:`commit` and say so (``done`` or
    ``failed``, then ``written``); in the writer thread, or in the commit itself when the
    writer had nothing else to do (no thread to wake on a small cell's path)."""
    global _queued, _rate
    number = body["generation"]
    started = time.monotonic()
    synced: list[str] = []
    try:
        if isinstance(pending, _Child):
            digest = pending.finish(body, entries, lost, synced)
        else:
            digest = _write_generation(body, entries, pending, lost, synced)
    except Exception as exc:  # the disk is full, the folder was removed: told, not fatal
        with _lock:
            _queued -= body["queued"]
            _last[:] = []
        _released(body)
        with _lock:
            why = f"{type(exc).__name__}: {exc}"[:300]
            failed.append([number, why, "gone" if isinstance(exc, FolderGone) else ""])
        written.set()
        _ended(pending)
        return
    took = body.get("took") or time.monotonic() - started
    with _lock:
        _queued -= body["queued"]
        _last[:] = [number, digest]
        done.append([number, digest, body["cells"], number])
        if body["queued"] >= 1 << 20 and took > 0:  # bytes handed over (a child's: in memory)
            _rate = (_rate + body["queued"] / took) / 2
    _released(body)
    written.set()
    _sync(synced)
    _ended(pending)


def _ended(pending: Any) -> None:
    """A generation is reported (the commit, a flush or the idle ask may sign it): a child
    that wrote it is reaped once it pushed its files to disk, and only then is the writer
    idle (a large change that comes meanwhile forks after it: one child, one copy-on-write
    image, at a time)."""
    global _inflight
    if isinstance(pending, _Child):
        pending.reap()
    with _lock:
        _inflight -= 1


def _released(body: dict[str, Any]) -> None:
    """The writer is done with a generation's buffers: a waiting cell may run."""
    global _live
    if body.get("live"):
        with _idle:
            _live -= 1
            _idle.notify_all()


def flush(timeout: float = 60.0) -> dict[str, Any]:
    """Wait until the writer wrote everything handed to it; what it wrote (for tests and
    for a host that must sign before it stops)."""
    _start_deferred(wait=timeout > 0)
    marker = threading.Event()
    if _queue is not None:
        _queue.put(("flush", marker, None, None, None))
    deadline = time.monotonic() + timeout
    while _queue is not None and not marker.is_set() and time.monotonic() < deadline:
        time.sleep(0.002)
    with _lock:
        idle = _inflight == 0
    # An explicit flush (close(), Session.flush(): not the idle session's quick ask, which
    # changes nothing in the folder): prune and fsync now. No commit can come meanwhile.
    if idle and timeout > 0:
        if _unpruned:
            with contextlib.suppress(OSError):
                _prune(_root(), _prune_from)
        _sync_all()
    with _lock:
        reported, done[:] = list(done), []
        broken, failed[:] = list(failed), []
    return {"done": reported, "failed": broken}


def _write_generation(
    body: Any,
    entries: dict[str, dict[str, Any]],
    pending: Any,
    lost: dict[str, str],
    synced: list[str],
) -> str:
    """Write one generation's new objects and its manifest; the files written are added to
    ``synced`` (fsynced afterwards, :func:`_sync`)."""
    global _unpruned, _prune_from, _used
    state = sys.modules[STATE_MODULE]
    root = _root()
    objects = os.path.join(root, OBJECTS)
    _folders(root, objects)
    used_bytes = 0
    if budget:
        used_bytes = _used if _used is not None else _stored_bytes(objects)
    if budget and _unpruned and used_bytes + body["size"] > budget:  # dead objects count too
        _prune(root, int(body["keep_from"]))
        used_bytes = _stored_bytes(objects)
    modules: set[str] = set()
    _used = None  # (until every chunk below is written)
    for _name, entry, parts in pending:
        stored = _store_chunks(objects, parts, used_bytes, synced)
        if stored is None:
            entry["skipped"] = f"over the session's state budget ({budget >> 20} MB)"
            continue
        chunks, sizes, added = stored
        used_bytes += added
        entry.update(chunks=chunks, size=sum(sizes), parts=sizes)
        modules.update(entry.pop("modules", ()))
    _used = used_bytes if budget else None
    for name, entry in list(entries.items()):
        if entry.get("kind") == "pickle" and not _is_stored(entry):  # not stored: lost
            del entries[name]
            lost[name] = str(entry.get("skipped") or "not stored")
        elif entry.get("kind") == "module":
            modules.add(str(entry["module"]).partition(".")[0])
    libraries = {m: state._version(m) for m in sorted(modules) if state._third_party(m)}
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "generation": body["generation"],
        "cells": body["cells"],
        "created": time.time(),
        "names": entries,
        "skipped": lost,
        "environment": {
            "python": platform.python_version(),
            "implementation": sys.implementation.name,
            "serialiser": state._serialiser()[1],
            "libraries": {k: v for k, v in libraries.items() if v is not None},
        },
    }
    data = json.dumps(manifest, sort_keys=True).encode()
    name = f"gen-{body['generation']}.json"
    _write_file(os.path.join(root, name), [data], atomic=True)
    synced += [os.path.join(root, name), objects, root]
    _refs[name] = _hashes(entries)  # (manifests never change once written: cached)
    _unpruned, _prune_from = _unpruned + 1, int(body["keep_from"])
    if body["size"] >= SMALL_WRITE or _unpruned >= PRUNE_EVERY:
        _prune(root, _prune_from)
    return hashlib.sha256(data).hexdigest()


def _store_chunks(
    objects: str, parts: list[Any], used_bytes: int, synced: list[str]
) -> tuple[list[list[Any]], list[int], int] | None:
    """One object's parts cut into chunks of :data:`CHUNK` bytes (each part on its own:
    an unchanged buffer gives the same chunks), each named by its fast hash; the chunks
    not stored yet hashed with sha256 (what a load checks) and written. Its
    ``[[address, sha256, size], ...]``, the parts' sizes and the bytes added; None when the
    new chunks would pass the budget (nothing written)."""
    chunks: list[list[Any]] = []
    sizes: list[int] = []
    new: list[tuple[int, memoryview]] = []
    for part in parts:
        view = memoryview(part).cast("B")
        sizes.append(len(view))
        for at in range(0, len(view), CHUNK):
            piece = view[at : at + CHUNK]
            address = _address(piece)
            known = _known.get(address)
            if known is None or not os.path.lexists(os.path.join(objects, address)):
                new.append((len(chunks), piece))
            chunks.append([address, known, len(piece)])
    added = sum(len(piece) for _index, piece in new)
    if budget and used_bytes + added > budget:
        return None
    added = 0
    for index, piece in new:
        address = chunks[index][0]
        digest = address if _fast is None else hashlib.sha256(piece).hexdigest()
        chunks[index][1] = _known[address] = _learned[address] = digest
        path = os.path.join(objects, address)
        if not os.path.lexists(path):
            _write_file(path, [piece])
            synced.append(path)
            added += len(piece)
    return chunks, sizes, added


def _address(piece: memoryview) -> str:
    """A chunk's name: its xxh3-128 when the kernel has xxhash, else its sha256."""
    if _fast is None:
        return hashlib.sha256(piece).hexdigest()
    return str(_fast(piece).hexdigest())


def _is_stored(entry: dict[str, Any]) -> bool:
    return "chunks" in entry or "hash" in entry  # (a whole object: an older version's)


def _folders(root: str, objects: str) -> None:
    """The state folder and its objects folder: made by this process's first write (or
    found), then only ever found. One removed since (the work dir went with it) is not
    made again in its place: :class:`FolderGone`."""
    global _folder_made
    if _folder_made:
        for path in (root, objects):
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                raise FolderGone(f"the state folder {folder!r} was removed") from None
            if not stat.S_ISDIR(info.st_mode):
                raise FolderGone(f"the state folder {folder!r} is not a folder any more")
        return
    _private_folder(root)
    _private_folder(objects)
    _folder_made = True


def _sync(paths: list[str]) -> None:
    """Note what a generation wrote, to fsync on the host's :func:`flush` (``close()``,
    ``Session.flush()``). A killed process loses nothing the kernel wrote (it is in the
    page cache); the fsync is against a power loss, and not per cell: an fsync makes the
    file system's next changes wait for its journal (a prune of 16 generations took 116 ms
    beside a thread fsyncing each one, 0.6 ms without)."""
    _unsynced.update(dict.fromkeys(paths))


def _sync_all() -> None:
    """fsync everything written since the last call (files, then folders; a path removed
    meanwhile, a pruned manifest, is skipped). Changes no name."""
    paths = list(_unsynced)
    _unsynced.clear()
    folders = {_root(), os.path.join(_root(), OBJECTS)}
    fsync_path = sys.modules[STATE_MODULE].fsync_path
    for path in [p for p in paths if p not in folders] + [p for p in paths if p in folders]:
        fsync_path(path, os.O_RDONLY | os.O_NOFOLLOW)


def _private_folder(path: str) -> None:
    """``path`` made if missing, readable by its owner only (0700): a session's state
    (pickles of its variables) is its user's alone, whoever else can read the work dir."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) != 0o700:
        with contextlib.suppress(OSError):  # made 0755 by an older version: made private
            os.chmod(path, 0o700)


def _write_file(path: str, parts: list[Any], atomic: bool = False) -> None:
    """Write ``parts`` to ``path`` through a temporary file, then renamed (``atomic``: the
    name is new or replaced whole; the fsync comes later, :func:`_sync`)."""
    head, tail = os.path.split(path)
    temp = os.path.join(head, f"{TMP}{tail}.{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        for part in parts:
            view = memoryview(part).cast("B")
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.rename(temp, path)


def _drop_cache(paths: list[str]) -> None:
    """A forked writer's files, once it reported them: on disk, and out of the page cache.
    Hundreds of MB of chunks left in the cache made the kernel's next large allocations
    fault page by page (measured: ``df['a'] * k`` on a 1 GB frame 3 to 5 s instead of
    0.3 s, 145,000 minor faults instead of 5,500); the child waits for the disk, the kernel
    does not, nor the generation's signature (a kill of the kernel or the host leaves the
    page cache: the files are there)."""
    for path in paths:
        with contextlib.suppress(OSError, AttributeError):
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.fdatasync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _stored_bytes(objects: str) -> int:
    total = 0
    with os.scandir(objects) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                total += entry.stat(follow_symlinks=False).st_size
    return total


def _prune(root: str, keep_from: int) -> None:
    """Remove generations older than ``keep_from`` and objects no kept generation names."""
    global _unpruned, _used
    _unpruned = 0
    _used = None
    referenced: set[str] = set()
    with os.scandir(root) as entries:
        listing = [e.name for e in entries]
    for name in listing:
        number = _number(name)
        if number is None:
            if name.startswith(TMP):  # a write a killed kernel left: never read
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(root, name))
            continue
        if number < keep_from:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(root, name))
            _refs.pop(name, None)
            continue
        if name not in _refs:  # one this process did not write: read once
            with contextlib.suppress(Exception):
                manifest = json.loads(_read(os.path.join(root, name), MAX_MANIFEST))
                _refs[name] = _hashes(manifest["names"])
        referenced |= _refs.get(name, frozenset())
    objects = os.path.join(root, OBJECTS)
    with os.scandir(objects) as entries:
        for entry in entries:
            if entry.name not in referenced:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _hashes(names: dict[str, dict[str, Any]]) -> frozenset[str]:
    """The object files ``names`` uses (what pruning keeps)."""
    found = {str(e["hash"]) for e in names.values() if e.get("hash")}
    for entry in names.values():
        found.update(str(c[0]) for c in entry.get("chunks") or ())
    return frozenset(found)


def _number(name: str) -> int | None:
    if name.startswith("gen-") and name.endswith(".json") and name[4:-5].isdigit():
        return int(name[4:-5])
    return None


# -- loading ------------------------------------------------------------------------------


def _read(path: str, limit: int) -> bytearray:
    """A regular file's bytes, never through a link, never from a FIFO or device."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{os.path.basename(path)} is not a regular file")
        if info.st_size > limit:
            raise OSError(f"{os.path.basename(path)} is larger than {limit} bytes")
        data = bytearray(info.st_size)  # writable: arrays unpickled from it stay writable
        view, at = memoryview(data), 0
        while at < len(data) and (got := os.readv(fd, [view[at:]])):
            at += got
        if at != len(data) or os.read(fd, 1):
            raise OSError(f"{os.path.basename(path)} changed size while it was read")
        return data
    finally:
        os.close(fd)


def _read_into(path: str, view: memoryview) -> None:
    """Fill ``view`` with a regular file's bytes (exactly as many), never through a link,
    never from a FIFO or device."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != len(view):
            raise OSError(f"{os.path.basename(path)} is not a chunk of {len(view)} bytes")
        at = 0
        while at < len(view) and (got := os.readv(fd, [view[at:]])):
            at += got
        if at != len(view) or os.read(fd, 1):
            raise OSError(f"{os.path.basename(path)} changed size while it was read")
    finally:
        os.close(fd)


def _reads(
    root: str, name: str, entry: dict[str, Any], raws: dict[str, bytearray], fast: bool
) -> list[Any]:
    """The reads that fill ``raws[name]`` with the object of ``entry``, each checked against
    its sha256 (with ``fast``, against its xxh3-128 name where it has one): one per chunk (a
    whole object, an older version's: one). The chunk list is checked here, before anything
    is read."""
    if "hash" in entry:  # a whole object (an older version's)

        def whole() -> None:
            raw = _read(os.path.join(root, OBJECTS, entry["hash"]), max(entry["size"], 0))
            if len(raw) != entry["size"] or hashlib.sha256(raw).hexdigest() != entry["hash"]:
                raise ValueError(f"jupyter-exec: the object of {name!r} does not match its hash")
            raws[name] = raw

        return [whole]
    raw = raws[name] = bytearray(entry["size"])  # writable: arrays unpickled stay writable
    view, at = memoryview(raw), 0
    jobs = []
    for address, digest, size in entry["chunks"]:
        if not _ADDRESS.fullmatch(address) or not 0 <= size <= CHUNK or at + size > len(raw):
            raise ValueError(f"jupyter-exec: the chunks of {name!r} are not valid")
        path = os.path.join(root, OBJECTS, address)
        by_name = fast and _fast is not None and len(address) == 32
        jobs.append(_chunk_read(path, view[at : at + size], address if by_name else digest, name,
                                by_name))  # fmt: skip
        at += size
    if at != len(raw):
        raise ValueError(f"jupyter-exec: the chunks of {name!r} are not valid")
    return jobs


def _chunk_read(path: str, piece: memoryview, digest: str, name: str, by_name: bool) -> Any:
    """A read of one chunk into ``piece``, checked against ``digest``: its sha256, or (with
    ``by_name``, which the kernel has xxhash for) its xxh3-128 name."""

    def read() -> None:
        _read_into(path, piece)
        found = _address(piece) if by_name else hashlib.sha256(piece).hexdigest()
        if found != digest:
            raise ValueError(f"jupyter-exec: a chunk of {name!r} does not match its hash")

    return read


def _import_meanwhile(modules: list[str]) -> threading.Thread:
    """Import ``modules`` (those the manifest names: bound to names, or the libraries its
    objects use, e.g. numpy and pandas: half a second) in a thread while the chunks are
    read. A module that cannot be imported there (one that must be imported in the main
    thread) is left to the main thread, as before."""

    def run() -> None:
        import importlib

        for module in modules:
            with contextlib.suppress(Exception):
                importlib.import_module(module)

    thread = threading.Thread(target=run, name="jupyter-exec imports", daemon=True)
    thread.start()
    return thread


def load(generation: int, expected: str, fast: bool = False) -> dict[str, Any]:
    """Replace the namespace with generation ``generation``, whose manifest's sha256 the
    host checked is ``expected``; the names it brought back and those it could not.
    ``fast``: each chunk is checked against its xxh3-128 name (bound by that manifest like
    its sha256, 7x faster to check) instead of its sha256; the host asks for it only where
    no one but the host's own kernels could have written the chunks (see the host's load)."""
    global dirty, mapping
    _start_deferred(wait=True)  # the generation it waits for is the namespace now
    root = _root()
    data = _read(os.path.join(root, f"gen-{generation}.json"), MAX_MANIFEST)
    if hashlib.sha256(data).hexdigest() != expected:
        raise ValueError("jupyter-exec: the generation's manifest changed since it was checked")
    manifest = json.loads(data)
    libraries = (manifest.get("environment") or {}).get("libraries") or {}
    modules = [e["module"] for e in manifest["names"].values() if e["kind"] == "module"]
    importing = _import_meanwhile([*modules, *sorted(libraries)])
    stored = {n: e for n, e in manifest["names"].items() if e["kind"] != "module"}
    raws: dict[str, bytearray] = {}
    jobs = [j for name, entry in stored.items() for j in _reads(root, name, entry, raws, fast)]
    # Every chunk read and checked first (in threads: reading and hashing release the GIL,
    # a large object's chunks spread over them), and only then any object unpickled: a
    # swapped file never reaches pickle. The named modules import meanwhile.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        for _ in pool.map(lambda job: job(), jobs):
            pass
    importing.join()
    for entry in stored.values():  # checked: met again, never hashed nor written again
        _known.update((c[0], c[1]) for c in entry.get("chunks") or ())
    values: dict[str, Any] = {}
    for name, entry in manifest["names"].items():
        if entry["kind"] == "module":
            values[name] = __import__("importlib").import_module(entry["module"])
            continue
        view = memoryview(raws.pop(name))
        parts, at = [], 0
        for size in entry["parts"]:
            parts.append(view[at : at + size])
            at += size
        values[name] = pickle.loads(parts[0], buffers=[pickle.PickleBuffer(p) for p in parts[1:]])
    state = sys.modules[STATE_MODULE]
    ns = state._shell().user_ns
    for name in state.user_names():
        ns.pop(name, None)
    ns.update(values)
    mapping = {n: dict(e) for n, e in manifest["names"].items()}
    _last[:] = []  # the next commit writes a manifest of its own
    dirty = set()
    skipped.clear()
    skipped.update(manifest.get("skipped") or {})
    return {"names": sorted(values), "skipped": dict(skipped)}
