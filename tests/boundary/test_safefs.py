"""Host writes inside kernel-writable folders: links are never followed, failures are ours.

Here a "kernel" is simulated by planting links and files directly; tests/docker/test_hostile.py
plants them from inside a real Docker kernel.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import resource
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_exec import NotebookError, StorageError, WorkDirError
from jupyter_exec.boundary.paths import Folder, write_bytes
from jupyter_exec.engine.recorder import NotebookRecorder
from jupyter_exec.engine.store import FileSpill, OutputStore
from jupyter_exec.server.recorder import MergingRecorder

META = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}


def code_cell(n: int, text: str = "") -> dict[str, object]:
    return {
        "cell_type": "code",
        "id": f"c{n}",
        "execution_count": n,
        "metadata": {},
        "outputs": [{"output_type": "stream", "name": "stdout", "text": text or f"{n}\n"}],
        "source": f"print({n})",
    }


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the work dir with a file a link will point at."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret").write_text("untouched")
    (folder / "secret").chmod(0o600)
    return folder


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int, int]]:
    """Content, mode, owner and group of everything in ``folder`` (the proof of no escape)."""
    result = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        result[str(path.relative_to(folder))] = (data, st.st_mode, st.st_uid, st.st_gid)
    return result


# -- Folder ------------------------------------------------------------------------------


def test_a_link_on_the_way_is_refused_and_names_the_path(work: Path, outside: Path) -> None:
    (work / "a").mkdir()
    (work / "a" / "b").symlink_to(outside)
    with pytest.raises(StorageError, match=r"a/b: it is a symbolic link") as caught:
        Folder.open(work, "a/b/c", create=True)
    assert caught.value.errno == errno.ELOOP
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


def test_a_link_inside_the_work_dir_is_refused_too(work: Path) -> None:
    """No exception for links that stay inside: the kernel can re-aim them at any moment."""
    (work / "real").mkdir()
    (work / "alias").symlink_to(work / "real")
    with pytest.raises(StorageError, match="symbolic link"):
        Folder.open(work, "alias")


def test_the_root_itself_may_be_a_link(tmp_path: Path, work: Path) -> None:
    """The root is the host's own choice (``/tmp`` is a link on macOS)."""
    (tmp_path / "via").symlink_to(work)
    with Folder.open(tmp_path / "via", "x", create=True) as folder:
        folder.write_atomic("f.txt", [b"ok"])
    assert (work / "x" / "f.txt").read_bytes() == b"ok"


@pytest.mark.parametrize("relative", ["..", "../x", "a/../../x", "/etc"])
def test_paths_leaving_the_root_are_refused(work: Path, relative: str) -> None:
    with pytest.raises(WorkDirError, match="outside the work dir"):
        Folder.open(work, relative)


def test_write_atomic_refuses_a_link_at_the_final_name(work: Path, outside: Path) -> None:
    before = snapshot(outside)
    (work / "out.txt").symlink_to(outside / "secret")
    with Folder.open(work) as folder, pytest.raises(StorageError, match=re.escape("out.txt")):
        folder.write_atomic("out.txt", [b"evil"])
    assert snapshot(outside) == before
    assert sorted(p.name for p in work.iterdir()) == ["out.txt"]  # no temp file left


def test_write_atomic_sets_the_owner_on_the_descriptor(work: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing owners needs root")
    with Folder.open(work) as folder:
        folder.write_atomic("conn.json", [b"{}"], mode=0o600, owner=(4321, 4322))
    st = (work / "conn.json").stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (4321, 4322, 0o600)


def test_create_replaces_a_file_but_refuses_a_link(work: Path, outside: Path) -> None:
    (work / "old.txt").write_text("old")
    (outside / "hard").write_text("x")
    with Folder.open(work) as folder:
        fd = folder.create("old.txt")
        os.write(fd, b"new")
        os.close(fd)
        (work / "link.txt").symlink_to(outside / "secret")
        with pytest.raises(StorageError, match=re.escape("link.txt")):
            folder.create("link.txt")
    assert (work / "old.txt").read_text() == "new"
    assert (outside / "secret").read_text() == "untouched"


def test_read_refuses_links_and_fifos(work: Path, outside: Path) -> None:
    (work / "link").symlink_to(outside / "secret")
    os.mkfifo(work / "fifo")
    (work / "plain").write_bytes(b"data")
    with Folder.open(work) as folder:
        with pytest.raises(StorageError, match="symbolic link"):
            folder.read_bytes("link")
        with pytest.raises(StorageError, match="not a regular file"):
            folder.read_bytes("fifo")  # would block forever if opened blocking
        assert folder.read_bytes("plain") == b"data"
        with pytest.raises(FileNotFoundError):
            folder.read_bytes("missing")


def test_write_bytes_makes_folders(work: Path) -> None:
    path = write_bytes(work, "r/report.md", b"# r\n")
    assert path == work / "r" / "report.md"
    assert path.read_bytes() == b"# r\n"


# -- the output store and spills ---------------------------------------------------------


def test_store_refuses_links_at_the_final_name_and_the_old_temp_name(
    work: Path, outside: Path
) -> None:
    before = snapshot(outside)
    store = OutputStore(work, "s_files")
    folder = work / "s_files"
    folder.mkdir()
    (folder / ".cell-001-1.html.tmp").symlink_to(outside / "new-file")  # the old temp name
    saved = store.save_bundle(0, 1, {"text/html": "<p>1</p>"})
    assert saved["text/html"].read_text() == "<p>1</p>"
    (folder / "cell-002-1.html").symlink_to(outside / "secret")
    with pytest.raises(StorageError, match=re.escape("cell-002-1.html")):
        store.save_bundle(1, 1, {"text/html": "<p>2</p>"})
    (folder / "cell-003-stdout.txt").symlink_to(outside / "secret")
    with pytest.raises(StorageError, match=re.escape("cell-003-stdout.txt")):
        FileSpill(store, 2).write("stdout", "x" * 100)
    assert snapshot(outside) == before


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Files this process writes may not grow past ``limit`` bytes (EFBIG, deterministic)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_store_write_failures_are_storage_errors_with_errno(work: Path) -> None:
    store = OutputStore(work, "s_files")
    with file_size_limit(1000), pytest.raises(StorageError) as caught:
        store.save_bundle(0, 1, {"text/html": "x" * 5000})
    assert caught.value.errno == errno.EFBIG
    assert "cell-001-1.html" in str(caught.value)
    assert caught.value.execution is None  # the session attaches the cell's Execution
    assert list((work / "s_files").iterdir()) == []  # the temp file is gone
    store.save_bundle(0, 1, {"text/html": "x" * 5000})  # space is back: it works again


def fill(spill: FileSpill, times: int, size: int) -> None:
    for _ in range(times):
        spill.write("stdout", "y" * size)
    spill.close()


def test_spill_write_failures_are_storage_errors_with_errno(work: Path) -> None:
    spill = FileSpill(OutputStore(work, "s_files"), 0)
    with file_size_limit(1000), pytest.raises(StorageError) as caught:
        fill(spill, 100, 100)
    assert caught.value.errno == errno.EFBIG
    assert "cell-001-stdout.txt" in str(caught.value)
    with contextlib.suppress(StorageError):
        spill.close()


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: a real full disk (needs root to mount)."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_a_full_disk_gives_enospc_for_outputs_spills_and_the_notebook(tiny_disk: Path) -> None:
    store = OutputStore(tiny_disk, "s_files")
    with pytest.raises(StorageError) as caught:
        store.save_bundle(0, 1, {"text/html": "x" * 200_000})
    assert caught.value.errno == errno.ENOSPC
    assert "free some space" in str(caught.value)
    spill = FileSpill(store, 1)
    with pytest.raises(StorageError) as spilled:
        fill(spill, 200, 1000)
    assert spilled.value.errno == errno.ENOSPC
    with contextlib.suppress(StorageError):
        spill.close()
    (tiny_disk / "s_files" / "cell-002-stdout.txt").unlink()
    rec = NotebookRecorder(tiny_disk / "s.ipynb", META)
    rec.append(code_cell(1))
    with pytest.raises(NotebookError, match="No space left"):
        rec.append(code_cell(2, "z" * 100_000))
    rec.cells[-1]["outputs"][0]["text"] = "short\n"
    rec.refresh(1)  # space is back (the big cell shrank): the next save records everything
    saved = json.loads((tiny_disk / "s.ipynb").read_text())
    assert [c["execution_count"] for c in saved["cells"]] == [1, 2]


# -- the notebook and its spare ----------------------------------------------------------


def test_links_at_the_notebook_and_its_spare_are_refused(work: Path, outside: Path) -> None:
    before = snapshot(outside)
    path = work / "s.ipynb"
    rec = NotebookRecorder(path, META)
    rec.append(code_cell(1))
    rec.spare_path.unlink(missing_ok=True)
    rec.spare_path.symlink_to(outside / "secret")
    with pytest.raises(NotebookError, match="symbolic link") as caught:
        rec.append(code_cell(2))
    assert isinstance(caught.value.__cause__, StorageError)
    assert caught.value.__cause__.errno == errno.ELOOP
    assert not os.path.lexists(rec.spare_path)  # the failed save removed the link itself
    rec.save()  # so saving works again, with both cells
    assert [c["id"] for c in json.loads(path.read_text())["cells"]] == ["c1", "c2"]
    path.unlink()
    path.symlink_to(outside / "secret")
    with pytest.raises(NotebookError, match="symbolic link"):
        rec.append(code_cell(3))
    assert snapshot(outside) == before
    assert path.is_symlink()


def test_a_spare_swapped_for_another_file_is_rewritten_not_patched(work: Path) -> None:
    path = work / "s.ipynb"
    rec = NotebookRecorder(path, META)
    for n in range(4):
        rec.append(code_cell(n))
    rec.spare_path.unlink()
    rec.spare_path.write_text("X" * 10_000)  # same name, another file (the kernel's)
    rec.append(code_cell(4))
    assert path.read_text() == rec.render()


def test_a_notebook_in_a_linked_subfolder_of_the_root_is_refused(work: Path, outside: Path) -> None:
    (work / "nb").symlink_to(outside)
    rec = NotebookRecorder(work / "nb" / "s.ipynb", META, root=work)
    with pytest.raises(NotebookError, match="symbolic link"):
        rec.save()
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


def test_the_merging_recorder_never_reads_through_a_link(work: Path, outside: Path) -> None:
    (outside / "theirs.ipynb").write_text(
        json.dumps({"cells": [code_cell(99)], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )
    path = work / "s.ipynb"
    rec = MergingRecorder(path, META)
    rec.append(code_cell(1))
    path.unlink()
    path.symlink_to(outside / "theirs.ipynb")
    assert rec._read_disk() is None  # refused (logged), not merged from outside
    with pytest.raises(NotebookError, match="symbolic link"):
        rec.append(code_cell(2))
    assert "c99" not in rec.render()
