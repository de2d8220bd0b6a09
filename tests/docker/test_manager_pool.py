"""A warm pool of Docker kernels: the renamed work dir is the container's /work."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_exec.manager import AsyncSessionManager

pytestmark = pytest.mark.docker


async def test_pooled_docker_kernel_works_in_the_renamed_work_dir(
    kernel_image: str, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.chown(root, 1000, 1000)  # a user's folder, as in the other Docker tests
    options = {"backend": "docker", "docker": {"image": kernel_image}}
    async with AsyncSessionManager(root_dir=str(root), pools=[options], pool_size=1) as manager:
        await manager.wait_for_pools(timeout=180)
        session = await manager.session("d", **options)
        assert manager.list()[0].from_pool
        assert session.work_dir == root / "d"
        wrote = await session.execute(
            "import os; open('from-container.txt', 'w').write('hi'); sorted(os.listdir('.'))"
        )
        assert wrote.ok, wrote.error
        assert "'d.ipynb'" in wrote.text  # the container sees the session's own folder
        assert (root / "d" / "from-container.txt").read_text() == "hi"
        assert (root / "d" / "from-container.txt").stat().st_uid == 1000
        await session.restart()  # restarts in the renamed folder, not the old pool path
        again = await session.execute("open('from-container.txt').read()")
        assert again.text == "'hi'"
