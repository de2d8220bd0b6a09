"""Attacks on the REST extension's session registry, which brings sessions back after a restart.

The attacker writes the registry (``<root>/.jupyter_exec/sessions/``) between two
runs of the server: as a kernel whose work dir is the server root (it runs code
that plants files there), or as a local user editing the files. Every forged,
edited, copied or malformed entry is skipped with a log line on the next start:
the listing answers 200 without it, no kernel starts for it, and what it pointed
at is untouched. A client holding the old server's token gets nothing after a
restart with a new one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import requests
from nbformat.v4 import new_notebook
from restart_helpers import call, kernels, new_session, run, stop
from server_helpers import JupyterProcess, install_docker_kernelspec

from jupyter_exec.server.paths import ServerRoot
from jupyter_exec.server.saved import FOLDER, SavedSession, SessionRegistry

pytestmark = pytest.mark.timeout(300)

TEST_IMAGE = os.environ.get("JX_TEST_IMAGE", "jupyter-exec/kernel:latest")

FORGED_ID = "f" * 32


def registry(server_dir: Path) -> Path:
    return server_dir / "root" / FOLDER


def entry_of(server_dir: Path, session_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((registry(server_dir) / f"{session_id}.json").read_text())
    return data


def plant_from_kernel(server: JupyterProcess, session_id: str, name: str, data: Any) -> None:
    """The session's kernel (work dir: the server root) writes a registry file itself."""
    code = (
        "import json, os\n"
        f"os.makedirs({FOLDER!r}, exist_ok=True)\n"
        f"open(os.path.join({FOLDER!r}, {name!r}), 'w').write(json.dumps({data!r}))\n"
    )
    assert run(server, session_id, code)["status"] == "ok"


def listed(server: JupyterProcess) -> list[dict[str, Any]]:
    status, listing = call(server, "GET", "sessions")
    assert status == 200, server.tail()
    assert isinstance(listing, list)
    return listing


def skipped_lines(server: JupyterProcess) -> list[str]:
    return [
        line
        for line in server.log.read_text(errors="replace").splitlines()
        if "skipping session registry entry" in line
    ]


def forged(work_dir: str, **changes: Any) -> dict[str, Any]:
    """An entry shaped as the server writes one, signed with a key the attacker guesses."""
    entry = {
        "id": FORGED_ID,
        "name": "evil",
        "backend": "local",
        "kernel_name": "python3",
        "work_dir": work_dir,
        "notebook": f"{work_dir}/evil.ipynb",
        "created": "2026-01-01T00:00:00+00:00",
        "timeout": None,
        "undo_steps": 0,
        **changes,
    }
    return {"v": 1, "entry": entry, "mac": "0" * 64}


def test_kernel_forged_registry_entry_pointing_outside_the_root_is_refused(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.ipynb").write_text("{}")
    with JupyterProcess(tmp_path) as server:
        model = new_session(server, name="agent", work_dir="")
        plant_from_kernel(server, model["id"], f"{FORGED_ID}.json", forged("../outside"))
        stop(server, "SIGKILL")

    with JupyterProcess(tmp_path) as server:
        assert [s["id"] for s in listed(server)] == [model["id"]]
        status, body = call(server, "POST", f"sessions/{FORGED_ID}/execute", {"code": "1"})
        assert status == 404, body
        assert kernels(server) == []
        (line,) = skipped_lines(server)
        assert "signature does not match" in line
        stop(server, "SIGTERM")
    assert (outside / "evil.ipynb").read_text() == "{}"


def test_kernel_editing_its_own_registry_entry_to_leave_the_root_is_refused(
    tmp_path: Path,
) -> None:
    """The kernel rewrites its session's genuine entry (signature kept) to another work dir."""
    with JupyterProcess(tmp_path) as server:
        model = new_session(server, name="agent", work_dir="")
        data = entry_of(tmp_path, model["id"])
        data["entry"].update(work_dir="..", notebook="../agent.ipynb")
        plant_from_kernel(server, model["id"], f"{model['id']}.json", data)
        stop(server, "SIGTERM")

    with JupyterProcess(tmp_path) as server:
        assert listed(server) == []
        status, _ = call(server, "POST", f"sessions/{model['id']}/execute", {"code": "1"})
        assert status == 404
        assert kernels(server) == []
        assert "signature does not match" in skipped_lines(server)[0]
        stop(server, "SIGTERM")
    assert not (tmp_path / "agent.ipynb").exists()


def test_registry_entry_of_a_docker_kernel_turned_local_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local user flips a saved Docker session's backend so it would come back on the host."""
    key = {"JUPYTER_EXEC_CHECKPOINT_KEY": str(tmp_path / "host.key")}
    with JupyterProcess(tmp_path, env=key) as server:
        stop(server, "SIGTERM")
    monkeypatch.setenv("JUPYTER_EXEC_CHECKPOINT_KEY", key["JUPYTER_EXEC_CHECKPOINT_KEY"])
    root = ServerRoot(tmp_path / "root")
    (tmp_path / "root" / "boxed").mkdir()
    (tmp_path / "root" / "boxed" / "boxed.ipynb").write_text(json.dumps(new_notebook()))
    saved = SavedSession(
        id="d" * 32,
        name="boxed",
        backend="docker",
        kernel_name="python3-docker",
        work_dir="boxed",
        notebook="boxed/boxed.ipynb",
        created="2026-01-01T00:00:00+00:00",
        timeout=None,
        undo_steps=0,
    )
    SessionRegistry(root, {"local": "python3", "docker": "python3-docker"}).save(saved)
    path = registry(tmp_path) / f"{saved.id}.json"
    data = json.loads(path.read_text())
    data["entry"].update(backend="local", kernel_name="python3")
    path.write_text(json.dumps(data))

    with JupyterProcess(tmp_path, env=key) as server:
        assert listed(server) == []
        status, _ = call(server, "POST", f"sessions/{saved.id}/execute", {"code": "1"})
        assert status == 404
        assert kernels(server) == []
        assert "signature does not match" in skipped_lines(server)[0]
        stop(server, "SIGTERM")


def test_kernel_injecting_env_into_a_registry_entry_is_refused(tmp_path: Path) -> None:
    with JupyterProcess(tmp_path) as server:
        model = new_session(server, name="agent", work_dir="")
        data = entry_of(tmp_path, model["id"])
        data["entry"]["env"] = {"LD_PRELOAD": "/tmp/evil.so", "PYTHONSTARTUP": "evil.py"}
        plant_from_kernel(server, model["id"], f"{model['id']}.json", data)
        stop(server, "SIGKILL")

    with JupyterProcess(tmp_path) as server:
        assert listed(server) == []
        assert kernels(server) == []
        assert skipped_lines(server)
        stop(server, "SIGTERM")


def test_registry_entry_copied_from_another_server_root_is_refused(tmp_path: Path) -> None:
    """Same host key, another root: an entry signed for one root means nothing in another."""
    first, second = tmp_path / "a", tmp_path / "b"
    env = {"JUPYTER_EXEC_CHECKPOINT_KEY": str(tmp_path / "host.key")}
    with JupyterProcess(first, env=env) as server:
        model = new_session(server, name="elsewhere")
        stop(server, "SIGTERM")
    with JupyterProcess(second, env=env) as server:
        stop(server, "SIGTERM")
    registry(second).mkdir(parents=True, exist_ok=True)
    copied = registry(second) / f"{model['id']}.json"
    copied.write_bytes((registry(first) / f"{model['id']}.json").read_bytes())
    (second / "root" / "elsewhere.ipynb").write_bytes(
        (first / "root" / "jupyter-exec" / "elsewhere" / "elsewhere.ipynb").read_bytes()
    )

    with JupyterProcess(second, env=env) as server:
        assert listed(server) == []
        assert "signature does not match" in skipped_lines(server)[0]
        stop(server, "SIGTERM")


def test_malformed_registry_files_are_skipped_never_a_500(tmp_path: Path) -> None:
    with JupyterProcess(tmp_path) as server:
        model = new_session(server, name="good")
        run(server, model["id"], "x = 41")
        stop(server, "SIGTERM")
    folder = registry(tmp_path)
    (folder / f"{'a' * 32}.json").write_text("{not json")
    (folder / f"{'b' * 32}.json").write_bytes(b"{" + b" " * (1 << 20) + b"}")  # too large
    (folder / f"{'c' * 32}.json").write_text(json.dumps([1, 2, 3]))
    (folder / f"{'d' * 32}.json").mkdir()
    os.mkfifo(folder / f"{'e' * 32}.json")  # a read would block the server's start
    (folder / f"{'0' * 32}.json").symlink_to(folder / f"{model['id']}.json")
    (folder / "../../escape.json").write_text("{}")
    (folder / "not-an-id.json").write_text(json.dumps(entry_of(tmp_path, model["id"])))

    with JupyterProcess(tmp_path) as server:
        (good,) = listed(server)
        assert good["id"] == model["id"]
        assert run(server, model["id"], "print(x + 1)")["stdout"] == "42\n"
        assert len(skipped_lines(server)) == 7
        stop(server, "SIGTERM")


def test_registry_folder_replaced_by_a_link_is_refused(tmp_path: Path) -> None:
    """A kernel swaps the registry for a link to a folder of its making: nothing is read."""
    with JupyterProcess(tmp_path) as server:
        model = new_session(server, name="agent", work_dir="")
        code = (
            "import os, shutil\n"
            "shutil.copytree('.jupyter_exec/sessions', 'mine')\n"
            "shutil.rmtree('.jupyter_exec/sessions')\n"
            "os.symlink(os.path.abspath('mine'), '.jupyter_exec/sessions')\n"
        )
        assert run(server, model["id"], code)["status"] == "ok"
        stop(server, "SIGTERM")

    with JupyterProcess(tmp_path) as server:
        assert listed(server) == []
        assert "the session registry" in server.log.read_text()
        stop(server, "SIGTERM")


def test_old_token_after_a_restart_neither_reaches_nor_wakes_a_session(tmp_path: Path) -> None:
    """A client replays the token of the server before the restart, which now has another."""
    with JupyterProcess(tmp_path, token="before-restart") as server:
        model = new_session(server, name="private")
        run(server, model["id"], "secret = 'kept'")
        stop(server, "SIGTERM")

    with JupyterProcess(tmp_path, token="after-restart") as server:
        stale = {"Authorization": "token before-restart"}
        for method, path, body in [
            ("GET", "sessions", None),
            ("GET", f"sessions/{model['id']}", None),
            ("POST", f"sessions/{model['id']}/execute", {"code": "print(secret)"}),
        ]:
            response = requests.request(
                method, f"{server.url}/api/exec/{path}", headers=stale, json=body, timeout=30
            )
            assert response.status_code == 403, (path, response.text)
            assert "kept" not in response.text
        assert kernels(server) == []  # no kernel woke for the stranger
        (still,) = listed(server)
        assert still["status"] == "dormant"
        stop(server, "SIGTERM")


@pytest.mark.docker
def test_docker_kernel_turning_its_session_local_in_the_registry_is_refused(
    tmp_path: Path,
) -> None:
    """A Docker kernel whose work dir is the server root tries to rewrite its own session's entry
    so that, after the restart, it would come back as a local kernel (on the host), and to plant
    a second entry of its own making. The registry folder is the server user's (0700), so the
    container's writes are refused; any that got through would fail the signature on load. No
    session comes back on the host, no kernel starts for the forged one."""
    install_docker_kernelspec(tmp_path / "data", TEST_IMAGE)
    with JupyterProcess(tmp_path) as server:
        model = new_session(server, name="boxed", backend="docker", work_dir="")
        assert entry_of(tmp_path, model["id"])["entry"]["backend"] == "docker"
        code = (
            "import json, os\n"
            f"path = os.path.join({FOLDER!r}, {model['id'] + '.json'!r})\n"
            "def attempt(what, act):\n"
            "    try:\n"
            "        act()\n"
            "        print(what, 'written')\n"
            "    except OSError as exc:\n"
            "        print(what, 'refused', exc.errno)\n"
            "def turn_local():\n"
            "    data = json.load(open(path))\n"
            "    data['entry'].update(backend='local', kernel_name='python3')\n"
            "    open(path, 'w').write(json.dumps(data))\n"
            "attempt('edit', turn_local)\n"
            f"attempt('forge', lambda: open(os.path.join({FOLDER!r}, {FORGED_ID + '.json'!r}),\n"
            f"    'w').write(json.dumps({forged('')!r})))\n"
        )
        out = run(server, model["id"], code)
        assert out["status"] == "ok", out["error"]
        attempts = out["stdout"]
        stop(server, "SIGKILL")

    with JupyterProcess(tmp_path) as server:
        back = listed(server)  # the genuine entry, if the kernel could not touch it
        assert [(s["id"], s["backend"]) for s in back] in ([], [(model["id"], "docker")])
        status, body = call(server, "POST", f"sessions/{FORGED_ID}/execute", {"code": "1"})
        assert status == 404, body
        assert kernels(server) == []
        lines = skipped_lines(server)
        written = attempts.count("written")  # each write that got through is refused on load
        assert len(lines) == written, (attempts, lines)
        assert all("signature does not match" in line for line in lines)
        if "edit written" not in attempts:  # the folder is the server's (0700): it comes back
            assert [s["status"] for s in back] == ["dormant"]
        stop(server, "SIGTERM")


def test_client_session_in_the_registry_folder_is_refused_even_with_hidden_files_allowed(
    tmp_path: Path,
) -> None:
    """With hidden folders served, a client asks for a session whose kernel works in the
    registry itself (it could then write entries): refused with 400, no kernel started."""
    with JupyterProcess(tmp_path, "--ContentsManager.allow_hidden=True") as server:
        new_session(server, name="first")  # the registry exists now
        for work_dir in (".jupyter_exec", ".jupyter_exec/sessions", ".jupyter_exec/x/y"):
            status, body = call(server, "POST", "sessions", {"name": "sneak", "work_dir": work_dir})
            assert status == 400, body
            assert "keeps its sessions across restarts" in body["message"]
        assert len(kernels(server)) == 1
        stop(server, "SIGTERM")
    assert sorted(p.suffix for p in registry(tmp_path).iterdir()) == [".json"]
