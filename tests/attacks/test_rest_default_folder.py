"""The REST extension's default folder, attacked from a Docker kernel (a real ``jupyter server``
with the extension enabled by the file pip installs).

Before: every session created without a ``work_dir`` shared ``<root>/jupyter-exec``. A Docker
session created with ``{}`` wrote ``ipykernel_launcher.py`` there, and the next local session
created with ``{}`` ran it on the host, as the server's user, then served normally. Now each
such session gets a new folder of its own, a Docker session is refused any folder that is,
holds or lies inside a live local session's folder (and the reverse), and a local kernel never
imports from its working directory before its own packages.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.docker.conftest import docker_client, kernel_image  # noqa: F401  (fixtures)
from tests.server.restart_helpers import call, kernels, new_session, run
from tests.server.server_helpers import JupyterProcess, install_docker_kernelspec

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

PLANT = """
import os
marker = {marker!r}
for name in ("ipykernel_launcher.py", "pandas.py"):
    with open(name, "w") as f:
        f.write(f"open({{marker!r}}, 'w').write('ran on the host from ' + __file__)\\n")
# And straight at the local session's folder, by every way a path could name it.
tried = []
for target in ({victim!r}, "../" + {victim_name!r}, "/work/../" + {victim_name!r}):
    try:
        with open(os.path.join(target, "ipykernel_launcher.py"), "w") as f:
            f.write("x")
        tried.append(target)
    except OSError:
        pass
sorted(os.listdir("."))
"""


def folder_of(server: JupyterProcess, model: dict[str, Any]) -> Path:
    return server.root / str(model["work_dir"])


@pytest.fixture
def server(tmp_path: Path, kernel_image: str) -> Any:  # noqa: F811
    install_docker_kernelspec(tmp_path / "data", kernel_image)
    with JupyterProcess(tmp_path) as running:
        yield running


def test_a_docker_kernel_cannot_plant_code_for_the_next_local_session(
    server: JupyterProcess, tmp_path: Path
) -> None:
    marker = tmp_path / "PWNED"
    local = new_session(server)
    assert run(server, local["id"], "x = 'mine'\nx")["text"] == "'mine'"
    victim = folder_of(server, local)
    notebook = server.root / local["notebook"]["path"]
    before = notebook.read_bytes()
    listing_before = own_files(victim)

    boxed = new_session(server, backend="docker")
    assert boxed["backend"] == "docker"
    attacker = folder_of(server, boxed)
    assert attacker != victim
    assert victim not in attacker.parents
    code = PLANT.format(marker=str(marker), victim=str(victim), victim_name=victim.name)
    planted = run(server, boxed["id"], code)
    assert planted["status"] == "ok", planted
    assert (attacker / "ipykernel_launcher.py").is_file()  # the plant is real, in its own folder

    # The next local session created with {}: a new folder, nothing planted runs, it serves.
    following = new_session(server)
    assert folder_of(server, following) not in (victim, attacker)
    assert run(server, following["id"], "1 + 1")["text"] == "2"
    assert "site-packages" in run(server, following["id"], "import pandas\npandas.__file__")["text"]
    assert not marker.exists(), marker.read_text()

    # The local session's notebook and folder are as the local kernel left them.
    assert notebook.read_bytes() == before
    assert own_files(victim) == listing_before
    assert run(server, local["id"], "x")["text"] == "'mine'"


def own_files(folder: str | os.PathLike[str]) -> list[str]:
    """What is in a session's folder, but for what its own state writer and recorder make on
    their own time (the state folder, the notebook's spare): those come and go with the
    writer's flush, which the server does not wait for, whatever an attacker does."""
    return sorted(
        name
        for name in os.listdir(folder)
        if not (name.endswith("_state") or name.endswith(".jx-tmp"))
    )


@pytest.mark.parametrize("where", ["same", "inside", "around", "root"])
def test_a_docker_session_in_or_around_a_local_sessions_folder_is_refused(
    server: JupyterProcess, where: str
) -> None:
    local = new_session(server, name="host-side")
    run(server, local["id"], "y = 2")
    victim = local["work_dir"]
    notebook = server.root / local["notebook"]["path"]
    before = notebook.read_bytes()
    listing = own_files(server.root / victim)
    running = {k["id"] for k in kernels(server)}

    work_dir = {"same": victim, "inside": f"{victim}/sub", "around": "jupyter-exec", "root": ""}
    status, error = call(
        server,
        "POST",
        "sessions",
        {"backend": "docker", "name": "boxed", "work_dir": work_dir[where]},
    )
    assert (status, error["error"]) == (400, "WorkDirShared"), (error, server.tail())
    for named in ("'host-side' (local)", "'boxed' (docker)", str(server.root / victim)):
        assert named in error["message"], (named, error["message"])
    assert {k["id"] for k in kernels(server)} == running  # no kernel started
    assert notebook.read_bytes() == before
    assert own_files(server.root / victim) == listing  # not even an empty folder
    assert run(server, local["id"], "y")["text"] == "2"


def test_a_local_session_in_a_docker_sessions_folder_is_refused(server: JupyterProcess) -> None:
    boxed = new_session(server, name="boxed", backend="docker")
    running = {k["id"] for k in kernels(server)}
    status, error = call(
        server, "POST", "sessions", {"name": "host", "work_dir": boxed["work_dir"]}
    )
    assert (status, error["error"]) == (400, "WorkDirShared"), error
    assert "'boxed' (docker)" in error["message"]
    assert "'host' (local)" in error["message"]
    assert {k["id"] for k in kernels(server)} == running


def test_a_local_server_kernel_never_runs_a_launcher_planted_in_its_folder(
    server: JupyterProcess, tmp_path: Path
) -> None:
    """Files left in a folder a client names: the server's local kernel starts there and
    imports neither (the server's own way of starting kernels, not the engine's)."""
    marker = tmp_path / "PWNED"
    folder = server.root / "left"
    folder.mkdir()
    for name in ("ipykernel_launcher.py", "pandas.py"):
        (folder / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    model = new_session(server, name="later", work_dir="left")
    assert run(server, model["id"], "import pandas\npandas.__file__")["text"].count("site-packages")
    assert not marker.exists()


def test_a_folder_a_docker_session_left_is_refused_to_a_local_session(
    server: JupyterProcess, tmp_path: Path
) -> None:
    """A named folder outlives its Docker session: what the kernel left there (a launcher,
    a ``helper.py`` the next session's code imports) never meets a local kernel."""
    marker = tmp_path / "PWNED"
    boxed = new_session(server, name="boxed", backend="docker", work_dir="shared")
    payload = f"open({str(marker)!r}, 'w').write('ran')\n"
    code = f"open('helper.py', 'w').write({payload!r})"
    assert run(server, boxed["id"], code)["status"] == "ok"
    assert call(server, "DELETE", f"sessions/{boxed['id']}")[0] == 204
    running = {k["id"] for k in kernels(server)}
    status, error = call(server, "POST", "sessions", {"name": "host", "work_dir": "shared"})
    assert (status, error["error"]) == (400, "WorkDirShared"), error
    assert "'boxed' (docker)" in error["message"]
    assert {k["id"] for k in kernels(server)} == running
    assert not marker.exists()
