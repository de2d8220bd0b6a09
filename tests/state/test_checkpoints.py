"""Durable checkpoints on real local kernels: written by the kernel, checked by the host,
restored into new sessions, refused when damaged or from another environment, and what
comes back after ``kill -9``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec import (
    AsyncSession,
    Checkpoint,
    CheckpointError,
    InvalidArgument,
    KernelNotAliveError,
)
from jupyter_exec.inkernel.state import changed_in_place
from tests.checkpoint_helpers import resign, signed_manifest
from tests.conftest import read_valid_notebook

DEADLINE = 60.0

STATE = """
import numpy as np, pandas as pd, socket, threading
arr = np.arange(100_000, dtype=np.float64)
frame = pd.DataFrame({"a": np.arange(1000), "b": ["x"] * 1000})
plain = {"rows": [1, 2, 3], "name": "plain", "nested": (1.5, None)}
def square(v):
    return v * v
gen = (i for i in range(3))
lock = threading.Lock()
sock = socket.socket()
import types
dyn = types.ModuleType("dyn")
"""


async def value(session: AsyncSession, expression: str) -> Any:
    execution = await session.execute(f"import json as _j; print(_j.dumps({expression}))")
    assert execution.ok, execution.error
    return json.loads(execution.stdout)


def kernel_pid(session: AsyncSession) -> int:
    kernel = session._kernel
    assert kernel is not None
    return int(kernel.km.provisioner.process.pid)  # type: ignore[union-attr]


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    made: list[AsyncSession] = []

    async def start(name: str, work: str = "work", **kwargs: Any) -> AsyncSession:
        kwargs.setdefault("timeout", DEADLINE)
        kwargs.setdefault("checkpoint_every", 0)
        session = await AsyncSession(work_dir=tmp_path / work, name=name, **kwargs).start()
        made.append(session)
        return session

    yield start
    for session in made:
        await session.close()


async def test_a_checkpoint_on_disk_restores_into_a_new_session(
    sessions: Any, tmp_path: Path
) -> None:
    first = await sessions("first")
    assert (await first.execute(STATE)).ok
    made = await first.checkpoint("loaded")
    assert made.path == tmp_path / "work" / ".first_checkpoints" / "loaded"
    assert {"arr", "frame", "plain", "square", "np", "pd"} <= set(made.names)
    assert set(made.skipped) == {"dyn", "gen", "lock", "sock"}
    assert "made at run time" in made.skipped["dyn"]
    assert "generator" in made.skipped["gen"]
    assert "lock" in made.skipped["lock"]
    assert "socket" in made.skipped["sock"]
    assert made.environment["libraries"]["numpy"] == np_version()
    manifest = json.loads((made.path / "manifest.json").read_text())
    assert manifest["body"]["skipped"][0]["name"] == "dyn"
    for entry in manifest["body"]["variables"]:
        if entry["kind"] == "pickle":
            data = (made.path / entry["file"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    assert not [p for p in made.path.parent.iterdir() if p.name.startswith(".")]  # no temp left
    history = read_valid_notebook(first.notebook_path).metadata["jupyter_exec"]["state"]  # type: ignore[arg-type]
    assert history[-1]["skipped"].keys() == {"dyn", "gen", "lock", "sock"}
    # The checkpoint folder is the kernel's own writing, not a file the cell made.
    assert (await first.execute("1")).files == ()
    await first.close()

    loaded = Checkpoint.load(made.path)
    assert (loaded.name, loaded.session, loaded.names) == ("loaded", "first", made.names)
    second = await sessions("second", work="elsewhere")
    await second.execute("leftover = 1")
    await second.restore(made.path)
    assert await value(
        second,
        "[float(arr.sum()), int(frame.a.sum()), frame.b.iloc[3], plain, square(7), "
        "'leftover' in dir(), 'gen' in dir() or 'dyn' in dir()]",
    ) == [float(sum(range(100_000))), 499500, "x", plain_value(), 49, False, False]
    # A copy in the new session's own folder, so that a container kernel could read it too.
    copied = tmp_path / "elsewhere" / ".second_checkpoints" / "loaded" / "manifest.json"
    assert copied.read_bytes() == (made.path / "manifest.json").read_bytes()
    nb = read_valid_notebook(second.notebook_path)  # type: ignore[arg-type]
    entry = nb.metadata["jupyter_exec"]["state"][-1]
    assert (entry["action"], entry["session"], entry["name"]) == ("restore", "first", "loaded")
    assert nb.cells[0].metadata["jupyter_exec"]["undone"] is True


def np_version() -> str:
    import numpy

    return str(numpy.__version__)


def plain_value() -> dict[str, Any]:
    return {"rows": [1, 2, 3], "name": "plain", "nested": [1.5, None]}


async def test_checkpoints_of_an_earlier_run_are_listed_and_restored_by_name(
    sessions: Any,
) -> None:
    before = await sessions("s")
    await before.execute("kept = list(range(5))")
    made = await before.checkpoint("mark")
    await before.close()

    again = await sessions("s", overwrite=True)
    listed = again.checkpoints()
    assert [(c.name, c.path, c.names) for c in listed] == [("mark", made.path, ("kept",))]
    await again.execute("kept = 'changed'")
    with pytest.raises(InvalidArgument, match="exists"):
        await again.checkpoint("mark")
    await again.restore("mark")
    assert await value(again, "kept") == [0, 1, 2, 3, 4]
    with pytest.raises(InvalidArgument, match=r"no checkpoint 'nope'.*mark"):
        await again.restore("nope")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncated manifest", "truncated"),
        ("altered manifest", "own checksum"),
        ("missing file", "partial"),
        ("flipped byte", "damaged"),
        ("truncated file", "damaged"),
        ("no manifest", "never finished"),
    ],
)
async def test_a_damaged_checkpoint_is_refused_and_nothing_is_loaded(
    sessions: Any, tmp_path: Path, damage: str, message: str
) -> None:
    session = await sessions("d")
    await session.execute("import numpy as np\nbig = np.ones(50_000)\nsmall = [1, 2]")
    made = await session.checkpoint("c")
    assert made.path is not None
    broken = tmp_path / "broken"
    shutil.copytree(made.path, broken)
    manifest = broken / "manifest.json"
    files = sorted(broken.glob("*.pkl"), key=lambda p: p.stat().st_size)
    if damage == "truncated manifest":
        manifest.write_bytes(manifest.read_bytes()[:-40])
    elif damage == "altered manifest":
        manifest.write_text(manifest.read_text().replace('"small"', '"other"'))
    elif damage == "missing file":
        files[0].unlink()
    elif damage == "flipped byte":
        data = bytearray(files[-1].read_bytes())
        data[len(data) // 2] ^= 0xFF
        files[-1].write_bytes(bytes(data))
    elif damage == "truncated file":
        files[-1].write_bytes(files[-1].read_bytes()[:100])
    else:
        manifest.unlink()
    with pytest.raises(CheckpointError, match=message):
        Checkpoint.load(broken)
    await session.execute("small = 'after'\nbig = None\nmarker = 1")
    with pytest.raises(CheckpointError, match=message):
        await session.restore(broken)
    assert await value(session, "[small, big, marker]") == ["after", None, 1]  # untouched


async def test_a_checkpoint_from_another_environment_is_refused_naming_the_mismatch(
    sessions: Any, tmp_path: Path
) -> None:
    session = await sessions("e")
    await session.execute("import numpy as np\narr = np.arange(3)")
    made = await session.checkpoint("c")
    assert made.path is not None
    moved = tmp_path / "other-machine" / "c"
    shutil.copytree(made.path, moved)

    def older(body: dict[str, Any]) -> None:
        body["environment"]["libraries"]["numpy"] = "1.26.4"
        body["environment"]["python"] = "3.9.18"

    resign(moved, older)
    await session.execute("arr = 'now'")
    with pytest.raises(CheckpointError) as refused:
        await session.restore(moved)
    assert f"numpy 1.26.4 in the checkpoint, {np_version()} in this kernel" in str(refused.value)
    assert "Python 3.9.18 in the checkpoint" in str(refused.value)
    assert len(refused.value.mismatches) == 2
    assert await value(session, "arr") == "now"
    await session.restore(moved, force=True)  # the documented opt-out
    assert await value(session, "arr.tolist()") == [0, 1, 2]

    def missing(body: dict[str, Any]) -> None:
        body["environment"]["libraries"]["no_such_library_here"] = "1.0"

    resign(moved, missing)
    with pytest.raises(CheckpointError, match=r"no_such_library_here 1\.0 in the checkpoint, not"):
        await session.restore(moved)


async def test_kill_9_brings_back_the_latest_checkpoint_and_names_what_was_lost(
    sessions: Any,
) -> None:
    # save_state=False: this holds the recovery from an automatic checkpoint alone.
    session = await sessions("k", checkpoint_every=0.001, save_state=False)
    await session.execute("import threading\nrows = [1, 2]\nlock = threading.Lock()")
    await session.execute("total = sum(rows)")
    [auto] = [c for c in session.checkpoints() if c.automatic]
    assert auto.name == "auto-2"
    assert auto.path is not None
    assert not (auto.path.parent / "auto-1").exists()  # the older one is removed
    session._state.durable.every = 0  # no more automatic ones: the next cells come after it
    await session.execute("rows.append(3)")
    await session.execute("fresh = 'new'")
    await kill_kernel(session)

    died = await session.execute("fresh")
    assert died.status == "died"
    recovered = died.recovered
    assert recovered is not None
    assert recovered.source == "checkpoint 'auto-2'"
    assert recovered.names == ("threading", "total")  # as they were when it died
    assert set(recovered.lost) == {"fresh", "lock", "rows"}
    assert recovered.lost["fresh"] == "changed after it was taken"
    assert recovered.lost["rows"] == "changed after it was taken"
    assert "cannot pickle" in recovered.lost["lock"]
    assert died.error is not None
    assert "came back from checkpoint 'auto-2'" in died.error.evalue
    assert "lost: fresh (changed after it was taken)" in died.error.evalue

    after = await session.execute("print(rows, total)")
    assert after.stdout == "[1, 2] 3\n"
    assert after.recovered == recovered  # the next one says it too
    assert (await session.execute("1")).recovered is None

    nb = read_valid_notebook(session.notebook_path)  # type: ignore[arg-type]
    ours = nb.cells[4].metadata["jupyter_exec"]
    assert ours["undone"] is True
    assert ours["recovered"]["lost"]["fresh"] == "changed after it was taken"
    assert ours["recovered"]["names"] == ["threading", "total"]
    assert "lost: fresh, lock, rows" in nb.cells[5].metadata["jupyter_exec"]["kernel"]
    assert nb.metadata["jupyter_exec"]["state"][-1]["action"] == "recover"


async def kill_kernel(session: AsyncSession) -> None:
    """``kill -9`` the session's kernel process and wait until it is gone."""
    pid = kernel_pid(session)
    os.kill(pid, signal.SIGKILL)
    await wait_gone(pid)


async def wait_gone(pid: int) -> None:
    end = time.monotonic() + DEADLINE
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
            return
        assert time.monotonic() < end, "the kernel did not die"
        await asyncio.sleep(0.02)


async def test_with_undo_snapshots_the_lost_names_are_those_changed_after_it(
    sessions: Any,
) -> None:
    session = await sessions("u", undo_steps=1, save_state=False)  # the snapshot alone
    await session.execute("data = {'k': 1}\nother = 5")
    await session.execute("data['k'] = 2")
    await kill_kernel(session)
    died = await session.execute("data")
    assert died.recovered is not None
    assert died.recovered.source == "snapshot"
    assert died.recovered.lost == {"data": "changed after it was taken"}
    assert died.recovered.names == ("other",)
    assert await value(session, "data") == {"k": 1}


async def test_automatic_checkpoints_stop_past_their_size_budget(
    sessions: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("jupyter_exec.state.durable.AUTO_MAX_BYTES", 200_000)
    session = await sessions("big", checkpoint_every=0.001)
    await session.execute("small = list(range(100))")
    assert [c.name for c in session.checkpoints()] == ["auto-1"]
    session._state.durable.last_auto = 0.0
    await session.execute("import numpy as np\nlarge = np.zeros(1_000_000)")
    assert [c.name for c in session.checkpoints()] == ["auto-1"]  # 8 MB: none taken
    assert session._state.durable.auto_paused_until > 0  # and none tried for a while
    explicit = await session.checkpoint("anyway")  # an explicit one has no budget
    assert explicit.size > 8_000_000


async def test_links_planted_by_the_kernel_are_never_followed(
    sessions: Any, tmp_path: Path
) -> None:
    session = await sessions("l")
    await session.execute("secret_like = 'kernel data'")
    made = await session.checkpoint("c")
    assert made.path is not None
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    folder = made.path.relative_to(tmp_path / "work")
    # The kernel swaps its files for links: a variable's file, the manifest, the folder.
    plant = (
        f"import os\n"
        f"p = {str(folder)!r}\n"
        f"f = [n for n in os.listdir(p) if n.endswith('.pkl')][0]\n"
        f"os.replace(p + '/' + f, p + '/moved')\n"
        f"os.symlink({str(outside)!r}, p + '/' + f)\n"
        f"os.symlink({str(tmp_path)!r}, '.l_checkpoints/evil')\n"
    )
    assert (await session.execute(plant)).ok
    with pytest.raises(CheckpointError, match="symbolic link"):
        await session.restore(made.path)  # from disk (restore("c") would use its snapshot)
    os.replace(made.path / "manifest.json", made.path / "real-manifest")
    os.symlink(made.path / "real-manifest", made.path / "manifest.json")
    with pytest.raises(CheckpointError, match="symbolic link"):
        Checkpoint.load(made.path)
    with pytest.raises(CheckpointError, match="symbolic link"):
        Checkpoint.load(tmp_path / "work" / ".l_checkpoints" / "evil")
    assert [c.name for c in session.checkpoints()] == ["c"]  # the in-memory one only
    assert outside.read_text() == "host file"


def test_changed_in_place_sees_item_attribute_and_method_changes() -> None:
    code = (
        "a[0] = 1\nb.x = 2\nc += [3]\ndel d[1]\ne.append(4)\nf.sort()\n"
        "g.drop(columns=['x'], inplace=True)\nh.head()\nk = 5\nprint(m)\n"
    )
    assert changed_in_place(code) == {"a", "b", "c", "d", "e", "f", "g"}


async def test_after_a_restore_a_death_comes_back_from_the_restored_timeline(
    sessions: Any,
) -> None:
    session = await sessions("t", save_state=False)  # the checkpoints alone
    await session.execute("x = 1")
    first = await session.checkpoint("first")
    await session.execute("x = 2")
    await session.checkpoint("second")  # newer, but of the timeline the restore leaves
    await session.restore(first)
    await session.execute("y = x + 10")
    await kill_kernel(session)
    died = await session.execute("y")
    assert died.recovered is not None
    assert died.recovered.source == "checkpoint 'first'"
    assert died.recovered.lost == {"y": "changed after it was taken"}
    assert await value(session, "x") == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"format": "jupyter-exec-checkpoint", "version": 99}, "version 99"),
        ("[" * 100_000 + "]" * 100_000, "truncated or not"),
        (
            {
                "format": "jupyter-exec-checkpoint",
                "version": 1,
                "environment": {"libraries": {}},
                "variables": [
                    {"name": "x", "kind": "pickle", "file": "../../etc/passwd", "size": 1,
                     "sha256": "0", "parts": [1]}
                ],
                "skipped": [],
            },
            "entry 'x'",
        ),
    ],
)  # fmt: skip
def test_hostile_manifests_are_refused_without_a_kernel(
    tmp_path: Path, body: Any, message: str
) -> None:
    folder = tmp_path / "cp"
    folder.mkdir()
    if isinstance(body, str):
        text = '{"sha256": "x", "body": ' + body + "}"
    else:  # signed by this host: the checks past the MAC hold on their own
        text = signed_manifest(body)
    (folder / "manifest.json").write_text(text)
    with pytest.raises(CheckpointError, match=message):
        Checkpoint.load(folder)


async def test_names_a_failing_cell_bound_before_its_error_count_as_changed(
    sessions: Any,
) -> None:
    session = await sessions("e")
    await session.execute("x = 1")
    await session.checkpoint("c")
    failed = await session.execute("y = 2\nx = 3\n1 / 0")
    assert failed.status == "error"
    await kill_kernel(session)
    died = await session.execute("x")
    assert died.recovered is not None
    assert set(died.recovered.lost) == {"x", "y"}
    assert await value(session, "x") == 1


async def test_a_kernel_killed_while_writing_leaves_no_checkpoint_behind(
    sessions: Any, tmp_path: Path
) -> None:
    session = await sessions("half")
    await session.execute("import numpy as np\nkept = np.arange(1000)")
    await session.checkpoint("before")
    # The kernel dies after the variables' files, before the manifest (as a crash would).
    await session.execute(
        "import os, sys\nsys.modules['_jupyter_exec_state']._write_manifest = "
        "lambda *a: os._exit(9)"
    )
    with pytest.raises(KernelNotAliveError):
        await session.checkpoint("half")
    folder = tmp_path / "work" / ".half_checkpoints"
    partial = [p for p in folder.iterdir() if p.name.endswith(".partial")]
    assert len(partial) == 1
    assert list(partial[0].glob("*.pkl"))  # written, but never named
    assert [c.name for c in session.checkpoints()] == ["before"]
    with pytest.raises(InvalidArgument, match="no checkpoint 'half'"):
        await session.restore("half")
    await session.restart()
    await session.execute("other = 1")
    await session.checkpoint("after")  # a new write sweeps what the dead one left
    assert sorted(p.name for p in folder.iterdir()) == ["after", "before"]
    await session.restore("before")
    assert await value(session, "kept.tolist()[-1]") == 999
