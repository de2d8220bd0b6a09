"""Attacks on the files a remote kernel sends home: the kernel is the attacker.

A remote kernel's cells run code someone else wrote, on a machine we do not control. After
each cell the session asks the kernel which files changed and reads them through it
(jupyter_exec/engine/remote_files.py). Code in the kernel can replace the in-kernel half
(``sys.modules['_jupyter_exec_remote']``) and answer anything: names that climb out of the work
dir, absolute paths, the session's own notebook and outputs folder, hidden files, a name
through a link planted in the work dir, sizes that lie, data that is not base64. None of it
may write outside the work dir, replace the notebook or the saved outputs, or stop the session.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from jupyter_exec import AsyncSession
from tests.remote_servers import Server, run_server

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with run_server("jupyter_server", tmp_path_factory.mktemp("srv")) as running:
        yield running


@pytest.fixture
async def remote(server: Server, tmp_path: Path) -> AsyncIterator[AsyncSession]:
    session = AsyncSession(
        work_dir=tmp_path / "work",
        name="victim",
        backend="remote",
        url=server.url,
        token=server.token,
    )
    async with session:
        yield session


def _forge(listing: list[list[object]], data: str = "cGxhbnRlZA==") -> str:
    """Cell code that makes the in-kernel half report ``listing`` once (with this very
    cell's reply: the listing is asked after the cell ran) and answer ``data`` to reads."""
    return (
        "import sys\n"
        "_m = sys.modules['_jupyter_exec_remote']\n"
        f"_once = [{json.dumps(json.dumps(listing))}]\n"
        "_m.changes = lambda: _once.pop() if _once else ''\n"
        f"_m.read = lambda name, offset, size: {data!r} if offset == 0 else ''\n"
    )


async def test_remote_kernel_forged_names_never_leave_the_work_dir(
    remote: AsyncSession, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (remote.work_dir / "link").symlink_to(outside)
    notebook = remote.notebook_path
    assert notebook is not None
    before = notebook.read_bytes()
    names = [
        "../escaped.txt",
        "../../escaped.txt",
        str(outside / "absolute.txt"),
        "link/through-link.txt",
        "victim.ipynb",
        "victim_files/cell-001-1.png",
        ".bashrc",
        "sub/.hidden",
        "a\\b.txt",
        "nul\x00byte",
        "",
    ]
    forged = await remote.execute(_forge([[n, 7] for n in names]))
    assert forged.ok, forged.error
    assert forged.files == ()
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "escaped.txt").exists()
    assert not (remote.work_dir.parent / "escaped.txt").exists()
    assert notebook.read_bytes() != before  # it recorded the cells, and only that
    cells = json.loads(notebook.read_text())["cells"]
    left = cells[-1]["metadata"]["jupyter_exec"]["remote_files_left"]
    assert {entry["name"] for entry in left} >= {"../escaped.txt", "victim.ipynb", ".bashrc"}
    assert all(entry["reason"] for entry in left)
    assert not (remote.work_dir / "victim_files" / "cell-001-1.png").exists()
    assert (await remote.execute("2 + 2")).text == "4"  # the session goes on


async def test_remote_kernel_lying_about_sizes_and_data_gets_nothing_written(
    remote: AsyncSession,
) -> None:
    # says 3 bytes, sends 8; says 1 byte of data that is not base64; says a size over the limit
    os.environ["JUPYTER_EXEC_MAX_READ_MB"] = "1"
    try:
        more = await remote.execute(_forge([["more.txt", 3]]))
        notb64 = await remote.execute(_forge([["notb64.txt", 1]], data="%%%"))
        huge = await remote.execute(_forge([["huge.bin", 2 << 20]]))
    finally:
        del os.environ["JUPYTER_EXEC_MAX_READ_MB"]
    assert (more.files, notb64.files, huge.files) == ((), (), ())
    for name in ("more.txt", "notb64.txt", "huge.bin"):
        assert not (remote.work_dir / name).exists()
    assert (await remote.execute("'alive'")).text == "'alive'"


async def test_remote_kernel_flooding_the_listing_is_bounded(remote: AsyncSession) -> None:
    flood = [[f"f{i}.txt", 8] for i in range(3000)]
    flooded = await remote.execute(_forge(flood))
    assert len(flooded.files) == 1000  # the first thousand come home, the rest are named
    assert all(p.parent == remote.work_dir.absolute() for p in flooded.files)
    assert (await remote.execute("1")).files == ()
