"""Sandboxes outlive the E2B server: ``Sandbox.connect(id)`` after a restart, with the real SDK.

``jupyter-exec e2b`` runs as a process in API mode, is stopped with SIGTERM or
SIGKILL and started again on the same root dir. The SDK then connects to the
sandbox it made before: its files are there, its default context's state
comes back (``x = 41`` before, ``x + 1 == 42`` after), and the token it was
given still opens it, while a wrong one does not. A killed sandbox stays gone.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from e2b import SandboxException
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import API_KEY, e2b_process

from jupyter_exec.e2b.saved import KIND
from jupyter_exec.manager.saved import registry_folder
from tests.server.server_helpers import free_port

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_connect_after_a_restart_reaches_the_same_sandbox_and_its_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    port = free_port()  # a restarted server listens where it did: a kept Sandbox finds it
    with e2b_process(tmp_path, monkeypatch, how, port):
        before = Sandbox.create(timeout=600, metadata={"job": "restart"})
        assert before.run_code("x = 41\nprint('set')").logs.stdout == ["set\n"]
        before.files.write("notes.txt", "kept on disk")
        sandbox_id = before.sandbox_id

    with e2b_process(tmp_path, monkeypatch, "SIGTERM", port):
        listed = [s.sandbox_id for s in Sandbox.list().next_items()]
        assert listed == [sandbox_id]
        after = Sandbox.connect(sandbox_id)
        assert after.files.read("notes.txt") == "kept on disk"
        assert after.run_code("x + 1").text == "42"
        # the object the client kept from before holds the same token: it still works
        assert before.run_code("x + 2").text == "43"
        assert after.get_info().metadata == {"job": "restart"}


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_paused_sandbox_and_its_lifecycle_outlive_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Paused, with ``on_timeout: pause`` and no ``auto_resume``: after the restart it is
    still listed as paused with that lifecycle, its next use still waits for ``connect``,
    and ``connect`` brings its state back; a second sandbox's lifecycle is kept too."""
    port = free_port()
    lifecycle = {"on_timeout": "pause", "auto_resume": False}
    with e2b_process(tmp_path, monkeypatch, how, port):
        paused = Sandbox.create(timeout=600, lifecycle=lifecycle)
        assert paused.run_code("x = 41\nprint('set')").logs.stdout == ["set\n"]
        assert paused.pause() is True
        running = Sandbox.create(timeout=600, lifecycle={"on_timeout": "pause"})
        running.run_code("y = 1")

    with e2b_process(tmp_path, monkeypatch, "SIGTERM", port) as url:
        states = {
            s.sandbox_id: s.state.value if hasattr(s.state, "value") else str(s.state)
            for s in Sandbox.list().next_items()
        }
        assert states == {paused.sandbox_id: "paused", running.sandbox_id: "running"}
        info = httpx.get(
            f"{url}/sandboxes/{paused.sandbox_id}", headers={"X-API-Key": API_KEY}, timeout=30
        ).json()
        assert info["lifecycle"] == {"onTimeout": "pause", "autoResume": False}
        info = httpx.get(
            f"{url}/sandboxes/{running.sandbox_id}", headers={"X-API-Key": API_KEY}, timeout=30
        ).json()
        assert info["lifecycle"] == {"onTimeout": "pause", "autoResume": True}
        with pytest.raises(SandboxException, match="connect to it first"):
            paused.run_code("x")
        back = Sandbox.connect(paused.sandbox_id)
        assert back.run_code("x + 1").text == "42"
        assert running.run_code("y + 1").text == "2"


def test_a_wrong_token_is_refused_after_a_restart_and_wakes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with e2b_process(tmp_path, monkeypatch, "SIGTERM"):
        sandbox = Sandbox.create(timeout=600)
        sandbox.run_code("secret = 'kept'")
        other = Sandbox.create(timeout=600)
        other_token = other._envd_access_token

    with e2b_process(tmp_path, monkeypatch, "SIGTERM") as url:
        for token in (other_token, "not-a-token", None):
            headers = {"X-Access-Token": token} if token else {}
            response = httpx.post(
                f"{url}/execute",
                json={"code": "print(secret)"},
                headers={**headers, "E2b-Sandbox-Id": sandbox.sandbox_id},
                timeout=30,
            )
            assert response.status_code in (401, 403), response.text
            assert "kept" not in response.text
        back = Sandbox.connect(sandbox.sandbox_id)
        assert back.run_code("print(secret)").logs.stdout == ["kept\n"]


def test_a_killed_sandbox_does_not_come_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with e2b_process(tmp_path, monkeypatch, "SIGTERM"):
        kept = Sandbox.create(timeout=600)
        gone = Sandbox.create(timeout=600)
        gone.kill()

    with e2b_process(tmp_path, monkeypatch, "SIGKILL"):
        assert [s.sandbox_id for s in Sandbox.list().next_items()] == [kept.sandbox_id]
        with pytest.raises(Exception, match="not found"):
            Sandbox.connect(gone.sandbox_id)
        # one from before the restart, killed before its first use: gone for good, and no
        # kernel is started to kill it
        Sandbox.kill(kept.sandbox_id)
        assert Sandbox.list().next_items() == []
        with pytest.raises(Exception, match="not found"):
            Sandbox.connect(kept.sandbox_id)


def test_the_registry_holds_no_token_and_no_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with e2b_process(tmp_path, monkeypatch, "SIGTERM"):
        sandbox = Sandbox.create(timeout=600, envs={"OPENAI_API_KEY": "sk-never-on-disk"})
        token = sandbox._envd_access_token
        leaked = sandbox.run_code(
            "import os; print(sorted(k for k in os.environ if 'TOKEN' in k or 'E2B' in k))"
        )
        assert leaked.logs.stdout == ["[]\n"]  # the envd token never reaches the kernel
    (entry,) = (tmp_path / registry_folder(KIND)).iterdir()
    text = entry.read_text()
    assert token is not None
    for secret in (token, "sk-never-on-disk", API_KEY):
        assert secret not in text
