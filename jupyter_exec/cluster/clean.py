"""``jupyter-exec gateway --clean``: remove what a killed gateway left, on every host and here.

A gateway stopped by a signal shuts its kernels down, and their folders and logs go with them.
A SIGKILL (of the command and its server, or a machine that lost power) leaves launchers and
kernels running on the hosts, their folders under ``<remote dir>/kernels`` and their logs
under ``<remote dir>/logs``, and the command's private folder on this machine. ``--clean``:

* on every host, runs :data:`CLEAN_SCRIPT` with the host's Python: for each folder of
  ``kernels/`` that carries the launcher's marker (``launcher.MARKER``, naming the folder's
  kernel id), stops its launcher and its kernel's process group (each only if
  ``/proc/<pid>/cmdline`` still names that kernel: a reused pid is left alone), then removes
  the folder; links are never followed, a folder without the marker is never touched; then
  removes ``logs/kernel-<uuid>.log`` of the kernels it removed, and any older than the
  retention (``--keep-logs DAYS``; 0 keeps none);
* here, removes the private folders (``jupyter-exec-gateway-*`` in the temp dir, this user's)
  whose command is no longer running.

It refuses while a gateway of this user on this machine runs with the same remote dir: its
kernels would be stopped under it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_exec.cluster.launcher import MARKER
from jupyter_exec.exceptions import BackendError, InvalidArgument

if TYPE_CHECKING:
    from collections.abc import Collection

    import paramiko

    from jupyter_exec.cluster.hosts import SSHTarget

__all__ = ["CLEAN_SCRIPT", "OWNER_FILE", "clean_host", "clean_local", "running_gateway_pid"]

PRIVATE_PREFIX = "jupyter-exec-gateway-"
OWNER_FILE = "owner.json"
"""In a gateway's private folder: the command's pid and its remote dir (JSON)."""

CLEAN_SCRIPT = r"""
import json, os, re, shutil, signal, stat, sys, time
root, keep_days, marker_name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
uid = os.getuid()
uuid_re = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
def names(pid, kernel_id):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return kernel_id.encode() in f.read()
    except OSError:
        return False
def ended(pid, kernel_id, group):
    if not (type(pid) is int and pid > 1 and names(pid, kernel_id)):
        return
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGTERM)
    except OSError:
        return
    for _ in range(50):
        if not names(pid, kernel_id):
            return
        time.sleep(0.1)
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except OSError:
        pass
removed = []
kernels = os.path.join(root, "kernels")
for name in sorted(os.listdir(kernels)) if os.path.isdir(kernels) else []:
    path = os.path.join(kernels, name)
    try:
        info = os.lstat(path)
        if not uuid_re.match(name) or not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            continue
        fd = os.open(os.path.join(path, marker_name), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as f:
            marker = json.load(f)
    except (OSError, ValueError):
        continue
    if not isinstance(marker, dict) or marker.get("kernel_id") != name:
        continue
    ended(marker.get("pid"), name, False)
    ended(marker.get("kernel_pgid"), name, True)
    shutil.rmtree(path, ignore_errors=True)
    removed.append("kernels/" + name)
logs = os.path.join(root, "logs")
now = time.time()
for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
    kernel_id = name[len("kernel-"):-len(".log")]
    if not (name.startswith("kernel-") and name.endswith(".log") and uuid_re.match(kernel_id)):
        continue
    path = os.path.join(logs, name)
    try:
        info = os.lstat(path)
    except OSError:
        continue
    if not stat.S_ISREG(info.st_mode) or info.st_uid != uid:
        continue
    gone = "kernels/" + kernel_id in removed and keep_days == 0
    if gone or now - info.st_mtime > keep_days * 86400:
        if keep_days == 0 and os.path.isdir(os.path.join(kernels, kernel_id)):
            continue  # a kernel still here (not ours to stop): its log stays with it
        os.unlink(path)
        removed.append("logs/" + name)
print(json.dumps(removed))
"""
"""Runs on a host with its own Python: argv root, retention in days, the marker's name."""


def clean_host(
    client: paramiko.SSHClient, target: SSHTarget, python: str, remote_dir: str, keep_days: int
) -> list[str]:
    """Run :data:`CLEAN_SCRIPT` on the host; what it removed, relative to ``remote_dir``."""
    from jupyter_exec.cluster.hosts import run_command

    command = " ".join(
        shlex.quote(arg) for arg in (python, "-c", CLEAN_SCRIPT, remote_dir, str(keep_days), MARKER)
    )
    status, out, err = run_command(client, target, command)
    if status != 0:
        raise BackendError(
            f"{target}: cleaning {remote_dir} failed (status {status}): {err[-500:]}"
        )
    try:
        removed = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise BackendError(f"{target}: cleaning {remote_dir} printed no answer") from exc
    return [str(item) for item in removed]


def _owner(folder: Path) -> dict[str, object] | None:
    with contextlib.suppress(OSError, ValueError):
        fd = os.open(folder / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else None
    return None


def _alive(pid: object) -> bool:
    if type(pid) is not int or pid <= 1:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _private_folders() -> list[Path]:
    base = Path(tempfile.gettempdir())
    found = []
    for path in sorted(base.glob(f"{PRIVATE_PREFIX}*")):
        with contextlib.suppress(OSError):
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
                found.append(path)
    return found


def running_gateway_pid(remote_dir: str) -> int | None:
    """The pid of a running gateway command of this user using ``remote_dir``, if any."""
    for folder in _private_folders():
        owner = _owner(folder)
        if owner and owner.get("remote_dir") == remote_dir and _alive(owner.get("pid")):
            pid = owner.get("pid")
            return pid if isinstance(pid, int) else None
    return None


def refuse_if_running(remote_dir: str) -> None:
    """InvalidArgument when a running gateway uses ``remote_dir``."""
    pid = running_gateway_pid(remote_dir)
    if pid is not None and pid != os.getpid():
        raise InvalidArgument(
            f"a jupyter-exec gateway (pid {pid}) is running with the remote dir {remote_dir}: "
            "--clean would stop its kernels; stop it first"
        )


def clean_local(remote_dirs: Collection[str]) -> list[Path]:
    """Remove the private folders of gateway commands that are no longer running and that
    used one of ``remote_dirs``: a folder another deployment's command left, or one whose
    owner is not written yet (a command starting now), is not this clean's to take."""
    removed = []
    for folder in _private_folders():
        owner = _owner(folder)
        if owner is None or owner.get("remote_dir") not in remote_dirs:
            continue
        if _alive(owner.get("pid")):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
