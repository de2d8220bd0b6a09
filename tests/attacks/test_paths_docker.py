"""Finding 1, as the attacker: a Docker kernel plants ``ln -s / esc`` in its own work dir, then a
client names a folder through it as a new kernel's working directory.

Before the fix, ``create_code_context(cwd="/home/user/esc/tmp/x")`` made the host's ``/tmp/x``,
lent it to the kernel's uid and mounted it read-write into a new container (``.../esc/etc``:
the host's ``/etc``). A REST session (or JupyterLab) started in such a folder took the same
road. Each attack here must be refused with a 4xx that says why, start no container, mount
nothing and create nothing on the host. The servers are real (``jupyter-exec e2b`` driven by
the E2B SDK, ``jupyter server`` over HTTP), and so is the Docker engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import requests

pytest.importorskip("e2b_code_interpreter")

from e2b import InvalidArgumentException, SandboxException
from e2b_code_interpreter import Sandbox

from jupyter_exec.boundary.paths import pin_dir
from jupyter_exec.docker.launch import check_mounted
from jupyter_exec.docker.reap import L_PID, LABEL
from jupyter_exec.e2b import E2BConfig
from jupyter_exec.exceptions import WorkDirError

sys.path.insert(0, str(Path(__file__).parents[1] / "e2b"))  # the E2B tests' server helpers
sys.path.insert(0, str(Path(__file__).parents[1] / "server"))  # the REST tests' server helpers
from e2b_server_helpers import API_KEY, Running, run_server
from server_helpers import JupyterProcess

from tests.conftest import docker_engine

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

TEST_IMAGE = os.environ.get("JX_TEST_IMAGE", "jupyter-exec/kernel:latest")
KERNELSPEC = Path(__file__).parents[2] / "kernels" / "python3-docker" / "kernel.json"


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    client = docker_engine()
    yield client
    client.close()


def _listed(engine: Any, owner: int | None) -> list[Any]:
    """The kernel containers started by process ``owner`` (every one when None).

    Scoped to the server under attack: the suite runs on several workers at once, and another
    worker's session starting or ending a container is not this attack's doing."""
    wanted = [f"{LABEL}=1"] + ([] if owner is None else [f"{L_PID}={owner}"])
    return list(engine.containers.list(all=True, ignore_removed=True, filters={"label": wanted}))


def _mount_sources(engine: Any, owner: int) -> set[str]:
    """Every host folder mounted into a kernel container of process ``owner`` right now."""
    return {m["Source"] for c in _listed(engine, owner) for m in c.attrs.get("Mounts", [])}


def _kernel_containers(engine: Any, owner: int | None = None) -> set[str]:
    return {c.id for c in _listed(engine, owner)}


def _host_target() -> str:
    """A host folder the attacker asks for, which must never appear."""
    return f"/tmp/jx-attack-{uuid.uuid4().hex[:12]}"


# -- E2B ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def e2b_docker(engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("e2b-attack")
    config = E2BConfig(
        root_dir=root,
        ports=(0,),
        debug=True,
        api_key=API_KEY,
        session_options={"backend": "docker"},
    )
    yield from run_server(config)


@pytest.fixture
def sandbox(e2b_docker: Running, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", e2b_docker.url)
    return Sandbox.create()


def test_f1_e2b_context_cwd_through_planted_link(
    e2b_docker: Running, sandbox: Sandbox, engine: Any
) -> None:
    planted = sandbox.run_code("import os; os.symlink('/', 'esc'); os.readlink('esc')")
    assert planted.text == "/", planted
    assert Path(e2b_docker.root, "debug_sandbox_id", "esc").is_symlink()
    target = _host_target()
    owner = os.getpid()  # the E2B server runs in this process
    containers, mounted = _kernel_containers(engine, owner), _mount_sources(engine, owner)
    assert containers  # the sandbox's own: the scope is the right one
    for cwd in (f"/home/user/esc{target}", "/home/user/esc/etc", "/home/user/esc"):
        with pytest.raises(SandboxException) as refused:
            sandbox.create_code_context(cwd=cwd)
        assert str(refused.value).startswith("400 Bad Request"), refused.value
        assert "/home/user/esc: it is a symbolic link" in str(refused.value)
        assert str(e2b_docker.root) not in str(refused.value)  # no host path to the client
    assert not os.path.lexists(target)
    assert _kernel_containers(engine, owner) == containers  # no kernel was started for it
    assert _mount_sources(engine, owner) == mounted
    assert "/etc" not in _mount_sources(engine, owner)
    # A command's working directory takes the same check.
    with pytest.raises(InvalidArgumentException, match="symbolic link"):
        sandbox.commands.run("id", cwd="/home/user/esc/etc")
    # The sandbox itself goes on, and a real folder still works as a context's cwd.
    sandbox.files.make_dir("/home/user/real")
    context = sandbox.create_code_context(cwd="/home/user/real")
    sandbox.run_code("open('mark.txt', 'w').write('x')", context=context)
    assert Path(e2b_docker.root, "debug_sandbox_id", "real", "mark.txt").read_text() == "x"


def test_f1_a_context_folder_swapped_for_a_link_gets_no_host_write(
    e2b_docker: Running, sandbox: Sandbox, tmp_path: Path
) -> None:
    """The default context's kernel swaps another context's folder for a link to a host
    folder: the host's notebook and output writes for that context never follow it."""
    victim = tmp_path / "victim"
    victim.mkdir()
    sandbox.files.make_dir("/home/user/sub")
    context = sandbox.create_code_context(cwd="/home/user/sub")
    sandbox.run_code("1", context=context)
    swapped = sandbox.run_code(
        f"import os; os.rename('sub', 'sub.old'); os.symlink({str(victim)!r}, 'sub')"
    )
    assert swapped.error is None, swapped.error
    with contextlib.suppress(SandboxException):  # its record cannot be saved: said, not done
        sandbox.run_code(
            "from IPython.display import HTML, display; display(HTML('<b>x</b>')); 2",
            context=context,
        )
    assert list(victim.iterdir()) == []


def test_f1_a_mount_swapped_after_the_check_is_caught_by_inode(engine: Any, tmp_path: Path) -> None:
    """The engine resolves a mount source itself, after our check: a kernel that swaps a
    component for a link in between gets another folder mounted. The folder pinned by
    descriptor and the one mounted are compared by (device, inode), and a mismatch removes
    the container before any code runs in it."""
    pinned_dir, swapped_in = tmp_path / "pinned", tmp_path / "elsewhere"
    pinned_dir.mkdir()
    swapped_in.mkdir()
    with pin_dir(pinned_dir) as pinned:
        identity = pinned.identity()
    as_kernel = f"{os.geteuid()}:{os.getegid()}"  # as a kernel runs here: a non-root host sees
    container = engine.containers.run(  # the mounts of its own uid's processes only
        TEST_IMAGE, ["sleep", "120"], detach=True, labels={LABEL: "1"}, network_mode="none",
        volumes={str(swapped_in): {"bind": "/work", "mode": "rw"}}, user=as_kernel,
    )  # fmt: skip
    try:
        with pytest.raises(WorkDirError, match="replaced"):
            check_mounted(engine, container.id, "/work", identity)
        assert container.id not in _kernel_containers(engine)  # removed at once
        check_mounted(engine, container.id, "/work", identity)  # gone: nothing to compare
    finally:
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)
    honest = engine.containers.run(
        TEST_IMAGE, ["sleep", "120"], detach=True, labels={LABEL: "1"}, network_mode="none",
        volumes={str(pinned_dir): {"bind": "/work", "mode": "rw"}}, user=as_kernel,
    )  # fmt: skip
    try:
        check_mounted(engine, honest.id, "/work", identity)  # the pinned folder: kept
        assert honest.id in _kernel_containers(engine)
    finally:
        honest.remove(force=True)


# -- REST (jupyter server with the extension, and JupyterLab's own route) --------------------


@pytest.fixture
def server(engine: Any, tmp_path: Path) -> Iterator[JupyterProcess]:
    spec = json.loads(KERNELSPEC.read_text())
    spec["metadata"]["kernel_provisioner"]["config"]["image"] = TEST_IMAGE
    folder = tmp_path / "jp" / "data" / "kernels" / "python3-docker"
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(spec))
    with JupyterProcess(tmp_path / "jp") as running:
        yield running


def test_f1_rest_docker_kernel_in_a_folder_reached_through_a_link(
    server: JupyterProcess, engine: Any
) -> None:
    api = f"{server.url}/api/exec"
    made = requests.post(
        f"{api}/sessions",
        json={"name": "box", "backend": "docker", "work_dir": "box"},
        headers=server.headers,
        timeout=300,
    )
    assert made.status_code == 201, made.text
    session_id = made.json()["id"]
    try:
        ran = requests.post(
            f"{api}/sessions/{session_id}/execute",
            json={"code": "import os; os.symlink('/', 'esc'); print(os.readlink('esc'))"},
            headers=server.headers,
            timeout=120,
        )
        assert ran.status_code == 200, ran.text
        assert (server.root / "box" / "esc").is_symlink()
        target = _host_target()
        owner = server.proc.pid  # its provisioner starts the containers
        containers, mounted = _kernel_containers(engine, owner), _mount_sources(engine, owner)
        assert containers  # the session's own: the scope is the right one
        for work_dir in (f"box/esc{target}", "box/esc/etc"):
            refused = requests.post(
                f"{api}/sessions",
                json={"name": "evil", "backend": "docker", "work_dir": work_dir},
                headers=server.headers,
                timeout=120,
            )
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"] == "WorkDirError"
            assert "symbolic link" in refused.json()["message"]
        replay = requests.post(
            f"{api}/replay",
            json={"notebook": "box/esc/etc/x.ipynb"},
            headers=server.headers,
            timeout=120,
        )
        assert replay.status_code == 400, replay.text
        assert "symbolic link" in replay.json()["message"]
        # JupyterLab's own route: jupyter_server's session handler, our provisioner refuses.
        lab = requests.post(
            f"{server.url}/api/sessions",
            json={"path": "box/esc/etc/x.ipynb", "type": "notebook",
                  "kernel": {"name": "python3-docker"}},
            headers=server.headers,
            timeout=120,
        )  # fmt: skip
        # jupyter_server's session handler answers every failed start with a 500 of its own;
        # the message is ours and says what to remove.
        assert lab.status_code != 201, lab.text
        assert "symbolic link" in lab.json()["message"]
        # Its kernels route passes our refusal through: a 400, the client's to fix.
        kernels = requests.post(
            f"{server.url}/api/kernels",
            json={"name": "python3-docker", "path": "box/esc/etc"},
            headers=server.headers,
            timeout=120,
        )
        assert kernels.status_code == 400, kernels.text
        assert "symbolic link" in kernels.json()["message"]
        assert not os.path.lexists(target)
        assert _kernel_containers(engine, owner) == containers
        assert _mount_sources(engine, owner) == mounted
        assert "/etc" not in _mount_sources(engine, owner)
    finally:
        requests.delete(f"{api}/sessions/{session_id}", headers=server.headers, timeout=120)
