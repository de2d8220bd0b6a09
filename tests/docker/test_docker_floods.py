"""Output floods from a Docker kernel: the in-kernel guard writes through the bind mount."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_exec import Session
from jupyter_exec.engine.outputs import DEFAULT_MAX_STREAM_CHARS

pytestmark = pytest.mark.docker


def test_a_docker_kernel_flood_is_bounded_too(tmp_path: Path, kernel_image: str) -> None:
    work = tmp_path / "docker-flood"
    with Session(backend="docker", work_dir=work, docker={"image": kernel_image}) as s:
        received: list[int] = []

        def count(event: dict[str, object]) -> None:
            if event["output_type"] == "stream":
                received.append(len(str(event["text"])))

        e = s.execute("print('d' * (64 << 20))", timeout=120, on_output=count)
        assert sum(received) <= DEFAULT_MAX_STREAM_CHARS  # the rest never left the container
        assert e.status == "ok"
        assert e.truncated
        (spilled,) = e.spilled
        assert spilled.stat().st_size == (64 << 20) + 1
        assert len(e.stdout) < DEFAULT_MAX_STREAM_CHARS * 1.1
    assert not [p for p in os.listdir(work) if p.startswith(".jupyter-exec-probe")]


def test_a_flood_after_a_saved_display_loses_nothing(tmp_path: Path, kernel_image: str) -> None:
    """A root-owned work dir is lent to the kernel's uid, but the files folder the host made for
    a display is not: the guard cannot keep the flood there, so the text comes through whole
    (bounded by the host instead) and the cell still succeeds."""
    work = tmp_path / "lent"
    work.mkdir()
    lines = 2_000
    with Session(
        backend="docker", work_dir=work, docker={"image": kernel_image}, max_output_chars=2_000
    ) as s:
        shown = s.execute("from IPython.display import HTML, display; display(HTML('<b>x</b>'))")
        assert shown.files  # the host made the session's files folder
        flood = s.execute(f"for i in range({lines}): print(i, 'x' * 40)", timeout=120)
        assert flood.status == "ok", flood.error
        assert flood.truncated
        kept = "".join(p.read_text() for p in flood.spilled) if flood.spilled else ""
        assert f"{lines - 1} {'x' * 40}" in kept + flood.stdout  # the last line is not lost
