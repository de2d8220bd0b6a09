"""Our provisioners and managers answer what jupyter-exec asks of them (engine/provisioning.py).

The protocols are structural, so nothing but these checks says that a provisioner still
declares what the engine and the state machinery read: a renamed attribute would make a
Docker kernel look local, or a local one look remote.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager

from jupyter_exec.docker.provisioner import DockerProvisioner
from jupyter_exec.engine.kernel import KernelHandle, OneSpec, describe_exit
from jupyter_exec.engine.provisioning import (
    ContainerProvisioner,
    ExitDescriber,
    ProcessProvisioner,
    RemoteManager,
    WorkDirFollower,
    kernel_process,
    relaunch_args,
)
from jupyter_exec.remote.kernel import RemoteKernelManager
from jupyter_exec.state.forking import AdoptedProvisioner, ForeignProcess

SPEC = KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])


def test_our_docker_provisioner_is_a_container_provisioner() -> None:
    provisioner = DockerProvisioner(image="some/image:1", volumes=["/data:/data:ro"])
    assert isinstance(provisioner, ContainerProvisioner)
    assert isinstance(provisioner, ExitDescriber)
    assert not isinstance(provisioner, ProcessProvisioner)  # its process is in a container
    assert kernel_process(provisioner) is None
    assert (provisioner.image, provisioner.image_tag) == ("some/image:1", "")
    assert list(provisioner.volumes) == ["/data:/data:ro"]
    assert (provisioner.network_proxy, provisioner.work_mount) == ("", "/work")
    assert (provisioner.container_id, provisioner.run_dir, provisioner.kernel_user) == (
        None,
        None,
        None,
    )


def test_a_fork_s_provisioner_is_a_local_process() -> None:
    provisioner = AdoptedProvisioner(kernel_id="k", kernel_spec=SPEC, parent=None)
    assert isinstance(provisioner, ProcessProvisioner)
    assert isinstance(provisioner, ExitDescriber)
    assert not isinstance(provisioner, ContainerProvisioner)
    assert kernel_process(provisioner) is None  # not adopted yet
    provisioner.process = process = ForeignProcess(os.getpid())
    try:
        assert kernel_process(provisioner) is process
    finally:
        process.close()


def test_a_remote_manager_says_so_and_has_no_local_process() -> None:
    connection = SimpleNamespace(server_restarts=0, server_gave_up=False, failure=None)
    rest: Any = SimpleNamespace(describe=lambda: "http://server")
    km = RemoteKernelManager(rest, "k", "python3", None, connection)  # type: ignore[arg-type]
    assert isinstance(km, RemoteManager)
    assert km.remote is True
    assert isinstance(km.provisioner, ExitDescriber)
    assert not isinstance(km.provisioner, ProcessProvisioner | ContainerProvisioner)
    assert kernel_process(km.provisioner) is None
    assert relaunch_args(km) is None  # nothing a restart here would relaunch
    assert not isinstance(AsyncKernelManager(), RemoteManager)


def test_a_cluster_kernel_is_neither_local_nor_in_our_container() -> None:
    """The distributed provisioner's only local process is the SSH client that launched the
    kernel on another host: no liveness check, fork or ``/proc`` scan may take it for the
    kernel."""
    pytest.importorskip("gateway_provisioners")
    from jupyter_exec.cluster.provisioner import DistributedProvisioner

    # Not initialised: its __init__ binds the gateway's response port. What it declares is
    # on the class (its base keeps the SSH client as ``local_proc``, never as ``process``).
    provisioner = DistributedProvisioner.__new__(DistributedProvisioner)
    assert not isinstance(provisioner, ProcessProvisioner | ContainerProvisioner | ExitDescriber)
    assert kernel_process(provisioner) is None


def test_a_provisioner_that_follows_its_work_dir_is_told() -> None:
    class Following:
        def __init__(self) -> None:
            self.moved: list[Path] = []

        def work_dir_moved(self, folder: Path) -> None:
            self.moved.append(folder)

    from jupyter_exec.manager.pool import follow_rename

    provisioner = Following()
    assert isinstance(provisioner, WorkDirFollower)
    km: Any = SimpleNamespace(_launch_args={"cwd": "/old"}, provisioner=provisioner)
    follow_rename(km, Path("/new"))
    assert km._launch_args == {"cwd": "/new"}
    assert provisioner.moved == [Path("/new")]


async def test_the_accessors_on_a_local_kernel(tmp_path: Path) -> None:
    km = AsyncKernelManager(kernel_name="probe", kernel_spec_manager=OneSpec(SPEC))
    await km.start_kernel(cwd=str(tmp_path))
    handle = KernelHandle(km=km, kc=km.client())
    try:
        assert isinstance(km.provisioner, ProcessProvisioner)
        assert not isinstance(km.provisioner, ContainerProvisioner | ExitDescriber)
        assert not isinstance(km, RemoteManager)
        process = kernel_process(km.provisioner)
        assert process is not None
        assert process.pid == km.provisioner.process.pid
        assert process.poll() is None
        launched = relaunch_args(km)
        assert launched is not None
        assert launched["cwd"] == str(tmp_path)
        assert handle.process_alive()
        assert not handle.remote
        os.kill(process.pid, signal.SIGKILL)
        for _ in range(200):
            if process.poll() is not None:
                break
            await asyncio.sleep(0.02)
        assert not handle.process_alive()
        assert await describe_exit(km) == (
            "the kernel process was killed by SIGKILL (the OOM killer or an explicit kill)"
        )
    finally:
        await handle.shutdown(now=True)
