"""One session, one folder, one trust level: attacks through the Python API.

The attacker is code in a Docker kernel (or whoever chooses its work dir) aiming
at a local session, which runs on the host: a Docker session started in the
local session's folder, inside it or around it could plant ``ipykernel_launcher.py``
or ``pandas.py`` where the host imports from, or rewrite the local notebook. Each
is refused before its kernel starts (:class:`~jupyter_exec.exceptions.WorkDirShared`
naming both folders and both sessions), in both orders, and the local session's
notebook is untouched. A local kernel started in a folder holding a planted
``ipykernel_launcher.py`` / ``pandas.py`` never runs them, and a session's state
files are its user's alone.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from jupyter_exec import AsyncSession
from jupyter_exec.boundary.folders import claimed
from jupyter_exec.exceptions import WorkDirShared
from tests.docker.conftest import (  # noqa: F401  (fixtures, used by name)
    docker_client,
    kernel_image,
    no_container_left_behind,
    our_containers,
)
from tests.generation_helpers import flush, state_dir

pytestmark = pytest.mark.timeout(300)

DEADLINE = 120.0

PLANTED = {
    "ipykernel_launcher.py": "open({marker!r}, 'w').write('launcher ran on the host')\n",
    "pandas.py": "open({marker!r}, 'w').write('pandas.py ran on the host')\n",
}


def plant(folder: Path, marker: Path) -> None:
    """What a hostile kernel leaves for the host: files that, imported, write ``marker``."""
    for name, code in PLANTED.items():
        (folder / name).write_text(code.format(marker=str(marker)))


# Where the second session's folder lies, relative to the first's: the folder itself,
# a folder inside it, the folder around it.
RELATIONS = {
    "same": ("a", "a"),
    "inside": ("a", "a/sub"),
    "contains": ("a/sub", "a"),
}


def _session(backend: str, folder: Path, name: str, image: str) -> AsyncSession:
    options: dict[str, object] = {"work_dir": folder, "name": name, "timeout": DEADLINE}
    if backend == "docker":
        options |= {"backend": "docker", "docker": {"image": image}, "checkpoint_every": 0}
    return AsyncSession(**options)  # type: ignore[arg-type]


@pytest.mark.docker
@pytest.mark.parametrize("relation", sorted(RELATIONS))
@pytest.mark.parametrize("first", ["local", "docker"])
async def test_a_docker_and_a_local_session_never_share_a_folder(
    tmp_path: Path,
    first: str,
    relation: str,
    kernel_image: str,  # noqa: F811
    docker_client: docker.DockerClient,  # noqa: F811
) -> None:
    second = "docker" if first == "local" else "local"
    held, wanted = (tmp_path / part for part in RELATIONS[relation])
    held.mkdir(parents=True, exist_ok=True)
    wanted.mkdir(parents=True, exist_ok=True)
    holder = await _session(first, held, "holder", kernel_image).start()
    try:
        await holder.execute("x = 1")
        assert holder.notebook_path is not None
        before = holder.notebook_path.read_bytes()
        containers = len(our_containers(docker_client))
        intruder = _session(second, wanted, "intruder", kernel_image)
        with pytest.raises(WorkDirShared) as refused:
            await intruder.start()
        message = str(refused.value)
        for named in (str(held), str(wanted), "'holder'", "'intruder'", first, second):
            assert named in message, (named, message)
        # Refused before any kernel: no container, no notebook, and the holder goes on.
        assert len(our_containers(docker_client)) == containers
        assert not (wanted / "intruder.ipynb").exists()
        assert intruder.kernel_id is None
        assert holder.notebook_path.read_bytes() == before
        assert (await holder.execute("x + 1")).text == "2"
    finally:
        await holder.close()
    assert not [c for c in claimed() if c.path in (held, wanted)]


async def test_local_sessions_may_share_a_folder(tmp_path: Path) -> None:
    """Trusted code beside trusted code: two local sessions in one folder, as always."""
    async with (
        AsyncSession(work_dir=tmp_path, name="one", timeout=DEADLINE) as one,
        AsyncSession(work_dir=tmp_path, name="two", timeout=DEADLINE) as two,
    ):
        assert (await one.execute("1 + 1")).text == "2"
        assert (await two.execute("2 + 2")).text == "4"


async def test_a_planted_launcher_and_pandas_never_run_in_a_local_kernel(tmp_path: Path) -> None:
    """Files a kernel left in a folder: the next local kernel there imports neither."""
    marker = tmp_path / "PWNED"
    work = tmp_path / "work"
    work.mkdir()
    plant(work, marker)
    (work / "mymodule.py").write_text("VALUE = 42\n")
    async with AsyncSession(work_dir=work, name="victim", timeout=DEADLINE) as session:
        assert (await session.execute("1 + 1")).text == "2"  # the real kernel serves
        first = await session.execute("import os, sys\nsys.path[0] == os.getcwd(), sys.path[-1]")
        assert first.text == "(False, '')", first
        where = await session.execute("import pandas\npandas.__file__")
        assert "site-packages" in (where.text or ""), where
        # The user's own modules in the work dir still import (after site-packages).
        assert (await session.execute("import mymodule\nmymodule.VALUE")).text == "42"
        # The kernel's subprocesses get the environment they always had.
        child = await session.execute(
            "import subprocess\n"
            "subprocess.run([sys.executable, '-c', 'import sys; print(sys.flags.safe_path)'],"
            " capture_output=True, text=True).stdout.strip()"
        )
        assert child.text == "'False'", child
        await session.restart()
        assert (await session.execute("import pandas\npandas.__file__")).text == where.text
    assert not marker.exists(), marker.read_text()


def test_the_launch_alone_never_imports_from_the_working_directory(tmp_path: Path) -> None:
    """The same rule for a bare ``python -m ipykernel_launcher`` under the environment
    local kernels get: the planted launcher is not what runs."""
    from jupyter_exec.engine.safepath import safe_python

    marker = tmp_path / "PWNED"
    plant(tmp_path, marker)
    env = dict(os.environ)
    assert safe_python(env) == []
    assert env["PYTHONSAFEPATH"] == "1"
    done = subprocess.run(
        [sys.executable, "-m", "ipykernel_launcher", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


async def test_a_sessions_state_is_its_users_alone(tmp_path: Path) -> None:
    async with AsyncSession(work_dir=tmp_path, name="own", timeout=DEADLINE) as session:
        await session.execute("secret = 'the pickles of my variables'")
        await session.execute("other = 2")
        assert await flush(session)
        folder = state_dir(session)
        modes = {
            path.relative_to(folder).as_posix(): stat.S_IMODE(path.lstat().st_mode)
            for path in [folder, *folder.rglob("*")]
        }
    assert modes["."] == 0o700, modes
    folders = {p: m for p, m in modes.items() if (folder / p).is_dir()}
    files = {p: m for p, m in modes.items() if not (folder / p).is_dir()}
    assert any(p.startswith("objects/") for p in files), modes
    assert set(folders.values()) == {0o700}, folders
    assert set(files.values()) == {0o600}, files


@pytest.mark.docker
async def test_a_name_a_docker_session_had_is_never_a_local_sessions_folder(
    tmp_path: Path,
    kernel_image: str,  # noqa: F811
) -> None:
    """The session manager (and so the MCP server) names folders ``<root>/<name>``: a
    Docker session plants code in ``box``, closes, and ``box`` is asked for again as local."""
    from jupyter_exec import AsyncSessionManager

    marker = tmp_path / "PWNED"
    root = tmp_path / "root"
    async with AsyncSessionManager(root_dir=str(root)) as manager:
        boxed = await manager.session(
            "box", backend="docker", docker={"image": kernel_image}, timeout=DEADLINE
        )
        payload = f"open({str(marker)!r}, 'w').write('ran')\n"
        planted = await boxed.execute(
            "for name in ('ipykernel_launcher.py', 'pandas.py', 'helper.py'):\n"
            f"    open(name, 'w').write({payload!r})\n"
        )
        assert planted.error is None, planted.error
        await manager.close_session("box")
        with pytest.raises(WorkDirShared) as refused:
            await manager.session("box", timeout=DEADLINE)
        assert "'box' (docker)" in str(refused.value)
        assert "'box' (local)" in str(refused.value)
        # Another name is a new folder, and serves.
        fresh = await manager.session("fresh", timeout=DEADLINE)
        assert (await fresh.execute("1 + 1")).text == "2"
    assert not marker.exists()
