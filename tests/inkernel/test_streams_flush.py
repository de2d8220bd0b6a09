"""The stream guard's end of a cell (:class:`jupyter_exec.inkernel.streams.StreamGuard`).

ipykernel's ``flush`` is two hops to its IO thread; the guard flushed both streams at every
cell's end (0.5-0.8 ms of a warm ``1+1``). It flushes only the streams the cell wrote to.
In-process, with stand-in streams and a stand-in shell: no kernel needed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec.inkernel.streams import KEY, StreamGuard


class Stream:
    """A stream that counts its flushes."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.flushes = 0

    def write(self, text: str) -> int:
        self.text.append(text)
        return len(text)

    def flush(self) -> None:
        self.flushes += 1


class Kernel:
    def __init__(self, metadata: dict[str, Any]) -> None:
        self.metadata = metadata

    def get_parent(self, channel: str = "shell") -> dict[str, Any]:
        return {"metadata": self.metadata}


class Shell:
    def __init__(self, metadata: dict[str, Any]) -> None:
        self.kernel = Kernel(metadata)


def _streams(monkeypatch: pytest.MonkeyPatch) -> dict[str, Stream]:
    """Stand-ins for sys.stdout and sys.stderr, set in the test's body (pytest puts its own
    capture back after the fixtures ran)."""
    made = {"stdout": Stream(), "stderr": Stream()}
    for name, stream in made.items():
        monkeypatch.setattr(sys, name, stream)
    return made


def _guard(tmp_path: Path) -> StreamGuard:
    spec = {"budget": 100, "files": {"stdout": "o.rest", "stderr": "e.rest"}}
    return StreamGuard(Shell({KEY: spec}), str(tmp_path))


def test_a_cell_that_writes_nothing_is_not_flushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    streams = _streams(monkeypatch)
    guard = _guard(tmp_path)
    guard.pre_run_cell()
    guard.post_run_cell()
    assert [s.flushes for s in streams.values()] == [0, 0]


def test_only_the_streams_a_cell_wrote_to_are_flushed_and_unwrapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    streams = _streams(monkeypatch)
    guard = _guard(tmp_path)
    plain_write = streams["stdout"].write
    guard.pre_run_cell()
    assert sys.stdout.write is not plain_write  # the guard's, for this cell
    print("printed")
    guard.post_run_cell()
    assert streams["stdout"].flushes == 1
    assert streams["stderr"].flushes == 0
    assert "".join(streams["stdout"].text) == "printed\n"
    assert sys.stdout.write == plain_write  # given back
    guard.pre_run_cell()  # the next cell starts afresh: writes nothing, flushes nothing
    guard.post_run_cell()
    assert streams["stdout"].flushes == 1
