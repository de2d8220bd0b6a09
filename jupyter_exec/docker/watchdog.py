"""The parent-death watchdog: stops this process's kernel containers within a second of its death.

Why: a process killed with SIGKILL (the OOM killer, ``kill -9``, a supervisor's last resort) runs
no ``finally``, no ``atexit``. Its kernel containers would keep running, their run dirs stay and
a lent work dir stay lent until some later start reaps them. The kernel cannot notice by itself:
it sees no host pids and has no network, and ZMQ does not tell a server that its client is gone.

How: before its first Docker kernel starts, a process starts one watchdog (per process, not per
kernel) with ``python -m jupyter_exec.docker.watchdog``, in a session of its own (a Ctrl-C or a
hang-up of the terminal does not reach it) and detached from it (``sh`` starts it in the
background and exits, so the owner never has a child to wait for). Its standard input is the read
end of a pipe whose write end only the owner holds (close-on-exec: no kernel, no subprocess gets
a copy). However the owner ends, the system closes that end and the watchdog reads end-of-file:
it then removes every kernel container labelled with the owner's pid and start time, deletes
their run dirs and takes back lent work dirs (:func:`jupyter_exec.docker.reap.remove_container`),
and exits. Containers kept for inspection (``auto_remove=False``) are stopped, not removed.

A pipe rather than polling the owner's pid: end-of-file is immediate, costs nothing while the
owner lives and cannot be fooled by pid reuse. A host process rather than a sidecar container:
undoing the loan and removing the run dir need the host's filesystem and privileges. A SIGTERM
to the watchdog alone (``systemctl stop`` signals the whole group) gives the owner a few seconds
to finish its own cleanup, after which the watchdog does its pass anyway if the owner is gone.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["ensure_watchdog", "main"]

log = logging.getLogger("jupyter_exec.docker")

_lock = threading.Lock()
_watched: dict[tuple[int, str], int] = {}  # (owner pid, docker host) -> write end of the pipe

#: After a SIGTERM, how long the watchdog waits for its owner to end before giving up.
TERM_GRACE = 5.0


def ensure_watchdog(docker_host: str = "") -> None:
    """Start this process's watchdog for ``docker_host`` unless it runs already."""
    from jupyter_exec.docker.reap import process_start_time

    pid = os.getpid()
    with _lock:
        if (pid, docker_host) in _watched:
            return
        read_end, write_end = os.pipe()  # both close-on-exec
        argv = [
            sys.executable, "-m", "jupyter_exec.docker.watchdog",
            "--owner-pid", str(pid),
            "--owner-start", process_start_time(pid),
            "--docker-host", docker_host,
        ]  # fmt: skip
        try:
            # sh starts the watchdog in the background and exits at once; the watchdog's stdin
            # is the pipe (an explicit redirection: a background job's stdin is /dev/null).
            subprocess.run(
                ["/bin/sh", "-c", _SPAWN, "jx-watchdog", *argv],
                stdin=read_end,
                start_new_session=True,
                check=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            # The kernel still starts: `reap` (and every later start) covers a crash instead.
            os.close(write_end)
            log.warning(
                "could not start the Docker kernels' watchdog (%s); after a crash "
                "of this process, `jupyter-exec reap` removes its containers",
                exc,
            )
            return
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        _watched[(pid, docker_host)] = write_end


_SPAWN = 'exec 3<&0; "$@" <&3 3<&- >/dev/null 2>&1 &'


def _wait_for_owner(stdin: int) -> bool:
    """True once the owner's end of the pipe is closed; False if TERM_GRACE after a SIGTERM."""
    deadline: list[float] = []

    def on_term(signum: int, frame: object) -> None:
        deadline.append(time.monotonic() + TERM_GRACE)

    signal.signal(signal.SIGTERM, on_term)
    while True:
        timeout = max(0.0, deadline[0] - time.monotonic()) if deadline else None
        try:
            ready, _, _ = select.select([stdin], [], [], timeout)
            if not ready:
                return False
            if not os.read(stdin, 4096):
                return True
        except InterruptedError:
            continue


def sweep(owner_pid: str, owner_start: str, docker_host: str) -> list[str]:
    """Remove (or stop, if kept) every kernel container of that owner; return their names."""
    import docker.errors

    from jupyter_exec.docker import reap
    from jupyter_exec.docker.engine import connect

    client = connect(docker_host, fresh=True)
    filters: dict[str, str | list[str] | bool] = {
        "label": [f"{reap.LABEL}=1", f"{reap.L_PID}={owner_pid}"]
    }
    done: list[str] = []
    for container in client.containers.list(ignore_removed=True, all=True, filters=filters):
        labels = dict(container.labels)
        if labels.get(reap.L_START, "") != owner_start:
            continue  # another process that got the same pid
        if labels.get(reap.L_KEEP) == "1":
            with contextlib.suppress(docker.errors.APIError):  # already stopped
                client.api.kill(str(container.id))
            run_dir = labels.get(reap.L_RUN_DIR, "")
            if run_dir and Path(run_dir).name.startswith("jx-"):
                shutil.rmtree(run_dir, ignore_errors=True)
            reap.release_loan(client, labels)
        else:
            reap.remove_container(client, str(container.id), labels)
        done.append(container.name or str(container.id))
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="jupyter-exec's parent-death watchdog")
    parser.add_argument("--owner-pid", required=True)
    parser.add_argument("--owner-start", default="")
    parser.add_argument("--docker-host", default="")
    args = parser.parse_args(argv)
    for name in ("SIGINT", "SIGHUP", "SIGPIPE"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    if _wait_for_owner(sys.stdin.fileno()):
        sweep(args.owner_pid, args.owner_start, args.docker_host)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
