"""A warm pool of Docker kernels: the renamed work dir is the container's /work."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_exec import NetworkPolicy
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


DENIED = """
import urllib.request, urllib.error
try:
    urllib.request.urlopen('http://nowhere.test/', timeout=30)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except Exception as e:
    print('error', type(e).__name__, e)
"""


async def test_pooled_kernels_are_keyed_by_their_network_policy(
    kernel_image: str, tmp_path: Path
) -> None:
    """A session with policy A gets only a kernel warmed for A: never one for B, none for
    no policy; its proxy decides with A, is told the session's name, and ends with it."""
    root = tmp_path / "root"
    root.mkdir()
    os.chown(root, 1000, 1000)
    docker = {"backend": "docker", "docker": {"image": kernel_image}}
    a = NetworkPolicy(allow=["a.test"])
    b = {"allow": ["b.test"]}  # the mapping form is the same key as the policy it makes
    pools = [{**docker, "network": a}, {**docker, "network": b}, docker]
    async with AsyncSessionManager(root_dir=str(root), pools=pools, pool_size=1) as manager:
        await manager.wait_for_pools(timeout=300)
        assert len(manager.kernel_pools) == 3
        ready = {p.key.network: p.ready for p in manager.kernel_pools}
        assert ready == {a: 1, NetworkPolicy(allow=["b.test"]): 1, None: 1}
        pool_a = manager.pool(**docker, network={"allow": ["a.test"]})
        assert pool_a is not None
        assert pool_a.key.network == a

        sa = await manager.session("sa", **docker, network=a)
        sb = await manager.session("sb", **docker, network=b)
        plain = await manager.session("plain", **docker)
        assert [i.from_pool for i in manager.list()] == [True, True, True]
        assert pool_a.ready == 0  # sa took A's kernel, not another pool's
        proxies = [s._kernel.network for s in (sa, sb)]  # type: ignore[attr-defined]
        assert [p.policy for p in proxies] == [a, NetworkPolicy(allow=["b.test"])]
        assert [p.session for p in proxies] == ["sa", "sb"]
        assert plain._kernel.network is None  # type: ignore[attr-defined]

        refused = await sa.execute(DENIED)
        assert refused.stdout.startswith(
            "403 connection to nowhere.test:80 denied by the session's network policy "
            "(allowed: a.test)"
        )
        assert [(c.host, c.decision) for c in refused.connections] == [("nowhere.test", "denied")]
        cut_off = await plain.execute(DENIED)  # no policy: no proxy, no network at all
        assert cut_off.stdout.startswith("error")
        assert cut_off.connections == ()

        # a policy no pool was warmed for: a kernel started for it, with its own proxy
        c = NetworkPolicy(allow=["c.test"])
        sc = await manager.session("sc", **docker, network=c)
        assert [i.from_pool for i in manager.list() if i.name == "sc"] == [False]
        assert sc._kernel.network.policy == c  # type: ignore[attr-defined]
        await manager.close_session("sa")
        assert not proxies[0].serving  # closed with its session
