"""Sessions through ``jupyter-exec gateway`` on the loopback cluster, against local kernels and
Jupyter Server with a plain kernel, in the same run.

The cluster is the tests' (``tests/cluster_hosts.py``: Debian's sshd on 127.0.0.2 and
127.0.0.3, ``scripts/provision-cluster``) and the gateway is started by the real command
(``tests/cluster_gateway.py``). For each of four ways to get a kernel, alternating:

* the gateway: ``Session(backend="remote", url=<gateway>)`` (SSH to a host, our launcher,
  CurveZMQ between the gateway and the kernel);
* Jupyter Server with a plain local kernel, through the same remote client;
* a local jupyter-exec session;
* the floor: jupyter_client's ``KernelManager`` + ``wait_for_ready`` + ``execute_interactive``;
* Enterprise Gateway 3.3 (``scripts/provision-gateways``) started with the files
  ``jupyter-exec gateway --write enterprise-gateway`` writes, on the same hosts
  (``tests/cluster/enterprise_gateway.py``), through the same remote client: its warm cell
  against ``jupyter-exec gateway``'s in the same run (left out, and said so, where EG's venv
  is missing).

Cold start is until the first cell's result; the warm round trip is ``1 + 1`` recorded in
the notebook. Also measured: a remote kernel killed with ``kill -9`` until the next cell's
result (noticed, restarted by the gateway, websocket reopened), and ``close()`` until no
process of the kernel is left on its host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.core import Config, Row, case, median, percentile, progress, scratch_dir
from benchmarks.floor import BlockingFloor
from jupyter_exec import Session

MS = 1000.0


def _check(value: Any, what: str) -> Any:
    if getattr(value, "ok", True) is not True:
        raise RuntimeError(f"{what}: {value.status} {value.error}")
    return value


@case("gateway")
def gateway_sessions(cfg: Config) -> list[Row]:
    """Cold start and warm round trip through the gateway, Jupyter Server and locally."""
    tests = str(Path(__file__).resolve().parent.parent)
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from tests.cluster.enterprise_gateway import (
        KERNEL,
        EnterpriseGatewayMissing,
        eg_executable,
        running_enterprise_gateway,
    )
    from tests.cluster_gateway import running_gateway
    from tests.cluster_hosts import start_cluster
    from tests.remote_servers import run_server

    starts = 3 if cfg.quick else 8
    chunks, chunk = (3, 10) if cfg.quick else (8, 25)
    try:
        eg_executable()
        eg_missing = ""
    except EnterpriseGatewayMissing as exc:
        eg_missing = str(exc)
    with scratch_dir("gateway") as root:
        cluster = start_cluster(root / "cluster")
        try:
            with contextlib.ExitStack() as stack:
                gateway = stack.enter_context(running_gateway(cluster, root / "gw"))
                server = stack.enter_context(run_server("jupyter_server", root / "js"))
                ways: dict[str, dict[str, Any]] = {
                    "gateway": {"backend": "remote", "url": gateway.url, "token": gateway.token},
                    "server": {"backend": "remote", "url": server.url, "token": server.token},
                    "local": {},
                }
                if not eg_missing:
                    eg = stack.enter_context(running_enterprise_gateway(cluster, root / "eg"))
                    ways["eg"] = {
                        "backend": "remote",
                        "url": eg.url,
                        "token": eg.token,
                        "kernel_name": KERNEL,
                    }
                cold = _cold_starts(root, ways, starts)
                warm = _warm_round_trips(root, ways, chunks, chunk)
                state = _state_on_off(root, ways["gateway"], chunks * chunk)
                back, gone = _kill_and_close(root, cluster, ways["gateway"])
        finally:
            cluster.stop()
    return [*_rows(cold, warm, back, gone, eg_missing), _state_row(state)]


def _cold_starts(
    root: Path, ways: dict[str, dict[str, Any]], repeats: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in (*ways, "floor")}
    for i in range(-1, repeats):  # -1: untimed, warms caches for all
        progress(f"gateway: cold starts {i + 1}/{repeats}")
        for name, options in ways.items():
            start = time.perf_counter()
            with Session(work_dir=root / f"cold-{name}-{i}", **options) as session:
                _check(session.execute("1"), name)
                elapsed = time.perf_counter() - start
            if i >= 0:
                times[name].append(elapsed)
        (root / f"floor-{i}").mkdir()
        start = time.perf_counter()
        floor = BlockingFloor(root / f"floor-{i}").start()
        floor.execute("1")
        elapsed = time.perf_counter() - start
        floor.close()
        if i >= 0:
            times["floor"].append(elapsed)
    return times


def _warm_round_trips(
    root: Path, ways: dict[str, dict[str, Any]], chunks: int, chunk: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in (*ways, "floor")}
    sessions = {name: Session(work_dir=root / f"warm-{name}", **o) for name, o in ways.items()}
    (root / "warm-floor").mkdir()
    floor = BlockingFloor(root / "warm-floor").start()
    try:
        runners = {
            name: (lambda s=s: _check(s.execute("1 + 1"), "warm")) for name, s in sessions.items()
        }
        runners["floor"] = lambda: floor.execute("1 + 1")
        for run in runners.values():
            for _ in range(5):
                run()
        for n in range(chunks):
            progress(f"gateway: warm round trips {n + 1}/{chunks}")
            for name, run in runners.items():
                for _ in range(chunk):
                    start = time.perf_counter()
                    run()
                    times[name].append(time.perf_counter() - start)
    finally:
        floor.close()
        for session in sessions.values():
            session.close()
    return times


STATE_CELL = "x = 1 + 1"
"""The warm cell of the state on/off rows: it changes a name, so the per-cell commit (in the
kernel's reply) has an object to store, and this host a generation to sign."""


def _state_on_off(root: Path, options: dict[str, Any], n: int) -> dict[str, list[float]]:
    """The warm cell through the gateway with ``save_state`` on (the default) and off, one
    call of each in turn (the order swapped every round), so load drifts hit both alike."""
    sessions = {
        "on": Session(work_dir=root / "state-on", **options),
        "off": Session(work_dir=root / "state-off", save_state=False, **options),
    }
    times: dict[str, list[float]] = {name: [] for name in sessions}
    try:
        for session in sessions.values():
            for _ in range(5):
                _check(session.execute(STATE_CELL), "state warm-up")
        order = list(sessions.items())
        for i in range(n):
            if i % 50 == 0:
                progress(f"gateway: state on/off {i}/{n}")
            for name, session in order if i % 2 else order[::-1]:
                start = time.perf_counter()
                _check(session.execute(STATE_CELL), f"state {name}")
                times[name].append(time.perf_counter() - start)
    finally:
        for session in sessions.values():
            session.close()
    return times


def _state_row(state: dict[str, list[float]]) -> Row:
    on, off = median(state["on"]) * MS, median(state["off"]) * MS
    return Row(
        f"gateway: warm {STATE_CELL!r} with per-cell state on (p50; floor: off)",
        on,
        off,
        "ms",
        f"n={len(state['on'])} each, alternating; on {(on / off - 1) * 100:+.1f} % over off; "
        f"p90 on {percentile(state['on'], 90) * MS:.1f} ms, off "
        f"{percentile(state['off'], 90) * MS:.1f} ms",
        {k: v for k, v in state.items()},
    )


def _kill_and_close(root: Path, cluster: Any, options: dict[str, Any]) -> tuple[float, float]:
    """Seconds from ``kill -9`` of the remote kernel to the next cell's result, and from
    ``close()`` to no process of the kernel left on its host."""
    progress("gateway: kill -9 and close")
    session = Session(work_dir=root / "kill", timeout=120, **options)
    _check(session.execute("x = 1"), "before the kill")
    kernel_id = str(session.kernel_id)
    victim = next(
        p for p in cluster.kernel_processes(kernel_id) if "ipykernel_launcher" in p.cmdline()
    )
    start = time.perf_counter()
    os.kill(victim.pid, signal.SIGKILL)
    first = session.execute("1 + 1")
    if first.status != "died":
        _check(first, "after the kill")
    else:
        _check(session.execute("1 + 1"), "after the kill")
    back = time.perf_counter() - start
    start = time.perf_counter()
    session.close()
    while cluster.kernel_processes(kernel_id):
        if time.perf_counter() - start > 30:
            raise RuntimeError(f"kernel {kernel_id} still runs 30 s after close()")
        time.sleep(0.01)
    return back, time.perf_counter() - start


def _eg_rows(cold: dict[str, list[float]], warm: dict[str, list[float]], missing: str) -> list[Row]:
    """Enterprise Gateway's warm cell against ``jupyter-exec gateway``'s, same run, same hosts."""
    case = "gateway: warm 1+1 through Enterprise Gateway, written files (p50)"
    if missing:
        return [Row(case, None, None, "ms", f"not run: {missing}")]
    eg, ours = median(warm["eg"]) * MS, median(warm["gateway"]) * MS
    return [
        Row(
            case,
            eg,
            ours,
            "ms",
            f"n={len(warm['eg'])}; floor column = jupyter-exec gateway's warm cell in this "
            f"run; EG - ours = {eg - ours:.1f} ms (the issue's target: 2 ms); EG session "
            f"start {median(cold['eg']):.2f} s",
        )
    ]


def _rows(
    cold: dict[str, list[float]],
    warm: dict[str, list[float]],
    back: float,
    gone: float,
    eg_missing: str = "",
) -> list[Row]:
    def ms(name: str) -> str:
        return f"{median(warm[name]) * MS:.2f} ms"

    return [
        *_eg_rows(cold, warm, eg_missing),
        Row(
            "gateway: session start over SSH (cold, median)",
            median(cold["gateway"]),
            median(cold["floor"]),
            "s",
            f"n={len(cold['gateway'])}; Jupyter Server, plain kernel: "
            f"{median(cold['server']):.2f} s; local jupyter-exec: {median(cold['local']):.2f} s; "
            "floor = local raw jupyter_client",
        ),
        Row(
            "gateway: warm 1+1 through the gateway (p50)",
            median(warm["gateway"]) * MS,
            median(warm["floor"]) * MS,
            "ms",
            f"n={len(warm['gateway'])}; p90 {percentile(warm['gateway'], 90) * MS:.1f} ms; "
            f"Jupyter Server, plain kernel: {ms('server')}; local jupyter-exec: {ms('local')}; "
            "floor = local raw jupyter_client",
            {k: v for k, v in warm.items()},
        ),
        Row(
            "gateway: warm 1+1 through Jupyter Server, plain kernel (p50)",
            median(warm["server"]) * MS,
            median(warm["floor"]) * MS,
            "ms",
            f"n={len(warm['server'])}; the same remote client, a kernel on the server's machine",
        ),
        Row(
            "gateway: kill -9 of the remote kernel to the next result",
            back,
            None,
            "s",
            "noticed by the gateway's restarter, restarted once, websocket reopened",
        ),
        Row(
            "gateway: close() to no kernel process on its host",
            gone,
            None,
            "s",
            "the issue's bound: 2 s",
        ),
    ]
