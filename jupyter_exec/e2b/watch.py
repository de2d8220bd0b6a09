"""Watching a sandbox's folder (``files.watch_dir``): its changes as envd's ``FilesystemEvent``\\ s.

envd serves a watch two ways, and both are here: the ``WatchDir`` stream
(the async Python SDK and the JavaScript SDK), and a watcher made by
``CreateWatcher`` whose events ``GetWatcherEvents`` collects until
``RemoveWatcher`` (the sync Python SDK's ``WatchHandle``).

A watcher compares listings of the folder, :data:`POLL` seconds apart,
made by :meth:`~jupyter_exec.e2b.files.SandboxFiles.list`: so it sees
exactly what the sandbox's file API sees, through the same path rules (a
path outside the sandbox, or through a link, is refused before any watch
starts), for a local sandbox and a Docker one alike, whose files are the
same folder. A name that appears is ``CREATE``, one that goes ``REMOVE``,
a changed size or time ``WRITE``, changed permissions ``CHMOD``; a rename
shows as a remove and a create. Names are relative to the watched folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from jupyter_exec.e2b.fields import MAX_DEPTH
from jupyter_exec.e2b.files import SandboxFiles
from jupyter_exec.e2b.sandboxes import Sandbox
from jupyter_exec.exceptions import InvalidArgument, JupyterExecError, SessionNotFound

__all__ = ["POLL", "Watcher", "Watchers", "changes"]

log = logging.getLogger("jupyter_exec.e2b")

POLL = 0.1
"""Seconds between two looks at a watched folder."""
MAX_EVENTS = 10_000
"""Events a watcher keeps for ``GetWatcherEvents`` (the oldest go first past it)."""
MAX_WATCHERS = 64
"""Watchers one sandbox may hold at once."""

State = dict[str, tuple[str, str, str]]
"""A listing: each name's (type, size and time, permissions)."""


def _listing(files: SandboxFiles, path: str, recursive: bool) -> State:
    base = files.paths.shown(files.paths.relative(path)).rstrip("/") + "/"
    state: State = {}
    for entry in files.list(path, MAX_DEPTH if recursive else 1):
        name = str(entry["path"])[len(base) :]
        state[name] = (entry["type"], f"{entry['size']}@{entry['modifiedTime']}", entry["mode"])
    return state


def changes(before: State, after: State) -> list[dict[str, Any]]:
    """The events that turn listing ``before`` into ``after`` (names in sorted order)."""
    events = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if old is None:
            kind = "EVENT_TYPE_CREATE"
        elif new is None:
            kind = "EVENT_TYPE_REMOVE"
        elif old[0] != new[0]:
            events.append({"name": name, "type": "EVENT_TYPE_REMOVE"})
            kind = "EVENT_TYPE_CREATE"
        elif old[1] != new[1]:
            kind = "EVENT_TYPE_WRITE"
        else:
            kind = "EVENT_TYPE_CHMOD"
        events.append({"name": name, "type": kind})
    return events


@dataclass
class Watcher:
    """One watched folder of one sandbox: its last listing, and the events not yet collected."""

    sandbox: Sandbox
    path: str
    recursive: bool
    include_entry: bool = False
    """Each event but a removal carries the entry's ``EntryInfo``, as ``stat`` gives it."""
    id: str = field(default_factory=lambda: f"w-{secrets.token_hex(8)}")
    events: list[dict[str, Any]] = field(default_factory=list)
    state: State = field(default_factory=dict)
    task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """The first listing (a folder that is not there, or not the sandbox's, is refused)."""
        self.state = self.look_now()

    def look_now(self) -> State:
        return _listing(SandboxFiles(self.sandbox.paths), self.path, self.recursive)

    async def look(self) -> list[dict[str, Any]]:
        """The changes since the last look (none if the folder is gone: it is left watching)."""
        try:
            state = await asyncio.to_thread(self.look_now)
        except (OSError, JupyterExecError) as exc:  # gone, or changing under the walk
            log.debug("watching %s of sandbox %s: %s", self.path, self.sandbox.id, exc)
            return []
        found, self.state = changes(self.state, state), state
        if self.include_entry and found:
            await asyncio.to_thread(self._add_entries, found)
        return found

    def _add_entries(self, events: list[dict[str, Any]]) -> None:
        files = SandboxFiles(self.sandbox.paths)
        base = files.paths.shown(files.paths.relative(self.path)).rstrip("/")
        for event in events:
            if event["type"] != "EVENT_TYPE_REMOVE":
                with contextlib.suppress(OSError, JupyterExecError):  # gone since: no entry
                    event["entry"] = files.stat(f"{base}/{event['name']}")

    async def follow(self, send: Callable[[dict[str, Any]], Awaitable[None]],
                     open_: Callable[[], bool]) -> None:  # fmt: skip
        """Send each change as it is seen, while ``open_()`` (the caller is there)."""
        while open_():
            for event in await self.look():
                await send(event)
            await asyncio.sleep(POLL)

    async def collect(self) -> None:
        """Keep the changes for :meth:`Watchers.events`, until removed."""
        while True:
            try:
                found = await self.look()  # before self.events is read: a collect swaps it
                self.events.extend(found)
            except Exception:  # a bug: said, and the watcher goes on
                log.exception("watching %s of sandbox %s failed", self.path, self.sandbox.id)
            del self.events[:-MAX_EVENTS]
            await asyncio.sleep(POLL)


class Watchers:
    """The watchers made by ``CreateWatcher``, each reachable only through its own sandbox."""

    def __init__(self) -> None:
        self._by_sandbox: dict[str, dict[str, Watcher]] = {}

    def create(self, sandbox: Sandbox, path: str, recursive: bool,
               include_entry: bool = False) -> Watcher:  # fmt: skip
        mine = self._by_sandbox.setdefault(sandbox.id, {})
        if len(mine) >= MAX_WATCHERS:
            raise InvalidArgument(f"a sandbox holds at most {MAX_WATCHERS} watchers: remove one")
        watcher = Watcher(sandbox, path, recursive, include_entry)
        watcher.start()
        watcher.task = asyncio.ensure_future(watcher.collect())
        mine[watcher.id] = watcher
        return watcher

    def _get(self, sandbox: Sandbox, watcher_id: object) -> Watcher:
        watcher = self._by_sandbox.get(sandbox.id, {}).get(str(watcher_id))
        if watcher is None or watcher.sandbox is not sandbox:
            raise SessionNotFound(f"this sandbox has no watcher {str(watcher_id)[:100]!r}")
        return watcher

    async def events(self, sandbox: Sandbox, watcher_id: object) -> list[dict[str, Any]]:
        """The events since the last call, a look taken now included: a change made just
        before the call is in its answer, as envd's inotify watcher has it."""
        watcher = self._get(sandbox, watcher_id)
        found = await watcher.look()
        taken, watcher.events = [*watcher.events, *found], []
        return taken

    def remove(self, sandbox: Sandbox, watcher_id: object) -> None:
        watcher = self._get(sandbox, watcher_id)
        del self._by_sandbox[sandbox.id][watcher.id]
        if watcher.task is not None:
            watcher.task.cancel()

    def prune(self, live: set[str]) -> None:
        """Stop the watchers of sandboxes that ended."""
        for sandbox_id in set(self._by_sandbox) - live:
            for watcher in self._by_sandbox.pop(sandbox_id).values():
                if watcher.task is not None:
                    watcher.task.cancel()

    async def close(self) -> None:
        self.prune(set())
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
