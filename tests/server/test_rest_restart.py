"""Sessions outlive the Jupyter server: stopped (SIGTERM or SIGKILL) and started again on the
same root, it lists the sessions it had and brings each back, state and notebook, on first use.

Real ``jupyter server`` processes over loopback, stopped as a process manager stops them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from jupyter_exec.server.saved import FOLDER
from tests.conftest import read_valid_notebook
from tests.server.restart_helpers import STOPS, call, new_session, run, stop
from tests.server.server_helpers import JupyterProcess

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("how", STOPS)
def test_a_session_and_its_state_come_back_after_the_server_restarts(
    tmp_path: Path, how: str
) -> None:
    with JupyterProcess(tmp_path) as server:
        model = new_session(server, name="job", work_dir="work")
        assert run(server, model["id"], "x = 41\nprint('set')")["stdout"] == "set\n"
        stop(server, how)

    with JupyterProcess(tmp_path) as server:
        status, listing = call(server, "GET", "sessions")
        assert status == 200
        (back,) = listing
        assert (back["id"], back["name"], back["status"]) == (model["id"], "job", "dormant")
        assert back["notebook"]["path"] == "work/job.ipynb"
        assert back["created"] == model["created"]
        assert back["kernel"]["id"] is None  # no kernel until its first use
        assert back["cells"] == 1  # what its notebook recorded

        out = run(server, model["id"], "print(x + 1)")

        assert (out["status"], out["stdout"]) == ("ok", "42\n")
        status, now = call(server, "GET", f"sessions/{model['id']}")
        assert status == 200
        assert now["status"] in ("idle", "busy")  # live again (its idle message may lag)
        assert now["kernel"]["alive"] is True
        notebook = read_valid_notebook(server.root / "work" / "job.ipynb")
        sources = [c.source for c in notebook.cells if c.cell_type == "code"]
        assert sources == ["x = 41\nprint('set')", "print(x + 1)"]  # one record, extended
        stop(server, "SIGTERM")


def test_concurrent_first_uses_share_one_resume(tmp_path: Path) -> None:
    """Two clients' first requests after the restart bring back one session, not two."""
    from concurrent.futures import ThreadPoolExecutor

    with JupyterProcess(tmp_path) as server:
        model = new_session(server, name="twice")
        run(server, model["id"], "hits = []")
        stop(server, "SIGTERM")

    with JupyterProcess(tmp_path) as server:
        with ThreadPoolExecutor(2) as pool:
            outs = list(pool.map(lambda _: run(server, model["id"], "hits.append(1)"), range(2)))
        assert [o["status"] for o in outs] == ["ok", "ok"]
        assert run(server, model["id"], "print(len(hits))")["stdout"] == "2\n"
        kernels = requests.get(f"{server.url}/api/kernels", headers=server.headers, timeout=10)
        assert len(kernels.json()) == 1
        stop(server, "SIGTERM")


def test_a_deleted_session_does_not_come_back(tmp_path: Path) -> None:
    with JupyterProcess(tmp_path) as server:
        kept = new_session(server, name="kept")
        gone = new_session(server, name="gone")
        status, _ = call(server, "DELETE", f"sessions/{gone['id']}")
        assert status == 204
        stop(server, "SIGKILL")

    with JupyterProcess(tmp_path) as server:
        status, listing = call(server, "GET", "sessions")
        assert [s["id"] for s in listing] == [kept["id"]]
        status, _ = call(server, "POST", f"sessions/{gone['id']}/execute", {"code": "1"})
        assert status == 404
        # a dormant one deleted before any use is gone too, without a kernel started
        status, _ = call(server, "DELETE", f"sessions/{kept['id']}")
        assert status == 204
        kernels = requests.get(f"{server.url}/api/kernels", headers=server.headers, timeout=10)
        assert kernels.json() == []
        stop(server, "SIGTERM")

    assert list((tmp_path / "root" / FOLDER).iterdir()) == []
    with JupyterProcess(tmp_path) as server:
        assert call(server, "GET", "sessions") == (200, [])
        stop(server, "SIGTERM")


def test_the_registry_keeps_no_secret_and_only_what_starts_a_kernel(tmp_path: Path) -> None:
    """The entry names the session; the server's token and environment are not in it."""
    env = {"JUPYTER_EXEC_TEST_SECRET": "s3cr3t-value-never-saved"}
    with JupyterProcess(tmp_path, env=env) as server:
        model = new_session(server, name="plain")
        stop(server, "SIGTERM")
    (entry,) = (tmp_path / "root" / FOLDER).iterdir()
    text = entry.read_text()
    assert entry.name == f"{model['id']}.json"
    assert entry.stat().st_mode & 0o077 == 0
    for secret in ("test-token", "s3cr3t-value-never-saved", "JPY_SESSION_NAME"):
        assert secret not in text
