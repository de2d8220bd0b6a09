"""The output store: mime types to files, confinement to the work dir, and the work-dir tracker."""

from __future__ import annotations

import base64
import errno
import json
import os
from pathlib import Path

import pytest

from jupyter_exec import StorageError, WorkDirError
from jupyter_exec.engine import mime
from jupyter_exec.engine.store import (
    FileSpill,
    OutputStore,
    WorkDirTracker,
    confined_path,
)

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0g"
    "AAAABJRU5ErkJggg=="
)


@pytest.mark.parametrize(
    ("mime_type", "ext"),
    [
        ("image/png", ".png"),
        ("image/jpeg", ".jpg"),
        ("image/gif", ".gif"),
        ("image/svg+xml", ".svg"),
        ("application/pdf", ".pdf"),
        ("text/html", ".html"),
        ("text/markdown", ".md"),
        ("text/latex", ".tex"),
        ("application/json", ".json"),
        ("application/vnd.plotly.v1+json", ".plotly.json"),
        ("application/vnd.vegalite.v5+json", ".vegalite.json"),
        ("application/vnd.vega.v5+json", ".vega.json"),
        ("text/plain", None),
        ("application/vnd.jupyter.widget-view+json", None),
        ("application/vnd.jupyter.widget-state+json", None),
        ("application/x-unknown", None),
        ("application/vnd.../..+json", None),
    ],
)
def test_mime_extension(mime_type: str, ext: str | None) -> None:
    assert mime.extension(mime_type) == ext


def test_save_bundle_writes_each_savable_format_with_a_name_tied_to_its_cell(
    tmp_path: Path,
) -> None:
    store = OutputStore(tmp_path, "sess_files")
    # Cell index 3 is the notebook's 4th cell: names use the 1-based cell number.
    saved = store.save_bundle(
        3,
        2,
        {
            "text/plain": "<Figure>",
            "image/png": base64.b64encode(PNG).decode(),
            "text/html": ["<b>a</b>\n", "<i>b</i>"],
            "application/json": {"a": [1, 2], "é": "ü"},
            "application/vnd.plotly.v1+json": {"data": []},
            "application/vnd.jupyter.widget-view+json": {"model_id": "x"},
        },
    )
    folder = tmp_path.resolve() / "sess_files"
    assert saved == {
        "image/png": folder / "cell-004-2.png",
        "text/html": folder / "cell-004-2.html",
        "application/json": folder / "cell-004-2.json",
        "application/vnd.plotly.v1+json": folder / "cell-004-2.plotly.json",
    }
    assert saved["image/png"].read_bytes() == PNG
    assert saved["text/html"].read_text() == "<b>a</b>\n<i>b</i>"
    assert json.loads(saved["application/json"].read_text(encoding="utf-8")) == {
        "a": [1, 2],
        "é": "ü",
    }
    # Nothing else: no text/plain file, no widget file, no temp files left.
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in saved.values())


def test_save_bundle_overwrites_on_update(tmp_path: Path) -> None:
    store = OutputStore(tmp_path, "f")
    store.save_bundle(0, 1, {"text/html": "v1"})
    path = store.save_bundle(0, 1, {"text/html": "v2"})["text/html"]
    assert path.read_text() == "v2"


def test_confined_path_accepts_paths_inside(tmp_path: Path) -> None:
    assert confined_path(tmp_path, "a/b.txt") == tmp_path.resolve() / "a" / "b.txt"
    assert confined_path(tmp_path, "a/../b.txt") == tmp_path.resolve() / "b.txt"
    assert confined_path(tmp_path, ".") == tmp_path.resolve()


@pytest.mark.parametrize("relative", ["..", "../x.png", "a/../../x.png", "/etc/passwd"])
def test_confined_path_refuses_paths_outside(tmp_path: Path, relative: str) -> None:
    root = tmp_path / "work"
    root.mkdir()
    with pytest.raises(WorkDirError, match="outside the work dir"):
        confined_path(root, relative)


def test_confined_path_refuses_a_symlink_pointing_outside(tmp_path: Path) -> None:
    root = tmp_path / "work"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    (root / "inner").mkdir()
    (root / "ok-link").symlink_to(root / "inner")
    with pytest.raises(StorageError) as refused:
        confined_path(root, "link/x.png")
    assert refused.value.errno == errno.ELOOP
    # No link is followed at all, even one that stays inside (a kernel may swap its target).
    with pytest.raises(StorageError):
        confined_path(root, "ok-link/x.png")
    assert confined_path(root, "inner/x.png") == root / "inner" / "x.png"


def test_store_never_writes_through_a_symlinked_folder(tmp_path: Path) -> None:
    root = tmp_path / "work"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "s_files").symlink_to(outside)
    store = OutputStore(root, "s_files")
    with pytest.raises(StorageError, match="symbolic link") as saved:
        store.save_bundle(0, 1, {"text/html": "<p>x</p>"})
    assert saved.value.errno == errno.ELOOP
    with pytest.raises(StorageError, match="symbolic link"):
        FileSpill(store, 0).write("stdout", "x")
    assert list(outside.iterdir()) == []


def test_store_folder_outside_the_work_dir_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    store = OutputStore(root, "../escape")
    with pytest.raises(WorkDirError):
        store.save_bundle(0, 1, {"text/html": "x"})
    assert not (tmp_path / "escape").exists()


def test_file_spill_appends_and_reports_a_relative_location(tmp_path: Path) -> None:
    store = OutputStore(tmp_path, "s_files")
    spill = FileSpill(store, 7)
    assert spill.location("stdout") is None
    spill.write("stdout", "a" * 10)
    spill.write("stdout", "b\n")
    spill.write("stderr", "e")
    spill.close()
    assert spill.location("stdout") == os.path.join("s_files", "cell-008-stdout.txt")
    assert spill.paths["stdout"].read_text() == "a" * 10 + "b\n"
    assert spill.paths["stderr"].read_text() == "e"


# -- WorkDirTracker ----------------------------------------------------------------------


def test_tracker_sees_new_and_modified_files_only(tmp_path: Path) -> None:
    (tmp_path / "old.csv").write_text("1")
    (tmp_path / "same.txt").write_text("x")
    tracker = WorkDirTracker(tmp_path)
    assert tracker.changes() == []
    (tmp_path / "new.png").write_bytes(PNG)
    (tmp_path / "sub" / "deep").mkdir(parents=True)
    (tmp_path / "sub" / "deep" / "x.json").write_text("{}")
    (tmp_path / "old.csv").write_text("1,2")  # size changes
    assert tracker.changes() == sorted(
        [
            tmp_path.resolve() / "new.png",
            tmp_path.resolve() / "old.csv",
            tmp_path.resolve() / "sub" / "deep" / "x.json",
        ]
    )
    # Each change is reported once.
    assert tracker.changes() == []


def test_tracker_sees_a_rewrite_of_the_same_size(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"aaaa")
    tracker = WorkDirTracker(tmp_path)
    path.write_bytes(b"bbbb")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert tracker.changes() == [path.resolve()]


def test_tracker_ignores_hidden_files_the_notebook_and_bulky_folders(tmp_path: Path) -> None:
    notebook = tmp_path / "s.ipynb"
    tracker = WorkDirTracker(tmp_path, ignore=[notebook])
    notebook.write_text("{}")
    (tmp_path / ".hidden").write_text("x")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "f").write_text("x")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "m.pyc").write_bytes(b"x")
    (tmp_path / "visible.txt").write_text("x")
    assert tracker.changes() == [tmp_path.resolve() / "visible.txt"]


def test_tracker_does_not_follow_symlinks_out_of_the_work_dir(tmp_path: Path) -> None:
    root = tmp_path / "work"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside, target_is_directory=True)
    tracker = WorkDirTracker(root)
    (outside / "secret.txt").write_text("x")
    assert tracker.changes() == []


def test_tracker_scan_is_capped(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"f{i}.txt").write_text("x")
    tracker = WorkDirTracker(tmp_path, max_entries=10)
    assert len(tracker.scan()) == 10
