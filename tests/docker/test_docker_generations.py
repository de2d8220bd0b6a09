"""The per-cell state in a real Docker kernel: killed with SIGKILL during a cell and between
cells, it comes back to the last completed cell (generations signed as the Docker kernel's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docker.conftest import (  # noqa: F401  (fixtures, used by name)
    docker_client,
    kernel_image,
    no_container_left_behind,
    work,
)
from tests.generation_helpers import docker_session, flush, in_kernel, value

pytestmark = pytest.mark.docker

DEADLINE = 120.0


async def test_a_docker_kernel_killed_comes_back_to_the_last_completed_cell(
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
) -> None:
    session = await docker_session(work, "dk", kernel_image, DEADLINE)
    try:
        await session.execute("import threading\nmark = 1\nlock = threading.Lock()")
        await session.execute("rows = list(range(10))")
        signed = await flush(session)
        assert signed
        assert {g.origin["backend"] for g in signed} == {"docker"}
        await session.execute("mark = 2")
        died = await session.execute(
            "import os, signal\nhalf = 1\nos.kill(os.getpid(), signal.SIGKILL)"
        )
        assert died.status == "died"
        assert died.error is not None
        assert "its state is lost" not in died.error.evalue
        assert died.recovered is not None
        assert set(died.recovered.lost) == {"lock"}
        assert await value(session, "(mark, sum(rows), 'half' in globals())") == (2, 45, False)
        # And killed between cells (from inside, silently: no cell of ours ran it).
        await session.execute("mark = 3")
        await in_kernel(
            session,
            "import os, signal, threading\n"
            "threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGKILL)).start()",
        )
        again = await session.execute("import time\ntime.sleep(30)")
        assert again.status == "died"
        assert await value(session, "(mark, sum(rows))") == (3, 45)
    finally:
        await session.close()
