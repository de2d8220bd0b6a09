"""The issue's user story, through ``Session(backend="docker")``."""

from __future__ import annotations

import os
from pathlib import Path

import docker
import pytest

from jupyter_exec import Session
from jupyter_exec.docker.reap import L_PID, LABEL

pytestmark = pytest.mark.docker


def _ours(client: docker.DockerClient) -> list[object]:
    labels = [f"{LABEL}=1", f"{L_PID}={os.getpid()}"]
    return list(client.containers.list(ignore_removed=True, all=True, filters={"label": labels}))


def test_user_story(kernel_image: str, docker_client: docker.DockerClient, tmp_path: Path) -> None:
    work = tmp_path / "analysis"
    work.mkdir()
    os.chown(work, 1000, 1000)
    with Session(backend="docker", work_dir=work, docker={"image": kernel_image}) as s:
        s.execute("import numpy as np; a = np.arange(10)").raise_for_error()
        assert s.execute("a.sum()").text in ("45", "np.int64(45)")  # numpy 2 reprs scalars so
        plot = s.execute(
            "import matplotlib.pyplot as plt\n"
            "plt.plot(a, a ** 2); plt.savefig('squares.png'); plt.show()"
        )
        assert plot.results[0].png
        saved = work / "squares.png"
        assert (saved.stat().st_uid, saved.stat().st_gid) == (1000, 1000)
        network = s.execute("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)")
        assert network.error is not None
        assert len(_ours(docker_client)) == 1
    assert _ours(docker_client) == []


def test_oom_is_reported_and_the_session_recovers(kernel_image: str, tmp_path: Path) -> None:
    with Session(
        backend="docker", work_dir=tmp_path / "w", docker={"image": kernel_image, "memory": "256m"}
    ) as s:
        s.execute("x = 1")
        died = s.execute("hog = bytearray(b'x') * (700 << 20)")
        assert died.error is not None
        assert "out-of-memory killer (memory limit 256m)" in str(died.error)
        assert s.execute("2 + 2").text == "4"  # restarted, usable again


def test_pip_install_in_a_shell_block_with_network(kernel_image: str, tmp_path: Path) -> None:
    """The image is read-only, yet `pip install x` in a shell cell makes `import x` work next.

    Packages go to a writable tmpfs on PYTHONPATH (/opt/packages); downloading needs the
    network opted in. Without network the same install fails instead of reaching anything.
    """
    with Session(
        backend="docker", work_dir=tmp_path / "net", docker={"network": True}, timeout=180
    ) as s:
        install = s.execute("%%bash\npip install --quiet --no-cache-dir six && echo installed")
        assert "installed" in install.stdout, install.stdout + install.stderr
        imported = s.execute("import six; six.__file__")
        assert imported.text == "'/opt/packages/six.py'"
    with Session(backend="docker", work_dir=tmp_path / "offline", timeout=120) as s:
        offline = s.execute(
            "%%bash\npip install --quiet --retries 0 --timeout 3 six || echo failed"
        )
        assert "failed" in offline.stdout
        assert s.execute("import six").error is not None
