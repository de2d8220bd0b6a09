"""Finding 2 (and the replay half of finding 10), tried as the attacker: a Docker kernel forges
or alters checkpoints so that a session on the host unpickles its code.

The attacker is code in a real Docker kernel (our image, our engine): it writes into its work
dir, which the host later reads. The host's defence is :mod:`jupyter_exec.boundary.trust`:
a MAC under a key the host keeps, over a manifest that names every file's sha256 and the
backend that wrote it, and a refusal to load a Docker checkpoint into a kernel on the host
without ``trust_origin=True``. Each test checks the refusal (our ``CheckpointError``, naming
what is wrong and, where it applies, the flag) and that the attacker's command never ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec import Checkpoint, CheckpointError, Session
from jupyter_exec.boundary import trust as checkpoint_trust
from tests.checkpoint_helpers import manifest_body
from tests.cli_helpers import run_cli
from tests.docker.conftest import (  # noqa: F401  (fixtures, used by name)
    docker_client,
    kernel_image,
    no_container_left_behind,
    work,
)

DEADLINE = 120


def local_session(work_dir: Path, name: str) -> Session:
    return Session(work_dir=work_dir, name=name, timeout=DEADLINE, checkpoint_every=0)


def docker_session(work_dir: Path, name: str, image: str) -> Session:
    return Session(
        backend="docker",
        work_dir=work_dir,
        name=name,
        docker={"image": image},
        timeout=DEADLINE,
        checkpoint_every=0,
    )  # type: ignore[arg-type]


def forge_code(folder: str, marker: Path, mac: str | None) -> str:
    """Code for the attacking kernel: a checkpoint folder whose one value, unpickled, runs
    ``touch marker`` (a pickle of ``posix.system``), with a manifest whose unkeyed sha256 it
    recomputes, the host's Python version, no libraries, and an origin that says "local"."""
    body_extra = {"mac": mac} if mac is not None else {}
    return f"""
import hashlib, json, os, pickle, posix, time
class Boom:
    def __reduce__(self):
        return (posix.system, ({f"touch {marker}"!r},))
data = pickle.dumps(Boom(), protocol=5)
folder = {folder!r}
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, 'v00000.pkl'), 'wb') as f:
    f.write(data)
body = {{
    'format': 'jupyter-exec-checkpoint', 'version': 1, 'name': os.path.basename(folder),
    'session': 'victim', 'cell_index': 0, 'created': time.time(), 'undone': [],
    'environment': {{'python': {platform.python_version()!r}, 'implementation': 'cpython',
                    'serialiser': {{'name': 'pickle', 'version': '5'}}, 'libraries': {{}}}},
    'variables': [{{'name': 'x', 'kind': 'pickle', 'file': 'v00000.pkl', 'size': len(data),
                   'sha256': hashlib.sha256(data).hexdigest(), 'parts': [len(data)],
                   'type': 'builtins.int'}}],
    'skipped': [], 'origin': {{'backend': 'local'}},
}}
canonical = json.dumps(body, sort_keys=True, separators=(',', ':'))
outer = {{'sha256': hashlib.sha256(canonical.encode()).hexdigest(), 'body': body}}
outer.update({body_extra!r})
with open(os.path.join(folder, 'manifest.json'), 'w') as f:
    json.dump(outer, f)
print('forged')
"""


def resum(folder: Path, change: Any) -> None:
    """What an attacker without the key can do: edit the body and recompute its sha256 (the MAC
    it cannot recompute is left as it was)."""
    outer = json.loads((folder / "manifest.json").read_text())
    change(outer["body"])
    canonical = json.dumps(outer["body"], sort_keys=True, separators=(",", ":"))
    outer["sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(outer))


# -- a forged checkpoint, written by a real Docker kernel ------------------------------------


@pytest.mark.docker
@pytest.mark.parametrize("mac", [None, "0" * 64], ids=["no-mac", "made-up-mac"])
def test_f2_docker_kernel_forged_checkpoint_never_runs_on_the_host(
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
    tmp_path: Path,
    mac: str | None,
) -> None:
    marker = tmp_path / "pwned-by-container"
    # The attacker writes into the checkpoints folder of a host session sharing its work dir
    # (found by name), and a copy anywhere else (loaded by path).
    planted = work / ".victim_checkpoints" / "evil"
    with docker_session(work, "attacker", kernel_image) as attacker:
        code = forge_code("/work/.victim_checkpoints/evil", marker, mac)
        assert attacker.execute(code).raise_for_error().stdout.strip() == "forged"
    assert (planted / "manifest.json").is_file()

    with pytest.raises(CheckpointError) as refused:
        Checkpoint.load(planted)
    words = str(refused.value)
    assert "it was not loaded" in words
    assert ("no MAC" in words) if mac is None else ("does not carry this host's MAC" in words)

    with local_session(work, "victim") as victim:
        victim.execute("x = 'mine'").raise_for_error()
        for attempt in (planted, "evil"):
            with pytest.raises(CheckpointError, match="MAC"):
                victim.restore(attempt)
            with pytest.raises(CheckpointError, match="MAC"):  # no flag opens a forgery
                victim.restore(attempt, trust_origin=True, force=True)
        assert victim.execute("x").text == "'mine'"
        assert [c.name for c in victim.checkpoints()] == []  # a listing leaves it out
    assert not marker.exists()


def test_f2_altered_genuine_checkpoint_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with local_session(tmp_path / "w", "s") as s:
        s.execute("x = [1, 2, 3]\ny = 'text'").raise_for_error()
        made = s.checkpoint("good")
        assert made.path is not None
        assert made.origin == {"backend": "local"}

        payload = tmp_path / "payload"
        shutil.copytree(made.path, payload)
        first = next(payload.glob("v*.pkl"))
        data = bytearray(first.read_bytes())
        data[len(data) // 2] ^= 0x01  # one byte
        first.write_bytes(bytes(data))
        with pytest.raises(CheckpointError, match=r"damaged.*does not match its checksum"):
            Checkpoint.load(payload)

        field = tmp_path / "field"
        shutil.copytree(made.path, field)
        resum(field, lambda body: body.update(cell_index=99))
        with pytest.raises(CheckpointError, match="does not carry this host's MAC"):
            Checkpoint.load(field)

        # The payload swapped for the attacker's, its sha256 put in the manifest: the MAC.
        swapped = tmp_path / "swapped"
        shutil.copytree(made.path, swapped)
        boom = (
            b"\x80\x05\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94"
            b"\x93\x94\x8c" + bytes([len(f"touch {marker}")]) + f"touch {marker}".encode()
            + b"\x94\x85\x94R\x94."
        )  # fmt: skip
        (swapped / first.name).write_bytes(boom)

        def point_at_boom(body: dict[str, Any]) -> None:
            for entry in body["variables"]:
                if entry.get("file") == first.name:
                    entry.update(size=len(boom), parts=[len(boom)])
                    entry["sha256"] = hashlib.sha256(boom).hexdigest()

        resum(swapped, point_at_boom)
        for folder in (payload, field, swapped):
            with pytest.raises(CheckpointError):
                s.restore(folder, trust_origin=True, force=True)
        assert s.execute("y").text == "'text'"
    assert not marker.exists()


def test_f2_genuine_local_checkpoint_still_restores(tmp_path: Path) -> None:
    with local_session(tmp_path / "a", "a") as first:
        first.execute("rows = [1, 2, 3]").raise_for_error()
        made = first.checkpoint("kept")
    assert made.path is not None
    loaded = Checkpoint.load(made.path)
    assert loaded.origin == {"backend": "local"}
    with local_session(tmp_path / "b", "b") as second:
        second.restore(made.path)
        assert second.execute("rows").text == "[1, 2, 3]"


# -- a genuine Docker checkpoint, into a session on the host --------------------------------


@pytest.mark.docker
def test_f2_docker_checkpoint_into_a_local_session_needs_the_trust_flag(
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    with docker_session(work, "box", kernel_image) as box:
        box.execute("rows = [4, 5, 6]").raise_for_error()
        made = box.checkpoint("boxed")
        assert made.path is not None
        assert made.origin["backend"] == "docker"
        assert made.origin["image"]
        # Docker into Docker: no flag needed.
        box.execute("rows = 'changed'").raise_for_error()
        box.restore("boxed")
        assert box.execute("rows").text == "[4, 5, 6]"
    assert Checkpoint.load(made.path).origin["backend"] == "docker"

    # The origin flipped to "local" by the kernel (which can write the manifest): the MAC.
    flipped = tmp_path / "flipped"
    shutil.copytree(made.path, flipped)
    resum(flipped, lambda body: body.update(origin={"backend": "local"}))
    with pytest.raises(CheckpointError, match="does not carry this host's MAC"):
        Checkpoint.load(flipped)

    with local_session(tmp_path / "host", "host") as host:
        host.execute("rows = 'host'").raise_for_error()
        with pytest.raises(CheckpointError) as refused:
            host.restore(made.path)
        words = str(refused.value)
        assert "written by a Docker kernel" in words
        assert "not loaded" in words
        assert checkpoint_trust.TRUST_FLAG in words
        assert checkpoint_trust.TRUST_CLI_FLAG in words
        assert host.execute("rows").text == "'host'"
        with pytest.raises(CheckpointError, match="does not carry this host's MAC"):
            host.restore(flipped)
        host.restore(made.path, trust_origin=True)
        assert host.execute("rows").text == "[4, 5, 6]"

    # The CLI: refused without the flag (exit 2, one line naming it), loaded with it.
    script = tmp_path / "next.py"
    script.write_text("print(rows)\n")
    refused_run = run_cli("run", str(script), "--restore", str(made.path), cwd=tmp_path)
    assert refused_run.returncode == 2, refused_run.stdout + refused_run.stderr
    assert checkpoint_trust.TRUST_CLI_FLAG in refused_run.stderr
    assert "[4, 5, 6]" not in refused_run.stdout
    trusted_run = run_cli(
        "run", str(script), "--restore", str(made.path), checkpoint_trust.TRUST_CLI_FLAG,
        cwd=tmp_path,
    )  # fmt: skip
    assert trusted_run.returncode == 0, trusted_run.stderr
    assert "[4, 5, 6]" in trusted_run.stdout


# -- the key ----------------------------------------------------------------------------------


@pytest.mark.docker
def test_f2_checkpoint_key_is_private_and_out_of_every_kernel(
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
) -> None:
    with docker_session(work, "k", kernel_image) as box:
        box.execute("a = 1").raise_for_error()
        made = box.checkpoint()  # signing makes the key if there was none
        key = checkpoint_trust.key_path()
        st = os.lstat(key)
        assert stat.S_ISREG(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_uid == os.geteuid()
        assert not key.resolve().is_relative_to(work.resolve())
        secret = key.read_text().strip()
        # The kernel looks for the key by name and by content: every 64-hex-digit token in any
        # file it can read whose sha256 is the key's (the key itself never enters the kernel).
        fingerprint = hashlib.sha256(secret.encode()).hexdigest()
        probe = (
            "import hashlib, os, re\n"
            f"seen = os.path.exists({str(key)!r})\n"
            "found = []\n"
            "for top in ('/work', '/run', '/tmp', '/home', '/root'):\n"
            "    for here, dirs, files in os.walk(top):\n"
            "        for name in files:\n"
            "            try:\n"
            "                with open(os.path.join(here, name), 'rb') as f:\n"
            "                    text = f.read(1 << 20)\n"
            "            except OSError:\n"
            "                continue\n"
            "            for token in re.findall(rb'[0-9a-f]{64}', text):\n"
            f"                if hashlib.sha256(token).hexdigest() == {fingerprint!r}:\n"
            "                    found.append(os.path.join(here, name))\n"
            "print(seen, found)\n"
        )
        assert box.execute(probe).raise_for_error().stdout.strip() == "False []"
    assert made.path is not None
    assert secret not in (made.path / "manifest.json").read_text()
    assert secret not in box.notebook_path.read_text()  # type: ignore[union-attr]


def test_f2_checkpoint_key_is_made_once_private_and_never_through_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "keys" / "checkpoint.key"
    monkeypatch.setenv(checkpoint_trust.KEY_ENV, str(key))
    first = checkpoint_trust.load_key()
    assert checkpoint_trust.load_key() == first  # made once
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700

    # A key readable by others is refused, not used.
    key.chmod(0o644)
    with pytest.raises(CheckpointError, match="readable by no one else"):
        checkpoint_trust.load_key()

    # A link planted where the key should be is never followed (nor written through).
    elsewhere = tmp_path / "attacker-key"
    elsewhere.write_text("00" * 32)
    elsewhere.chmod(0o600)
    linked = tmp_path / "linked" / "checkpoint.key"
    linked.parent.mkdir()
    linked.symlink_to(elsewhere)
    monkeypatch.setenv(checkpoint_trust.KEY_ENV, str(linked))
    with pytest.raises(CheckpointError, match="a link is refused"):
        checkpoint_trust.load_key()
    assert elsewhere.read_text() == "00" * 32

    # A key inside the work dir would be the kernel's: nothing is signed on disk (the
    # checkpoint is kept in memory only), and no key is made there.
    inside = tmp_path / "work" / ".key"
    monkeypatch.setenv(checkpoint_trust.KEY_ENV, str(inside))
    with local_session(tmp_path / "work", "w") as s:
        s.execute("a = 1").raise_for_error()
        assert s.checkpoint("c").path is None
        assert not (tmp_path / "work" / ".w_checkpoints" / "c").exists()
    assert not inside.exists()
    with pytest.raises(CheckpointError, match="lies inside"):
        checkpoint_trust.check_outside([tmp_path / "work"])


def test_f2_the_cli_lists_the_origin_and_verify_checks_the_mac(tmp_path: Path) -> None:
    work_dir = tmp_path / "w"
    with local_session(work_dir, "m") as s:
        s.execute("a = 1").raise_for_error()
        made = s.checkpoint("c")
    assert made.path is not None
    listed = json.loads(
        run_cli("checkpoints", "list", str(work_dir), "--json", cwd=tmp_path).stdout
    )
    assert [c["origin"] for c in listed] == [{"backend": "local"}]
    resum(made.path, lambda body: body.update(origin={"backend": "local", "image": "x"}))
    checked = run_cli("checkpoints", "verify", str(made.path), cwd=tmp_path)
    assert checked.returncode == 2
    assert "does not carry this host's MAC" in checked.stderr
    assert manifest_body(made.path)["origin"]["image"] == "x"  # untouched by the check


# -- finding 10: a REST replay of a notebook a Docker kernel rewrote -------------------------


def _attack_notebook(marker: Path) -> str:
    """Code for the Docker kernel: a notebook in its work dir that names the host's python3,
    with a cell that says where it runs and would leave ``marker`` on the host."""
    cell = (
        "import os\n"
        "print('in-container' if os.getcwd() == '/work' else 'on-host')\n"
        "try:\n"
        f"    open({str(marker)!r}, 'w').close()\n"
        "except OSError:\n"
        "    pass\n"
    )
    notebook = {
        "cells": [
            {"cell_type": "code", "execution_count": 1, "id": "c1", "metadata": {},
             "outputs": [], "source": cell}
        ],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip
    return (
        "import json\n"
        f"text = {json.dumps(notebook)!r}\n"
        "open('/work/attack.ipynb', 'w').write(text)\n"
        "nb = json.load(open('/work/box.ipynb'))\n"  # its own notebook, rewritten likewise
        "nb['metadata']['kernelspec'] = json.loads(text)['metadata']['kernelspec']\n"
        "json.dump(nb, open('/work/box.ipynb', 'w'))\n"
        "print('rewritten')\n"
    )


def printed(notebook: Path) -> str:
    """What the cells of ``notebook`` printed (stdout)."""
    cells = json.loads(notebook.read_text())["cells"]
    return "".join(
        "".join(o.get("text", ""))
        for c in cells
        for o in c.get("outputs", [])
        if o.get("name") == "stdout"
    )


@pytest.mark.docker
def test_f10_rest_replay_of_a_notebook_a_docker_kernel_rewrote_stays_in_docker(
    kernel_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    import requests

    from tests.server.server_helpers import JupyterProcess

    marker = tmp_path / "replayed-on-host"
    server_dir = tmp_path / "server"
    spec = json.loads(
        (Path(__file__).parents[2] / "kernels" / "python3-docker" / "kernel.json").read_text()
    )
    spec["metadata"]["kernel_provisioner"]["config"]["image"] = kernel_image
    kernels = server_dir / "data" / "kernels" / "python3-docker"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps(spec))
    with JupyterProcess(server_dir) as server:
        api = f"{server.url}/api/exec"

        def post(path: str, body: dict[str, Any]) -> requests.Response:
            return requests.post(f"{api}/{path}", json=body, headers=server.headers, timeout=300)

        made = post("sessions", {"name": "box", "backend": "docker", "work_dir": "box"})
        assert made.status_code == 201, made.text
        session_id = made.json()["id"]
        ran = post(f"sessions/{session_id}/execute", {"code": _attack_notebook(marker)})
        assert ran.status_code == 200, ran.text
        assert "rewritten" in json.dumps(ran.json())
        attack = server.root / "box" / "attack.ipynb"
        assert json.loads(attack.read_text())["metadata"]["kernelspec"]["name"] == "python3"

        record = server.root / "box" / "attack.replayed.ipynb"
        for notebook in ("box/attack.ipynb", "box/box.ipynb"):
            replayed = post("replay", {"notebook": notebook})
            assert replayed.status_code == 200, replayed.text
        assert printed(record) == "in-container\n"
        assert not marker.exists()

        # Not on the host while the Docker kernel still works in that folder (boundary.folders).
        chosen = post("replay", {"notebook": "box/attack.ipynb", "kernel_name": "python3"})
        assert (chosen.status_code, chosen.json()["error"]) == (400, "WorkDirShared"), chosen.text
        assert not marker.exists()

        gone = requests.delete(f"{api}/sessions/{session_id}", headers=server.headers, timeout=60)
        assert gone.status_code == 204, gone.text
        # The session is gone; the server still knows its folder was a Docker kernel's.
        again = post("replay", {"notebook": "box/attack.ipynb"})
        assert again.status_code == 200, again.text
        assert printed(record) == "in-container\n"
        assert not marker.exists()
        # The person may still choose the host, by naming the kernel in the request.
        chosen = post("replay", {"notebook": "box/attack.ipynb", "kernel_name": "python3"})
        assert chosen.status_code == 200, chosen.text
        assert printed(record) == "on-host\n"


@pytest.mark.docker
def test_f2_rest_restore_of_a_docker_checkpoint_into_a_local_session_is_refused(
    kernel_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The REST route restores by name, and has no trust switch (an agent could flip it): a
    Docker kernel's checkpoint found in a local session's folder is a 409 naming the flag."""
    import requests

    from tests.docker.conftest import make_work_dir
    from tests.server.server_helpers import JupyterProcess

    server_dir = tmp_path / "server"
    (server_dir / "root").mkdir(parents=True)
    shared = make_work_dir(server_dir / "root")  # root/work, the container user's
    box = Session(
        backend="docker", work_dir=shared, name="agent", docker={"image": kernel_image},
        timeout=DEADLINE, checkpoint_every=0, notebook=False,
    )  # type: ignore[arg-type]  # fmt: skip
    with box:
        box.execute("rows = [7, 8]").raise_for_error()
        assert box.checkpoint("boxed").origin["backend"] == "docker"
    with JupyterProcess(server_dir) as server:
        api = f"{server.url}/api/exec"
        made = requests.post(
            f"{api}/sessions", json={"name": "agent", "work_dir": "work"},
            headers=server.headers, timeout=120,
        )  # fmt: skip
        assert made.status_code == 201, made.text
        session_id = made.json()["id"]
        url = f"{api}/sessions/{session_id}"
        ran = requests.post(
            f"{url}/execute", json={"code": "rows = 'host'"}, headers=server.headers, timeout=60
        )
        assert ran.status_code == 200, ran.text
        refused = requests.post(
            f"{url}/checkpoints/boxed/restore", headers=server.headers, timeout=120
        )
        assert refused.status_code == 409, refused.text
        error = refused.json()
        assert error["error"] == "CheckpointError"
        assert "written by a Docker kernel" in error["message"]
        assert checkpoint_trust.TRUST_FLAG in error["message"]
        after = requests.post(
            f"{url}/execute", json={"code": "print(rows)"}, headers=server.headers, timeout=60
        )
        assert "host" in json.dumps(after.json())
        requests.delete(url, headers=server.headers, timeout=60)


def failed(result: Any) -> bool:
    """Whether an MCP tool result is an error (the SDK's field name changed between versions)."""
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


@pytest.mark.docker
async def test_f2_mcp_restore_of_a_docker_checkpoint_into_a_local_session_is_refused(
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """MCP's ``restore_checkpoint`` takes a path too, and has no trust switch (the model would
    hold it): a genuine Docker checkpoint is refused naming the flag, a forged one on its MAC."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from tests.checkpoint_helpers import key_env

    marker = tmp_path / "pwned-over-mcp"
    with docker_session(work, "box", kernel_image) as box:
        box.execute("rows = [1]").raise_for_error()
        genuine = box.checkpoint("boxed").path
        box.execute(forge_code("/work/forged", marker, None)).raise_for_error()
    assert genuine is not None
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "jupyter_exec.mcp", "--work-dir", str(tmp_path / "mcp")],
        env=key_env(),
    )
    async with stdio_client(params) as streams, ClientSession(*streams) as client:
        await client.initialize()
        ran = await client.call_tool("execute_code", {"code": "rows = 'host'", "session": "m"})
        assert not failed(ran)
        for path, words in (
            (genuine, checkpoint_trust.TRUST_FLAG),
            (work / "forged", "no MAC"),
        ):
            refused = await client.call_tool(
                "restore_checkpoint", {"session": "m", "checkpoint": str(path)}
            )
            text = "\n".join(c.text for c in refused.content if c.type == "text")
            assert failed(refused), text
            assert words in text
            assert "not loaded" in text
        after = await client.call_tool("execute_code", {"code": "print(rows)", "session": "m"})
        assert "host" in "\n".join(c.text for c in after.content if c.type == "text")
    assert not marker.exists()
