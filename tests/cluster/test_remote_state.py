"""A remote session's per-cell state, on the loopback cluster: saved on the kernel's host, signed
here, and back after ``kill -9`` of the remote kernel (``jupyter-exec gateway``, real SSH hosts).

The namespace is about 100 MB (the issue's measure). The kill comes when the cell that is
running says so on its output (never after a fixed time), and the state must come back whole
into the kernel the gateway restarted on the same host, under the same id and folder.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from jupyter_exec import Session
from tests.cluster_gateway import RunningGateway
from tests.cluster_hosts import Cluster

BIG = (
    "import numpy as np\n"
    "big = np.arange(12_500_000, dtype=np.int64)\n"  # 100 MB
    "table = {'rows': list(range(1000))}\n"
    "mark = 'kept'"
)
EXPECTED = "(78124993750000, 1000, 'kept')"
CHECK = "int(big.sum()), len(table['rows']), mark"


def _kill_on_output(cluster: Cluster, kernel_id: str, killed: list[float]) -> Any:
    """An ``on_output`` that kills the kernel -9 once the cell says it runs."""

    def on_output(event: dict[str, Any]) -> None:
        if not killed and "running" in str(event.get("text", "")):
            os.kill(cluster.kernel_process(kernel_id).pid, signal.SIGKILL)
            killed.append(time.monotonic())

    return on_output


def test_kill_9_of_the_remote_kernel_brings_a_100_mb_namespace_back(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    with Session(
        backend="remote", url=gateway.url, token=gateway.token, work_dir=work, name="big",
        timeout=300,
    ) as s:  # fmt: skip
        made = s.execute(BIG)
        assert made.ok, made.error
        host = made.host
        s.flush()  # the 100 MB generation written on the host and signed here
        kernel_id = str(s.kernel_id)
        cwd = ast.literal_eval(str(s.execute("import os; os.getcwd()").text))
        kept = Path(cwd) / f".big-{kernel_id}_state"
        assert (kept / "objects").is_dir()  # saved on the kernel's host...
        assert sorted(p.name for p in (work / ".big_state").iterdir()) == [
            "signed"
        ]  # ...signed here
        killed: list[float] = []
        died = s.execute(
            "print('running', flush=True)\nimport time\ntime.sleep(120)",
            on_output=_kill_on_output(loopback_cluster, kernel_id, killed),
        )
        back_at = time.monotonic()
        assert killed, "the cell never said it was running"
        assert died.status == "died", died
        assert died.recovered is not None, died.error
        assert died.recovered.source.startswith("generation "), died.recovered
        assert {"big", "table", "mark", "np"} <= set(died.recovered.names)
        assert died.error is not None
        assert "came back" in died.error.evalue
        after = s.execute(CHECK)
        done_at = time.monotonic()
        assert after.text == EXPECTED, after.error
        assert after.host == host
        assert s.kernel_id == kernel_id
        recorded = json.loads(Path(str(s.notebook_path)).read_text())
        assert recorded["cells"][2]["metadata"]["jupyter_exec"]["recovered"]["names"]
        print(
            f"kill -9 to died Execution {back_at - killed[0]:.2f} s; "
            f"to the next cell's result {done_at - killed[0]:.2f} s (100 MB)"
        )
    deadline = time.monotonic() + 10
    while kept.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not kept.exists()  # the state goes with the kernel's folder on close


def test_kill_9_while_idle_brings_the_state_back(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    with Session(
        backend="remote", url=gateway.url, token=gateway.token, work_dir=tmp_path / "w",
        timeout=120,
    ) as s:  # fmt: skip
        assert s.execute("rows = list(range(10))\nmark = 'idle'").ok
        s.flush()
        os.kill(loopback_cluster.kernel_process(str(s.kernel_id)).pid, signal.SIGKILL)
        first = s.execute("mark, sum(rows)")
        if first.status == "died":  # sent to the dead kernel: the next one has the state
            assert first.recovered is not None, first.error
            first = s.execute("mark, sum(rows)")
        assert first.text == "('idle', 45)", (first.status, first.error)


def test_save_state_false_keeps_nothing_on_the_host(
    gateway: RunningGateway, loopback_cluster: Cluster, tmp_path: Path
) -> None:
    with Session(
        backend="remote", url=gateway.url, token=gateway.token, work_dir=tmp_path / "w",
        name="off", save_state=False,
    ) as s:  # fmt: skip
        assert s.execute("x = 1").ok
        listing = s.execute("import os; sorted(os.listdir('.'))").text
        assert listing is not None
        assert "_state" not in listing
        assert not (tmp_path / "w" / ".off_state").exists()
