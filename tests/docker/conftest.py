"""Fixtures for the Docker kernel tests: a real engine, the real kernel image, real containers.

* No engine: the Docker tests are skipped locally, but **fail** when ``CI=true``.
* The kernel image (``JX_TEST_IMAGE``, default ``jupyter-exec/kernel:latest``) is built when
  missing, from ``JX_TEST_BASE_IMAGE`` (default ``jupyter-exec/base:bookworm`` if present).
* Kernels are driven with plain ``jupyter_client.AsyncKernelManager`` and an in-memory
  kernelspec naming the ``jupyter-exec-docker`` provisioner, as JupyterLab would.
* At the end of the session no container started by this process may be left (counted by label).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
import pytest_asyncio
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager

from jupyter_exec.docker.image import DEFAULT_BASE_IMAGE, BuildOptions, build_image, image_exists
from jupyter_exec.docker.reap import L_PID, LABEL
from jupyter_exec.engine.kernel import KernelHandle, OneSpec
from tests.conftest import docker_engine
from tests.raw_run import Run, run_cell

TEST_IMAGE = os.environ.get("JX_TEST_IMAGE", "jupyter-exec/kernel:latest")
TEST_BASE_IMAGE = os.environ.get("JX_TEST_BASE_IMAGE", "jupyter-exec/base:bookworm")
OWNER = (1000, 1000)  # the "host user" that owns test work dirs


def our_containers(client: docker.DockerClient) -> list[Any]:
    """Kernel containers started by this test process (xdist workers each count their own)."""
    return list(
        client.containers.list(
            ignore_removed=True,
            all=True,
            filters={"label": [f"{LABEL}=1", f"{L_PID}={os.getpid()}"]},
        )
    )


_engine_clients: list[docker.DockerClient] = []  # set once a test used the engine


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    client = docker_engine()
    _engine_clients.append(client)
    return client


@pytest.fixture(scope="session")
def kernel_image(docker_client: docker.DockerClient) -> str:
    if not image_exists(docker_client, TEST_IMAGE):
        base = (
            TEST_BASE_IMAGE if image_exists(docker_client, TEST_BASE_IMAGE) else DEFAULT_BASE_IMAGE
        )
        build_image(docker_client, BuildOptions(tag=TEST_IMAGE, base_image=base))
    return TEST_IMAGE


@pytest.fixture(scope="session", autouse=True)
def no_container_left_behind() -> Iterator[None]:
    """After all tests: no kernel container labelled with this process's pid may remain."""
    yield
    if not _engine_clients:
        return
    leftovers = our_containers(_engine_clients[0])
    names = [c.name for c in leftovers]
    for container in leftovers:
        container.remove(force=True)
    assert not names, f"kernel containers left behind by the tests: {names}"


def docker_spec(**config: Any) -> KernelSpec:
    return KernelSpec(
        argv=["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        display_name="Python 3 (Docker, test)",
        language="python",
        interrupt_mode="message",
        metadata={
            "kernel_provisioner": {"provisioner_name": "jupyter-exec-docker", "config": config}
        },
    )


async def iopub_ready(km: AsyncKernelManager, kc: Any, timeout: float) -> None:
    """Ready *and* IOPub delivering: jupyter_client's ``wait_for_ready`` only proves the
    shell channel, so right after a (re)start a cell's first messages can be published
    before the SUB socket has (re)connected and are lost (ZMQ's slow joiner)."""
    await KernelHandle(km=km, kc=kc).wait_ready(timeout)


@dataclass
class Kernel:
    """A running Docker kernel: its manager, a client, and its host work dir."""

    km: AsyncKernelManager
    kc: Any
    work_dir: Path

    @property
    def provisioner(self) -> Any:
        return self.km.provisioner

    @property
    def container_id(self) -> str:
        return str(self.km.provisioner._container_id)

    async def run(self, code: str, timeout: float = 30) -> Run:
        return await run_cell(self.kc, code, timeout)

    async def wait_dead(self, timeout: float = 5.0) -> float:
        """Poll is_alive() like the session does; return how long death took to notice."""
        start = time.monotonic()
        while await self.km.is_alive():
            if time.monotonic() - start > timeout:
                raise AssertionError("the kernel still looks alive")
            await asyncio.sleep(0.05)
        return time.monotonic() - start

    async def shutdown(self, now: bool = False) -> None:
        self.kc.stop_channels()
        if self.km.has_kernel or self.km.provisioner is not None:
            await self.km.shutdown_kernel(now=now)


StartKernel = Callable[..., Awaitable[Kernel]]


def make_work_dir(base: Path, owner: tuple[int, int] | None = OWNER) -> Path:
    work_dir = base / "work"
    work_dir.mkdir()
    if owner is not None and os.geteuid() == 0:  # not root: ours, and the kernel runs as us
        os.chown(work_dir, *owner)
    return work_dir


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A work dir owned by the image's unprivileged user (:data:`OWNER`), as sessions want."""
    return make_work_dir(tmp_path)


async def start(
    tmp: Path, *, work_dir: Path | None = None, owner: tuple[int, int] | None = OWNER, **config: Any
) -> Kernel:
    work_dir = work_dir or make_work_dir(tmp, owner)
    km = AsyncKernelManager(
        kernel_name="docker-test", kernel_spec_manager=OneSpec(docker_spec(**config))
    )
    await km.start_kernel(cwd=str(work_dir), env=dict(os.environ))
    kc = km.client()
    kc.start_channels()
    try:
        await iopub_ready(km, kc, timeout=60)
    except BaseException:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
        raise
    return Kernel(km, kc, work_dir)


@pytest_asyncio.fixture(loop_scope="session")
async def start_kernel(
    kernel_image: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[StartKernel]:
    """``await start_kernel(**config)`` -> a ready :class:`Kernel`; all are shut down after."""
    kernels: list[Kernel] = []

    async def _start(**config: Any) -> Kernel:
        config.setdefault("image", kernel_image)
        kernel = await start(tmp_path_factory.mktemp("docker"), **config)
        kernels.append(kernel)
        return kernel

    yield _start
    for kernel in kernels:
        await kernel.shutdown(now=True)


@pytest.fixture
def start_raw() -> Callable[..., Awaitable[Kernel]]:
    """The bare ``start(tmp, **config)`` helper, for tests that expect a start to fail."""
    return start


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def shared_kernel(
    kernel_image: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Kernel]:
    """One default-config kernel for the tests that do not break it."""
    kernel = await start(tmp_path_factory.mktemp("shared"), image=kernel_image)
    yield kernel
    await kernel.shutdown()
