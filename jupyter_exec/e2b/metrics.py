"""A sandbox's metrics (``get_metrics()``): CPU, memory and disk of what it runs, sampled now.

E2B's API keeps a time series per sandbox; a local server has no VM to
measure, so ``GET /sandboxes/{id}/metrics`` answers with one sample taken
when asked, of the sandbox's own processes:

* a **local** sandbox's processes are those working in its folder (its
  kernels and commands start there, each context's kernel in its cwd):
  their resident memory, and their CPU time since the last sample (the
  first: since they started) over the wall time between;
* a **Docker** sandbox's are its container's, from the engine's stats.

``memTotal`` and ``cpuCount`` are the machine's (or the container's
limits); ``diskUsed`` is the size of the sandbox's files, ``diskTotal``
their file system's. The route opens with the API key, as E2B's does.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_exec.e2b.sandboxes import Sandbox
from jupyter_exec.e2b.web import E2BHandler
from jupyter_exec.exceptions import InvalidArgument

__all__ = ["MetricsHandler", "local_sample"]

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _in(folder: Path, pid: str) -> bool:
    try:
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:  # gone, or another user's
        return False
    return cwd == folder or folder in cwd.parents


def _usage(pid: str) -> tuple[float, int]:
    """CPU seconds (user + system) and resident bytes of process ``pid`` (0s if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        statm = Path(f"/proc/{pid}/statm").read_text().split()
    except OSError:
        return 0.0, 0
    after_name = stat.rsplit(")", 1)[1].split()
    cpu = (int(after_name[11]) + int(after_name[12])) / TICKS
    return cpu, int(statm[1]) * PAGE


def _disk_used(folder: Path) -> int:
    total = 0
    for path, _, names in os.walk(folder):  # links not followed
        for name in names:
            try:
                total += os.lstat(os.path.join(path, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _memory_total() -> int:
    return int(os.sysconf("SC_PHYS_PAGES")) * PAGE


FIRST_WINDOW = 0.25
"""Seconds the CPU share of a sandbox's first sample is measured over (later ones: since the
one before)."""

Mark = tuple[float, float]
"""A sample's CPU seconds and its time: what the next sample's CPU share is measured from."""


def _processes(folder: Path) -> tuple[float, int]:
    """CPU seconds and resident bytes of every process working in ``folder``."""
    cpu, memory = 0.0, 0
    for pid in (p for p in os.listdir("/proc") if p.isdigit() and _in(folder, p)):
        seconds, rss = _usage(pid)
        cpu, memory = cpu + seconds, memory + rss
    return cpu, memory


def local_sample(folder: Path, last: Mark | None) -> tuple[dict[str, Any], Mark]:
    """One sample of the processes working in ``folder``, with its mark (blocking)."""
    folder = folder.resolve()
    if last is None:
        last = (_processes(folder)[0], time.time())
        time.sleep(FIRST_WINDOW)
    cpu, memory = _processes(folder)
    now = time.time()
    cpus = os.cpu_count() or 1
    share = max(cpu - last[0], 0.0) / max(now - last[1], 1e-3)
    sample = _sample(now, cpus, 100.0 * share / cpus, memory, _memory_total(), folder)
    return sample, (cpu, now)


def _sample(
    now: float, cpus: int, percent: float, used: int, total: int, folder: Path
) -> dict[str, Any]:
    disk = shutil.disk_usage(folder) if folder.exists() else None
    return {
        "timestamp": datetime.fromtimestamp(now, timezone.utc).isoformat().replace("+00:00", "Z"),
        "timestampUnix": int(now),
        "cpuCount": cpus,
        "cpuUsedPct": round(min(percent, 100.0), 2),
        "memUsed": used,
        "memTotal": total,
        "memCache": 0,
        "diskUsed": _disk_used(folder) if folder.exists() else 0,
        "diskTotal": disk.total if disk is not None else 0,
    }


def docker_sample(stats: dict[str, Any], folder: Path) -> dict[str, Any]:
    """One sample from a container's stats (``docker stats --no-stream``)."""
    cpu_stats, pre = stats.get("cpu_stats") or {}, stats.get("precpu_stats") or {}
    used = (cpu_stats.get("cpu_usage") or {}).get("total_usage", 0) - (
        (pre.get("cpu_usage") or {}).get("total_usage", 0)
    )
    system = cpu_stats.get("system_cpu_usage", 0) - pre.get("system_cpu_usage", 0)
    cpus = int(cpu_stats.get("online_cpus") or os.cpu_count() or 1)
    percent = 100.0 * used / system if system > 0 else 0.0
    memory = stats.get("memory_stats") or {}
    total = int(memory.get("limit") or _memory_total())
    return _sample(time.time(), cpus, percent, int(memory.get("usage", 0)), total, folder)


_marks: dict[str, Mark] = {}
"""Each measured local sandbox's last mark, by id (those no longer live are dropped)."""


class MetricsHandler(E2BHandler):
    """``GET /sandboxes/{id}/metrics``: one sample of the sandbox's processes, now."""

    async def get(self, sandbox_id: str) -> None:
        sandbox = self.server.sandboxes.get(sandbox_id)
        now = time.time()
        start, end = self._second("start"), self._second("end")
        # whole seconds, as the SDK sends them: ``end`` takes in the whole of its second
        if (start is not None and start > now) or (end is not None and end + 1 <= now):
            self.send_json([])  # the one sample is now: none in a range that leaves it out
            return
        self.send_json([await self._sample(sandbox)])

    def _second(self, name: str) -> float | None:
        """The query's ``start`` or ``end``: Unix seconds (None: not given)."""
        value = self.get_query_argument(name, "")
        if not value:
            return None
        try:
            return float(value)
        except ValueError:
            raise InvalidArgument(
                f"'{name}' is a time in Unix seconds, not {value[:40]!r}"
            ) from None

    async def _sample(self, sandbox: Sandbox) -> dict[str, Any]:
        folder = sandbox.paths.root
        processes = sandbox.processes
        if processes.backend == "docker" and processes.container is not None:
            where = await processes.container()
            container = where.client.containers.get(where.container_id)
            stats = await asyncio.to_thread(container.stats, stream=False)
            return docker_sample(stats, folder)
        live = {s.id for s in self.server.sandboxes.every()}
        for gone in set(_marks) - live:
            del _marks[gone]
        sample, _marks[sandbox.id] = await asyncio.to_thread(
            local_sample, folder, _marks.get(sandbox.id)
        )
        return sample
