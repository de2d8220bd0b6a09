"""Issue 30, finding 3, as the attacker: on a non-root host a Docker kernel runs as the host's
own uid, so a link it plants in its work dir looks like one the person made.

Before the fix the resolver followed a link owned by this process's uid in a folder only that
uid can write (``trust_own``): the default context of an E2B sandbox swapped another context's
folder for a link, and the host wrote that context's notebook and state signatures outside the
sandbox; the same with two Docker sessions, the second's work dir inside the first's. Each case
runs the host (server, sessions, SDK) as uid 4242 in a process of its own
(``lent_scenario.py``; the test spawns it as that user when it runs as root, or runs it as
itself when CI runs ``tests/attacks`` as a non-root user), and asserts that the host refused
and that the folder outside stays empty. The kernels, the Docker engine and the SDK are real.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec.boundary import paths
from jupyter_exec.boundary.paths import Folder, is_lent, lend_folder, pin_dir, write_bytes
from jupyter_exec.boundary.trust import KEY_ENV
from jupyter_exec.exceptions import StorageError
from tests.attacks.nonroot import blocking_folders, let_enter
from tests.conftest import docker_engine

pytest.importorskip("e2b_code_interpreter")

pytestmark = pytest.mark.timeout(600)

ATTACKER_UID = 4242  # the developer-laptop user; the CI's non-root run uses the same uid
SCENARIO = Path(__file__).with_name("lent_scenario.py")
REPO = Path(__file__).parents[2]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
SOCKET = Path("/var/run/docker.sock")


@pytest.fixture(scope="module")
def engine() -> None:
    docker_engine().close()


@pytest.fixture
def as_attacker(engine: None, tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A private base folder and the ``subprocess.run`` keywords that run as a non-root uid."""
    if os.geteuid() != 0:  # already the non-root user (the CI's second run)
        yield tmp_path, {"env": os.environ.copy()}
        return
    if not SOCKET.exists():
        pytest.skip("no local Docker socket to hand to the non-root user")
    for folder in blocking_folders(ATTACKER_UID):
        try:
            let_enter(folder, ATTACKER_UID)  # kept: the CI's non-root run needs it too
        except OSError as exc:
            if IN_CI:
                raise
            pytest.skip(f"uid {ATTACKER_UID} cannot reach {folder} (no ACLs here: {exc})")
    base = Path(tempfile.mkdtemp(prefix="jx-lent-"))  # tmp_path's parents are root's, 0700
    os.chown(base, ATTACKER_UID, ATTACKER_UID)
    env = {**os.environ, "HOME": str(base / "home"), "TMPDIR": str(base / "tmp"),
           KEY_ENV: str(base / "home" / "checkpoint.key")}  # fmt: skip  # root's is 0600
    env.pop("XDG_RUNTIME_DIR", None)  # root's: not this user's
    for sub in ("home", "tmp"):
        (base / sub).mkdir(mode=0o700)
        os.chown(base / sub, ATTACKER_UID, ATTACKER_UID)
    keywords = {
        "env": env,
        "user": ATTACKER_UID,
        "group": ATTACKER_UID,
        "extra_groups": [SOCKET.stat().st_gid],  # the docker group: the developer's laptop
    }
    try:
        yield base, keywords
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run(case: str, base: Path, keywords: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Run ``case`` of the scenario; its JSON answer and its log (the host's warnings)."""
    done = subprocess.run(
        [sys.executable, str(SCENARIO), case, str(base)],
        cwd=REPO, capture_output=True, text=True, timeout=500, check=False, **keywords,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    # The non-root case, or nothing here is attacked: the host and its kernel share one uid.
    assert found["host_uid"] != 0
    assert found["kernel_uid"] == str(found["host_uid"]), found
    assert found["swap_error"] is None, found  # the kernel did swap the folder for a link
    return found, done.stderr


@pytest.mark.docker
def test_f3_e2b_context_folder_swapped_for_a_link_as_non_root(
    as_attacker: tuple[Path, dict[str, Any]],
) -> None:
    """The default context swaps ``/home/user/ctx`` for a link; the ctx context runs a cell."""
    base, keywords = as_attacker
    found, log = _run("e2b", base, keywords)
    assert found["before"] == "1"
    # Refused: the context's state signature and its files are never written through the link.
    assert "/ctx: it is a symbolic link" in log, log[-4000:]
    assert "symbolic link" in found["files_write"], found
    assert found["outside"] == [], found  # no notebook, no state, no planted file outside
    assert sorted(os.listdir(base / "outside")) == []


@pytest.mark.docker
def test_f3_nested_docker_session_folder_swapped_for_a_link_as_non_root(
    as_attacker: tuple[Path, dict[str, Any]],
) -> None:
    """The first Docker session swaps the second's work dir (inside its own) for a link."""
    base, keywords = as_attacker
    found, _log = _run("nested", base, keywords)
    assert found["before"] == "1"
    assert "first/second: it is a symbolic link" in found["refused"], found
    assert found["outside"] == [], found
    assert sorted(os.listdir(base / "outside")) == []
    # The second session's real folder kept its first cell and nothing else moved.
    assert (base / "first" / "second.real" / "second.ipynb").is_file()


@pytest.fixture
def lent_here(tmp_path: Path) -> Iterator[Path]:
    """A folder lent to a kernel in this process (taken off the list after: inodes are reused)."""
    lent = tmp_path / "lent"
    lent.mkdir(mode=0o755)
    with Folder.open(lent) as opened:
        lend_folder(opened)
        identity = opened.identity()
    try:
        yield lent
    finally:
        paths._LENT.discard(identity)


def test_f3_no_link_below_a_lent_folder_is_followed_whoever_owns_it(
    lent_here: Path, tmp_path: Path
) -> None:
    """A link in a lent folder, ours (root's when run as root) in a folder only we write: the
    owner rule alone would follow it; the loan does not, at any depth below the folder."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (lent_here / "deep").mkdir(mode=0o755)
    for planted in (lent_here / "ctx", lent_here / "deep" / "ctx"):
        planted.symlink_to(victim)
        assert os.lstat(planted).st_uid == os.geteuid()
        with pytest.raises(StorageError, match="symbolic link") as refused:
            write_bytes(planted, "s.ipynb", b"{}")
        assert refused.value.errno == errno.ELOOP
        with pytest.raises(StorageError, match="symbolic link"):
            pin_dir(planted / "inner", trust_own=True)
    assert list(victim.iterdir()) == []
    # The person's own link above the lent folder still leads to it (~/project -> /data/project).
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    (mine / "project").symlink_to(lent_here)
    write_bytes(mine / "project", "s.ipynb", b"{}")
    assert (lent_here / "s.ipynb").read_bytes() == b"{}"
    with pin_dir(mine / "project", trust_own=True) as pinned:
        assert is_lent(pinned.identity())
