"""Attacks on REST sleep: a wake racing a delete, a stranger putting a session to sleep, a
Docker session taking a sleeping local session's folder.

A real ``jupyter server`` process with the extension, real kernels. The assets: no kernel
left running for a session that is gone (the server's memory), a session's state and its
saved entry, the server's token.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.conftest import docker_engine
from tests.server.restart_helpers import call, kernels, new_session, run, stop
from tests.server.server_helpers import JupyterProcess, install_docker_kernelspec

pytestmark = pytest.mark.timeout(300)


def test_a_wake_racing_a_delete_leaves_no_kernel_and_no_session(tmp_path: Path) -> None:
    """Many times over: one client wakes a sleeping session with a cell while another
    deletes it. Whatever the order, the delete wins in the end: no session, no kernel,
    no entry that would come back after a restart."""
    with JupyterProcess(tmp_path) as server:
        with ThreadPoolExecutor(2) as pool:
            for attempt in range(4):
                model = new_session(server, name=f"race{attempt}")
                assert run(server, model["id"], "x = 1")["status"] == "ok"
                status, _ = call(server, "POST", f"sessions/{model['id']}/sleep")
                assert status == 200
                woke = pool.submit(
                    call, server, "POST", f"sessions/{model['id']}/execute", {"code": "x"}
                )
                deleted = pool.submit(call, server, "DELETE", f"sessions/{model['id']}")
                assert woke.result()[0] in (200, 404, 409, 410), woke.result()
                if deleted.result()[0] != 204:  # deleted while it woke: it is live; delete it
                    assert deleted.result()[0] in (404, 409), deleted.result()
                    call(server, "DELETE", f"sessions/{model['id']}")
                assert call(server, "GET", f"sessions/{model['id']}")[0] == 404
        deadline = time.monotonic() + 60
        while kernels(server):  # a kernel shutting down goes; none may stay
            assert time.monotonic() < deadline, kernels(server)
            time.sleep(0.1)
        stop(server, "SIGKILL")
    with JupyterProcess(tmp_path) as server:
        assert call(server, "GET", "sessions") == (200, [])  # nothing comes back
        stop(server, "SIGTERM")


def test_a_stranger_cannot_put_a_session_to_sleep(tmp_path: Path) -> None:
    with JupyterProcess(tmp_path) as server:
        model = new_session(server, name="victim")
        assert run(server, model["id"], "x = 41")["status"] == "ok"
        url = f"{server.url}/api/exec/sessions/{model['id']}/sleep"
        for headers in ({}, {"Authorization": "token not-the-token"}):
            answer = requests.post(url, headers=headers, timeout=30)
            assert answer.status_code in (401, 403), answer.text
        status, now = call(server, "GET", f"sessions/{model['id']}")
        assert (status, now["sleeping"]) == (200, False)  # untouched: awake, its kernel running
        assert now["kernel"]["id"] in [k["id"] for k in kernels(server)]
        assert run(server, model["id"], "print(x + 1)")["stdout"] == "42\n"
        stop(server, "SIGTERM")


def test_a_docker_session_cannot_take_a_sleeping_local_sessions_folder(tmp_path: Path) -> None:
    """Asleep, a local session still owns its work dir: a Docker kernel put there meanwhile
    could plant what the local kernel imports, or rewrite the notebook it resumes from."""
    docker_engine().close()
    install_docker_kernelspec(
        tmp_path / "data", os.environ.get("JX_TEST_IMAGE", "jupyter-exec/kernel:latest")
    )
    with JupyterProcess(tmp_path) as server:
        mine = new_session(server, name="mine", work_dir="shared")
        assert run(server, mine["id"], "x = 41")["status"] == "ok"
        assert call(server, "POST", f"sessions/{mine['id']}/sleep")[0] == 200
        before = sorted(p.name for p in (server.root / "shared").iterdir())

        status, error = call(
            server,
            "POST",
            "sessions",
            {"name": "intruder", "work_dir": "shared", "backend": "docker"},
        )

        assert (status, error["error"]) == (400, "WorkDirShared"), error
        assert "asleep" in error["message"]
        assert sorted(p.name for p in (server.root / "shared").iterdir()) == before
        assert run(server, mine["id"], "print(x + 1)")["stdout"] == "42\n"  # woke, state back
        status, error = call(
            server,
            "POST",
            "sessions",
            {"name": "intruder", "work_dir": "shared", "backend": "docker"},
        )
        assert (status, error["error"]) == (400, "WorkDirShared"), error  # awake: still its own
        stop(server, "SIGTERM")
