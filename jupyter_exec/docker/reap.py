"""Container labels, and reaping the containers of jupyter-exec processes that are gone.

Every kernel container carries labels naming the process that started it (pid, that process's
start time, host name). A container whose owner is no longer alive on this host is an orphan:
its kernel can no longer be reached by anyone, so :func:`reap` removes it, deletes its run dir
and takes back a lent work dir; the parent-death watchdog (:mod:`jupyter_exec.docker.watchdog`)
does the same for one owner the moment it dies. Containers kept for inspection
(``auto_remove=False``) are only removed with ``include_kept=True``.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from jupyter_exec.docker.engine import docker_errors
from jupyter_exec.docker.ownership import Loan, take_back

__all__ = ["LABEL", "ReapResult", "container_labels", "owner_alive", "reap"]

LABEL = "io.jupyter-exec.kernel"
L_PID = "io.jupyter-exec.owner-pid"
L_START = "io.jupyter-exec.owner-start"
L_HOST = "io.jupyter-exec.owner-host"
L_CREATED = "io.jupyter-exec.created"
L_KERNEL_ID = "io.jupyter-exec.kernel-id"
L_RUN_DIR = "io.jupyter-exec.run-dir"
L_WORK_DIR = "io.jupyter-exec.work-dir"
L_KEEP = "io.jupyter-exec.keep"
L_LENT = "io.jupyter-exec.lent"  # a Loan's label when a root-owned work dir was lent


def process_start_time(pid: int) -> str:
    """The kernel's start tick of ``pid`` (guards against pid reuse); "" where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[19]  # field 22 of proc(5); two fields (pid, comm) precede the split
    except (OSError, IndexError):
        return ""


def container_labels(
    *, kernel_id: str, run_dir: str, work_dir: str, keep: bool, lent: str = ""
) -> dict[str, str]:
    """The labels of a kernel container started by this process."""
    pid = os.getpid()
    labels = {
        LABEL: "1",
        L_PID: str(pid),
        L_START: process_start_time(pid),
        L_HOST: socket.gethostname(),
        L_CREATED: datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        L_KERNEL_ID: kernel_id,
        L_RUN_DIR: run_dir,
        L_WORK_DIR: work_dir,
        L_KEEP: "1" if keep else "0",
    }
    if lent:
        labels[L_LENT] = lent
    return labels


def owner_alive(labels: dict[str, str]) -> bool | None:
    """True/False if the owner process is known alive/dead; None if it is on another host."""
    if labels.get(L_HOST) != socket.gethostname():
        return None
    try:
        pid = int(labels.get(L_PID, ""))
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    started = labels.get(L_START, "")
    return not started or process_start_time(pid) in ("", started)


@dataclass(frozen=True)
class ReapResult:
    """What one :func:`reap` pass did."""

    removed: tuple[str, ...]
    kept: tuple[str, ...]


def reap(
    client: docker.DockerClient,
    *,
    include_kept: bool = False,
    other_hosts: bool = False,
    dry_run: bool = False,
) -> ReapResult:
    """Remove kernel containers whose owner process is dead; return their names.

    ``other_hosts`` also removes containers started from another host name (e.g. another
    container sharing this engine), whose owner cannot be checked: use it only when you know
    no such process is alive.
    """
    with docker_errors("listing kernel containers"):
        containers = client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"{LABEL}=1"}
        )
    removed: list[str] = []
    kept: list[str] = []
    for container in containers:
        labels = dict(container.labels)
        alive = owner_alive(labels)
        if alive or (alive is None and not other_hosts):
            continue
        if labels.get(L_KEEP) == "1" and not include_kept:
            kept.append(container.name or container.id or "")
            continue
        if not dry_run:
            remove_container(client, str(container.id), labels)
        removed.append(container.name or container.id or "")
    return ReapResult(tuple(removed), tuple(kept))


def remove_container(
    client: docker.DockerClient, container_id: str, labels: dict[str, str]
) -> None:
    """Remove one kernel container and undo what its launch did on the host (from its labels)."""
    force_remove(client, container_id)
    run_dir = labels.get(L_RUN_DIR, "")
    if run_dir and Path(run_dir).name.startswith("jx-"):
        shutil.rmtree(run_dir, ignore_errors=True)
    release_loan(client, labels)


REMOVAL_WAIT = 60
"""Seconds to wait for another caller's removal of a container to end (its 409 to ours)."""


def force_remove(client: docker.DockerClient, container_id: str) -> None:
    """``docker rm -f``, tolerating a container that is already gone or being removed.

    Returns once the container is gone. When another caller is removing it already (two
    reaps, a reap beside the parent-death watchdog), the engine answers 409 at once while
    that removal goes on: this waits for it to end, so whoever says "removed" is right."""
    try:
        client.api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: removal already in progress
            with docker_errors("removing a kernel container"):
                raise
        _wait_removed(client, container_id)


def _wait_removed(client: docker.DockerClient, container_id: str) -> None:
    """Block until the removal under way of ``container_id`` has ended (the engine's own
    ``wait`` for the ``removed`` condition; NotFound: it ended before we asked)."""
    waiting = docker_errors("waiting for a kernel container's removal")
    with waiting, contextlib.suppress(docker.errors.NotFound):
        client.api.wait(container_id, timeout=REMOVAL_WAIT, condition="removed")


def release_loan(client: docker.DockerClient, labels: dict[str, str]) -> None:
    """Take a lent work dir back unless another live kernel container still borrows it.

    Only that one folder's loan is undone; folders inside it that other (nested) sessions
    use are never touched.
    """
    lent, work_dir = labels.get(L_LENT, ""), labels.get(L_WORK_DIR, "")
    loan = Loan.from_label(lent) if lent else None
    if loan is None or not work_dir:
        return
    with docker_errors("checking for kernels sharing a work dir"):
        others = client.containers.list(
            ignore_removed=True,
            filters={"label": [f"{LABEL}=1", f"{L_WORK_DIR}={work_dir}"], "status": "running"},
        )
    if any(c.labels.get(L_LENT) for c in others):
        return
    take_back(Path(work_dir), loan)
