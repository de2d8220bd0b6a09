"""What jupyter-exec asks of a kernel's provisioner and manager, declared once.

jupyter_client's ``KernelProvisionerBase`` declares a kernel's lifecycle (launch, poll,
signal, cleanup). The engine and the state machinery ask a few things more, and which they
may ask depends on where the kernel runs. Each question is a protocol here, so a reader (and
mypy) sees what is asked, and the provisioners that answer declare it::

    ProcessProvisioner    ``process``: the kernel is a process on this machine
                          (jupyter_client's LocalProvisioner, a fork's AdoptedProvisioner)
    ExitDescriber         ``exit_description()``: why the kernel ended, better than an exit code
                          (the Docker provisioner, AdoptedProvisioner, a remote kernel's stand-in)
    ContainerProvisioner  our Docker provisioner: its image, mounts, network proxy folder,
                          container, run dir and kernel user, and commands run in the container
    RemoteManager         ``remote``: a kernel manager whose kernel runs behind a Jupyter
                          server or gateway, away from the work dir (RemoteKernelManager)
    WorkDirFollower       ``work_dir_moved(folder)``: told when a warm pool renames the
                          kernel's working folder

They are structural: the Docker provisioner is recognised without importing the docker SDK,
and jupyter_client's own LocalProvisioner fits :class:`ProcessProvisioner` as it is. Each is
``runtime_checkable``, so ``isinstance`` is the check (it tests that the members exist).
``tests/engine/test_provisioning.py`` holds our provisioners and managers to them.

What belongs to jupyter_client alone, a manager's private launch arguments, is read by the one
accessor :func:`relaunch_args`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import docker

    from jupyter_exec.docker.ownership import KernelUser

__all__ = [
    "ContainerProvisioner",
    "ExitDescriber",
    "KernelProcess",
    "ProcessProvisioner",
    "RemoteManager",
    "WorkDirFollower",
    "kernel_process",
    "relaunch_args",
]


class KernelProcess(Protocol):
    """A kernel's process as its provisioner holds it: a ``subprocess.Popen`` or a fork's
    :class:`~jupyter_exec.state.forking.ForeignProcess`."""

    @property
    def pid(self) -> int:
        """Its pid on this machine."""
        ...

    def poll(self) -> int | None:
        """``None`` while it runs, else its exit code (negative: the signal that ended it)."""
        ...


@runtime_checkable
class ProcessProvisioner(Protocol):
    """A provisioner whose kernel is a process on this machine.

    Asked by liveness checks that need no round trip (``KernelHandle.process_alive``), by
    :func:`~jupyter_exec.engine.kernel.describe_exit` (the exit code or signal), by the fork
    check (only such a kernel can be forked) and by the fork's open-file scan (``/proc/<pid>``).
    """

    @property
    def process(self) -> KernelProcess | None:
        """The process, ``None`` before the launch and after the cleanup."""
        ...


@runtime_checkable
class ExitDescriber(Protocol):
    """A provisioner that can say why its kernel ended; asked by
    :func:`~jupyter_exec.engine.kernel.describe_exit`, whose account it replaces."""

    async def exit_description(self) -> str | None:
        """A short account for the user ("killed by the out-of-memory killer"), or None."""
        ...


@runtime_checkable
class ContainerProvisioner(ExitDescriber, Protocol):
    """Our Docker provisioner, as the layers that use its container see it.

    Asked by checkpoints and generations (the image a state came from, the host folders the
    kernel can read), the environment record (the image's tag and id), forks and snapshots
    (the run dir to put a child's connection file in, the kernel's user, the container to find
    its pid in) and scripts (run in the container, not on the host).
    """

    @property
    def image(self) -> str:
        """The image configured (the ``image`` trait); empty: the built default."""
        ...

    @property
    def image_tag(self) -> str:
        """The image the container was started from (empty before the launch)."""
        ...

    @property
    def volumes(self) -> Sequence[str]:
        """Extra bind mounts, ``host:container[:ro]``: host folders the kernel can read."""
        ...

    @property
    def network_proxy(self) -> str:
        """The network proxy's host folder mounted in the container (empty: no proxy)."""
        ...

    @property
    def work_mount(self) -> str:
        """Where the work dir is mounted in the container (``/work``)."""
        ...

    @property
    def container_id(self) -> str | None:
        """The running container's id (None: none started, or removed)."""
        ...

    @property
    def run_dir(self) -> Path | None:
        """The host's run dir holding the kernel's sockets and connection files."""
        ...

    @property
    def kernel_user(self) -> KernelUser | None:
        """The uid and gid the kernel runs as (chosen at launch)."""
        ...

    def docker_client(self) -> docker.DockerClient:
        """A client of the engine that runs the container."""
        ...

    async def run_command(self, argv: list[str], *, timeout: float | None) -> tuple[int, str]:
        """Run ``argv`` in the container (cwd: the work dir): (exit code, output)."""
        ...


@runtime_checkable
class RemoteManager(Protocol):
    """A kernel manager that says whether its kernel runs away from the session's work dir
    (asked by ``KernelHandle.remote``: its files then come home through the server)."""

    remote: bool


@runtime_checkable
class WorkDirFollower(Protocol):
    """A provisioner told when a warm pool renames its kernel's working folder
    (:func:`~jupyter_exec.manager.pool.follow_rename`)."""

    def work_dir_moved(self, folder: Path) -> None:
        """The kernel's working folder is now ``folder``."""
        ...


def kernel_process(provisioner: object) -> KernelProcess | None:
    """The local process of the kernel ``provisioner`` runs, or None (remote, in a container,
    not started).

    A probe by necessity: jupyter_client's LocalProvisioner, the provisioner of every local
    kernel, is not ours and declares ``process`` only as an untyped class attribute; the
    protocol recognises it by that attribute.
    """
    return provisioner.process if isinstance(provisioner, ProcessProvisioner) else None


def relaunch_args(km: object) -> dict[str, Any] | None:
    """The arguments ``km`` last launched its kernel with (its ``cwd``, its ``env``), which a
    restart reuses; None when it keeps none.

    A probe by necessity: ``_launch_args`` is jupyter_client's private attribute of its kernel
    managers; remote managers have none, and a fork's manager holds None (no restart).
    The returned dict is the manager's own: a change to it changes what a restart launches.
    """
    found = getattr(km, "_launch_args", None)
    return found if isinstance(found, dict) else None
