"""``files.watch_dir`` through the SDK: the sync SDK's watcher (CreateWatcher and its events) and
the async SDK's stream (WatchDir) see files made, written, removed, in the folder watched only.

Each test waits for the event it expects (polling the watcher, or a callback's
``asyncio.Event``) up to a deadline far above any machine's delay, never for a time.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from e2b import AsyncSandbox, FilesystemEventType, Sandbox, SandboxException
from e2b_server_helpers import Running

DEADLINE = 60.0


def events_until(handle: Any, wanted: set[tuple[str, FilesystemEventType]]) -> list[Any]:
    """The watcher's events, collected until every (name, type) in ``wanted`` was seen."""
    seen: list[Any] = []
    deadline = time.monotonic() + DEADLINE
    while not wanted <= {(e.name, e.type) for e in seen}:
        assert time.monotonic() < deadline, seen
        seen += handle.get_new_events()
        time.sleep(0.05)
    return seen


def test_a_watcher_sees_files_made_written_and_removed(api_env: Running) -> None:
    sandbox = Sandbox.create()
    sandbox.files.make_dir("watched")
    sandbox.files.write("elsewhere.txt", "not watched")
    handle = sandbox.files.watch_dir("watched")

    sandbox.files.write("watched/a.txt", "1")
    sandbox.commands.run("mkdir watched/sub && echo more >> watched/a.txt")
    events_until(
        handle, {("a.txt", FilesystemEventType.CREATE), ("sub", FilesystemEventType.CREATE)}
    )
    sandbox.files.remove("watched/a.txt")
    seen = events_until(handle, {("a.txt", FilesystemEventType.REMOVE)})

    assert all(e.name in ("a.txt", "sub") for e in seen)  # nothing from outside the folder
    handle.stop()
    with pytest.raises(SandboxException):
        handle.get_new_events()  # removed: its id opens nothing
    sandbox.kill()


def test_a_recursive_watcher_sees_inside_sub_folders(api_env: Running) -> None:
    sandbox = Sandbox.create()
    sandbox.files.make_dir("tree/deep")
    handle = sandbox.files.watch_dir("tree", recursive=True)
    sandbox.files.write("tree/deep/x.txt", "x")
    events_until(handle, {("deep/x.txt", FilesystemEventType.CREATE)})
    handle.stop()
    sandbox.kill()


def test_the_async_sdk_streams_the_changes(api_env: Running) -> None:
    async def main() -> list[Any]:
        sandbox = await AsyncSandbox.create()
        await sandbox.files.make_dir("streamed")
        got: list[Any] = []
        done = asyncio.Event()

        def on_event(event: Any) -> None:
            got.append(event)
            if event.name == "b.txt" and event.type == FilesystemEventType.CREATE:
                done.set()

        handle = await sandbox.files.watch_dir("streamed", on_event=on_event)
        await sandbox.files.write("streamed/b.txt", "b")
        await asyncio.wait_for(done.wait(), DEADLINE)
        await handle.stop()
        await sandbox.kill()
        return got

    got = asyncio.run(main())
    assert [(e.name, e.type) for e in got][:1] == [("b.txt", FilesystemEventType.CREATE)]


def test_a_folder_that_is_not_there_is_refused(api_env: Running) -> None:
    sandbox = Sandbox.create()
    with pytest.raises(SandboxException):
        sandbox.files.watch_dir("no-such-folder")
    sandbox.kill()
