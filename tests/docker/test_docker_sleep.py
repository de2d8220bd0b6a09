"""A Docker session asleep: its container removed (the memory it held with it), and woken
on its next cell in a new container, with the state it saved (signed as a Docker kernel's)."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from jupyter_exec.state.forking import container_of
from tests.docker.conftest import (  # noqa: F401  (fixtures, used by name)
    docker_client,
    kernel_image,
    no_container_left_behind,
    work,
)
from tests.generation_helpers import docker_session

pytestmark = pytest.mark.docker

DEADLINE = 120.0


def _container_id(session: object) -> str:
    kernel = session._kernel  # type: ignore[attr-defined]
    assert kernel is not None
    container = container_of(kernel)
    assert container is not None
    found = container.container_id
    assert found is not None
    return found


async def test_a_docker_session_sleeps_with_its_container_removed_and_wakes(
    docker_client: docker.DockerClient,  # noqa: F811
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
) -> None:
    session = await docker_session(work, "dnap", kernel_image, DEADLINE, undo_steps=1)
    try:
        await session.execute("import threading\nrows = list(range(1000))\nlock = threading.Lock()")
        await session.execute("total = sum(rows)")  # with undo: a fork in the container
        first = _container_id(session)
        assert set(await session.sleep()) == {"lock"}
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(first)
        woken = await session.execute("total, len(rows), 'lock' in globals()")
        assert woken.text == "(499500, 1000, False)"
        assert woken.recovered is not None
        assert set(woken.recovered.lost) == {"lock"}
        assert _container_id(session) != first
    finally:
        await session.close()
