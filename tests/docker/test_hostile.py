"""A hostile Docker kernel: links planted where the host writes next, hard stops, lending.

Every escape test runs code in a real kernel container that plants a symbolic link at the name
the host is about to write (an output file and its old temp name, a spill file, the notebook,
its spare, the files folder, the connection file, a replay's notebook and report), pointing at a
root-owned folder outside the work dir; then it drives the host to write and proves that
nothing there changed (names, contents, mode, owner) and that the host raised one of our errors.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from jupyter_exec import NotebookError, Session, StorageError
from jupyter_exec.cli.replay import _write_report
from jupyter_exec.docker.reap import L_PID, L_RUN_DIR, LABEL
from jupyter_exec.notebook.replay import replay_async

OWNER = (1000, 1000)  # conftest.OWNER: who owns the test work dirs

pytestmark = pytest.mark.docker

Snapshot = dict[str, tuple[bytes, int, int, int]]


def snapshot(folder: Path) -> Snapshot:
    """Every entry under ``folder``: content, mode, owner, group (links not followed)."""
    result: Snapshot = {}
    for path in sorted([folder, *folder.rglob("*")]):
        st = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        result[str(path.relative_to(folder))] = (data, st.st_mode, st.st_uid, st.st_gid)
    return result


class Outside:
    """A root-owned folder outside the work dir, with a root-only file: what links point at."""

    def __init__(self, base: Path) -> None:
        self.dir = base / "outside"
        self.dir.mkdir()
        self.secret = self.dir / "secret"
        self.secret.write_text("root's own\n")
        self.secret.chmod(0o600)
        self.before = snapshot(self.dir)
        self.tried = 0

    def target(self, name: str) -> str:
        """A link target: the secret itself, or a name that does not exist yet."""
        self.tried += 1
        return str(self.secret if name == "secret" else self.dir / name)

    def unchanged(self) -> bool:
        return snapshot(self.dir) == self.before


@pytest.fixture
def outside(tmp_path: Path) -> Outside:
    return Outside(tmp_path)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    os.chown(folder, *OWNER)  # the kernel runs as the owner and can write here
    return folder


@pytest.fixture
def session(kernel_image: str, work: Path) -> Iterator[Session]:
    with Session(
        backend="docker",
        work_dir=work,
        name="s",
        docker={"image": kernel_image},
        max_output_chars=2_000,
    ) as s:
        yield s


def assert_ours(error: StorageError) -> None:
    """The refusal is our error, says why, and carries the cell (recorded all the same)."""
    assert error.errno == errno.ELOOP
    assert error.execution is not None


def plant(s: Session, links: dict[str, str], then: str = "") -> Any:
    """Run a cell that plants ``links`` (name in the work dir -> target) and then runs ``then``."""
    code = (
        "import os\n"
        f"for name, target in {links!r}.items():\n"
        "    os.makedirs(os.path.dirname(name) or '.', exist_ok=True)\n"
        "    if os.path.lexists(name):\n"
        "        os.remove(name)\n"
        "    os.symlink(target, name)\n" + then
    )
    return s.execute(code)


def test_output_files_and_their_temp_names(session: Session, outside: Outside) -> None:
    with pytest.raises(StorageError, match=r"cell-001-1\.html: it is a symbolic link") as caught:
        plant(
            session,
            {
                "s_files/cell-001-1.html": outside.target("secret"),
                "s_files/.cell-001-1.html.tmp": outside.target("new-temp"),
                "s_files/cell-001-1.png": outside.target("new-png"),
            },
            "from IPython.display import HTML, display\ndisplay(HTML('<p>planted</p>'))\n",
        )
    assert_ours(caught.value)
    assert outside.unchanged()
    assert session.execute("print('still fine')").stdout == "still fine\n"


def test_spill_files(session: Session, outside: Outside) -> None:
    with pytest.raises(
        StorageError, match=r"cell-001-stdout\.txt: it is a symbolic link"
    ) as caught:
        plant(
            session,
            {"s_files/cell-001-stdout.txt": outside.target("secret")},
            "print('x' * 50_000)\n",
        )
    assert_ours(caught.value)
    assert caught.value.execution is not None
    assert caught.value.execution.stdout.startswith("x")  # head and tail kept in the notebook
    assert outside.unchanged()


def test_the_files_folder_itself(session: Session, work: Path, outside: Outside) -> None:
    with pytest.raises(StorageError, match="s_files: it is a symbolic link") as caught:
        session.execute(
            "import os, shutil\n"
            "shutil.rmtree('s_files', ignore_errors=True)\n"
            f"os.symlink({outside.target('dir')!r}.rsplit('/', 1)[0], 's_files')\n"
            "from IPython.display import HTML, display\ndisplay(HTML('<p>x</p>'))\n"
        )
    assert_ours(caught.value)
    assert outside.unchanged()


def test_the_notebook_and_its_spare(session: Session, work: Path, outside: Outside) -> None:
    with pytest.raises(NotebookError, match="symbolic link") as spare:
        plant(session, {".s.ipynb.jx-tmp": outside.target("secret")}, "x = 1\n")
    assert spare.value.execution is not None  # the cell is kept and saved later
    assert outside.unchanged()
    with pytest.raises(NotebookError, match="symbolic link") as notebook:
        plant(session, {"s.ipynb": outside.target("secret")}, "y = 2\n")
    assert notebook.value.execution is not None
    assert outside.unchanged()
    session.execute("os.remove('s.ipynb')")  # the person removes the link: all is saved again
    saved = json.loads((work / "s.ipynb").read_text())
    assert any("y = 2" in "".join(c["source"]) for c in saved["cells"])


def test_the_connection_file_on_restart(
    session: Session, docker_client: docker.DockerClient, outside: Outside
) -> None:
    tried = session.execute(
        "import os\n"
        "names = ['/run/jxc/kernel.json', '/run/jxc/.kernel.json.tmp', '/run/jx/kernel.json']\n"
        "for name in names:\n"
        "    try:\n"
        "        if os.path.lexists(name): os.remove(name)\n"
        f"        os.symlink({outside.target('secret')!r}, name); print(name, 'planted')\n"
        "    except OSError as e:\n"
        "        print(name, 'refused', e.errno)\n"
    )
    outside.tried += 2
    lines = {line.split()[0]: line.split()[1] for line in tried.stdout.splitlines()}
    assert lines == {
        "/run/jxc/kernel.json": "refused",  # the connection file's folder is read-only
        "/run/jxc/.kernel.json.tmp": "refused",
        "/run/jx/kernel.json": "planted",  # the socket folder: the host writes nothing there
    }
    session.restart()
    assert session.execute("print(1 + 1)").stdout == "2\n"
    assert outside.unchanged()


def test_replay_output_and_report(
    kernel_image: str, work: Path, outside: Outside, tmp_path: Path
) -> None:
    plant_code = (
        "import os\n"
        f"for name, target in {{'nb.replayed.ipynb': {outside.target('secret')!r},"
        f" '.nb.replayed.ipynb.jx-tmp': {outside.target('new-spare')!r},"
        f" 'report.md': {outside.target('new-report')!r}}}.items():\n"
        "    if os.path.lexists(name): os.remove(name)\n"
        "    os.symlink(target, name)\n"
    )
    nb = {
        "cells": [
            {"cell_type": "code", "execution_count": 1, "id": "a", "metadata": {},
             "outputs": [], "source": plant_code},
            {"cell_type": "code", "execution_count": 2, "id": "b", "metadata": {},
             "outputs": [], "source": "1 + 1"},
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "P", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip
    (work / "nb.ipynb").write_text(json.dumps(nb))
    again = work / "again"  # the kernel's folder, where the record goes by default
    with pytest.raises(NotebookError, match="symbolic link"):
        asyncio.run(
            replay_async(
                work / "nb.ipynb", work_dir=again, backend="docker", docker={"image": kernel_image}
            )
        )
    assert outside.unchanged()
    assert (again / "report.md").is_symlink()  # planted by the replayed cell
    report = asyncio.run(replay_async(work / "nb.ipynb", output=tmp_path / "elsewhere.ipynb"))
    with pytest.raises(StorageError, match=r"report\.md"):
        _write_report(report, again / "report.md")
    assert outside.unchanged()


# -- hard stops --------------------------------------------------------------------------

HOST_SCRIPT = """
import os, sys, time
from jupyter_exec import Session
s = Session(backend="docker", work_dir=sys.argv[1], docker={{"image": {image!r}}})
s.start()
s.execute("open('kernel-wrote.txt', 'w').write('x')").raise_for_error()
print("ready", flush=True)
time.sleep(600)
"""


def _running(client: docker.DockerClient, pid: int) -> list[Any]:
    labels = [f"{LABEL}=1", f"{L_PID}={pid}"]
    return list(client.containers.list(ignore_removed=True, all=True, filters={"label": labels}))


def _acl(path: Path) -> bytes | None:
    try:
        return os.getxattr(path, "system.posix_acl_access")
    except OSError:
        return None


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_host_leaves_no_container_and_no_loan(
    how: signal.Signals, kernel_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """SIGKILL runs no cleanup at all; an unhandled SIGTERM neither: the watchdog does it."""
    work = tmp_path / "rootwork"
    work.mkdir()  # root-owned: lent to the fallback uid while the kernel runs
    before = (work.stat().st_uid, work.stat().st_mode, _acl(work))
    host = subprocess.Popen(
        [sys.executable, "-c", HOST_SCRIPT.format(image=kernel_image), str(work)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        assert host.stdout.readline().strip() == "ready"
        running = _running(docker_client, host.pid)
        assert len(running) == 1
        run_dir = Path(running[0].labels[L_RUN_DIR])
        assert _acl(work) is not None  # lent
        host.send_signal(how)
        host.wait(timeout=30)
        killed_at = time.monotonic()

        def cleaned() -> bool:  # the watchdog removes the container, then the run dir and loan
            return (
                not _running(docker_client, host.pid)
                and not run_dir.exists()
                and (work.stat().st_uid, work.stat().st_mode, _acl(work)) == before
            )

        while not cleaned() and time.monotonic() - killed_at < 20:
            time.sleep(0.1)
        gone_after = time.monotonic() - killed_at
        print(f"{how.name}: the container was gone {gone_after:.2f} s after its host died")
        assert _running(docker_client, host.pid) == []
        assert gone_after < 10, f"the container outlived its host by {gone_after:.1f} s"
        assert not run_dir.exists()
        assert (work.stat().st_uid, work.stat().st_mode, _acl(work)) == before
        assert (work / "kernel-wrote.txt").stat().st_uid == 65532
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        if host.stdout is not None:
            host.stdout.close()
        for container in _running(docker_client, host.pid):
            container.remove(force=True)


# -- lending -----------------------------------------------------------------------------


def _owners(root: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_uid, p.lstat().st_gid, p.lstat().st_mode)
        for p in [root, *root.rglob("*")]
    }


def test_lending_a_big_root_owned_tree_changes_no_owner(kernel_image: str, tmp_path: Path) -> None:
    work = tmp_path / "tree"
    for d in range(40):
        folder = work / f"d{d:02d}"
        folder.mkdir(parents=True)
        for f in range(50):
            (folder / f"f{f:02d}.txt").write_text("data")
    before = _owners(work)
    assert len(before) == 2041
    with Session(backend="docker", work_dir=work, name="t", docker={"image": kernel_image}) as s:
        during = _owners(work)
        wrote = s.execute("open('new.txt', 'w').write(open('d00/f00.txt').read())")
        wrote.raise_for_error()
    after = _owners(work)
    changed = [k for k, v in before.items() if k != "." and after.get(k) != v]
    assert changed == []
    assert [k for k, v in before.items() if k != "." and during.get(k) != v] == []
    assert after["."] == before["."]  # the top folder's ACL is gone, its mode restored
    assert after["new.txt"][0] == 65532  # only what the kernel wrote is the kernel's
    assert _acl(work) is None


def test_a_nested_session_keeps_its_folder_while_the_outer_one_closes(
    kernel_image: str, tmp_path: Path
) -> None:
    outer_dir = tmp_path / "outer"
    inner_dir = outer_dir / "inner"
    inner_dir.mkdir(parents=True)
    docker_options = {"image": kernel_image}
    outer = Session(backend="docker", work_dir=outer_dir, name="o", docker=docker_options)
    inner = Session(backend="docker", work_dir=inner_dir, name="i", docker=docker_options)
    with inner:
        with outer:
            outer.execute("open('inner/from-outer.txt', 'w')").raise_for_error()
        assert _acl(outer_dir) is None  # the outer loan is back ...
        assert _acl(inner_dir) is not None  # ... the inner one is untouched
        inner.execute("open('still-writable.txt', 'w').write('yes')").raise_for_error()
    assert (inner_dir / "still-writable.txt").read_text() == "yes"
    assert _acl(inner_dir) is None
    assert (inner_dir.stat().st_uid, outer_dir.stat().st_uid) == (0, 0)
