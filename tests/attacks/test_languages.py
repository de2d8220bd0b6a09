"""Attacks on the language seam: a REST client smuggling a kernelspec through ``language``,
and commands planted where the Python helpers would run if they reached a shell kernel."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_helpers import JupyterProcess

from jupyter_exec import Session

pytestmark = pytest.mark.languages


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterProcess]:
    with JupyterProcess(tmp_path_factory.mktemp("language-attacks")) as server:
        yield server


@pytest.mark.parametrize(
    "language",
    [
        "ir/../python3",
        "../../../usr/share/jupyter/kernels/ir",
        "python3 --ServerApp.allow_root=True",
        "r\x00python3",
        "$(id)",
        "R; python3",
        "r" * 10_000,
    ],
)
def test_rest_client_cannot_smuggle_a_kernelspec_through_language(
    jupyter: JupyterProcess, language: str
) -> None:
    """Only the canonical names pick a kernel: anything else is a 400 naming the languages,
    before a kernel, a folder or a notebook is made."""
    with httpx.Client(base_url=jupyter.url, headers=jupyter.headers, timeout=60) as client:
        refused = client.post("/api/exec/sessions", json={"name": "smuggle", "language": language})
        assert refused.status_code == 400, refused.text
        assert "use one of python, r, bash" in refused.text
        assert language[:200] not in refused.text or len(language) < 40  # not echoed in bulk
        assert client.get("/api/exec/sessions").json() == []
        assert client.get("/api/kernels").json() == []
    assert not (jupyter.root / "smuggle.ipynb").exists()


def test_planted_commands_never_run_the_python_helpers_in_a_bash_kernel(tmp_path: Path) -> None:
    """An attacker who planted ``import``, ``from`` and ``def`` commands first on PATH waits
    for the session's Python helpers (the stream guard, durable state), which would run them
    as shell commands in a Bash kernel. They are never sent: no planted command runs, through
    cells, automatic checkpoints and a restart."""
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "hijacked"
    for word in ("import", "from", "def", "try", "class", "global"):
        command = planted / word
        command.write_text(f"#!/bin/sh\necho {word} >> {marker}\n")
        command.chmod(command.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{planted}{os.pathsep}{os.environ['PATH']}"}
    with Session(language="bash", work_dir=tmp_path / "w", env=env, checkpoint_every=0.01) as s:
        assert s.execute("type -P import").stdout.strip() == str(planted / "import")  # armed
        for _ in range(3):
            assert s.execute("echo busy").ok
        s.restart()
        assert s.execute("echo again").ok
        kernel = s._async._kernel
        assert kernel is not None
        assert kernel.stream_guard is False
    assert not marker.exists(), marker.read_text()
