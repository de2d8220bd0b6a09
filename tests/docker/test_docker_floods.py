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
