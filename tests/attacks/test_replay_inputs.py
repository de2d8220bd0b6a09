"""Attacks through the recording's folder, which a replay copies before its first cell.

Whoever wrote the notebook's folder (a person who shares it, a Docker kernel that recorded
there) chooses what stands in it. A replay copies the folder's inputs into a fresh run folder
(:mod:`jupyter_exec.notebook.inputs`); the attacker wants that copy to bring a host file the
kernel could not reach (a link to it, copied as the file or followed into a folder), or the
host to write or delete through a link where the run folder goes, or a forged record to reach
a path outside the folder. Each test asserts the refusal and that the asset is untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import nbformat
import pytest

from jupyter_exec import NotebookError, replay


def _asset(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    (outside / "vault").mkdir(parents=True)
    secret = outside / "secret.txt"
    secret.write_text("PIN 4711\n")
    (outside / "vault" / "keys.txt").write_text("PIN 4711\n")
    return outside, secret


def _fingerprint(folder: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(folder)): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _notebook(folder: Path, source: str, recorded: str, **ours: object) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "P"}
    if ours:
        nb.metadata["jupyter_exec"] = ours
    cell = nbformat.v4.new_code_cell(source, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=recorded)]
    nb.cells = [cell]
    path = folder / "nb.ipynb"
    nbformat.write(nb, path)
    return path


def _contents(folder: Path) -> list[bytes]:
    return [p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]


def test_links_in_the_recording_folder_are_neither_copied_nor_followed(tmp_path: Path) -> None:
    outside, secret = _asset(tmp_path)
    before = _fingerprint(outside)
    folder = tmp_path / "shared"
    (folder / "data").mkdir(parents=True)
    os.symlink(secret, folder / "input.txt")  # a file link: copied, it would be the secret
    os.symlink(outside / "vault", folder / "data" / "more")  # a folder link: followed, the vault
    os.symlink("../../outside/secret.txt", folder / "data" / "relative.txt")
    code = "import os\nprint(open('input.txt').read())\nprint(os.listdir('data'))"
    path = _notebook(folder, code, "what input.txt held then\n\n['more', 'relative.txt']\n")
    out = tmp_path / "out" / "again.ipynb"

    report = replay(path, output=out, timeout=60)

    work = report.work_dir
    assert work == out.parent / "again_work"
    assert sorted(p.name for p in work.iterdir()) == ["data", "nb.ipynb"]
    assert list((work / "data").iterdir()) == []
    assert not any(b"PIN 4711" in data for data in _contents(work))
    assert not any(p.is_symlink() for p in work.rglob("*"))
    (cell,) = report.cells
    assert cell.status == "error_now"  # the cell finds no input.txt: the link was not copied
    assert "FileNotFoundError" in (cell.error_now or "")
    assert "PIN 4711" not in json.dumps([dict(o) for o in cell.replayed])
    assert any("3 link(s)" in w and "input.txt" in w for w in report.warnings), report.warnings
    assert _fingerprint(outside) == before


def test_a_link_where_the_run_folder_goes_is_refused_not_emptied(tmp_path: Path) -> None:
    outside, _ = _asset(tmp_path)
    before = _fingerprint(outside)
    folder = tmp_path / "shared"
    folder.mkdir()
    path = _notebook(folder, "print('hi')", "hi\n")
    os.symlink(outside, folder / "nb.replayed_work")  # the default run folder's name
    with pytest.raises(NotebookError, match="cannot make the replay's folder"):
        replay(path, timeout=60)
    assert _fingerprint(outside) == before
    assert (folder / "nb.replayed_work").is_symlink()
    assert not (folder / "nb.replayed.ipynb").exists()  # refused before any kernel started


def test_a_forged_written_list_cannot_reach_outside_the_folder(tmp_path: Path) -> None:
    outside, _ = _asset(tmp_path)
    before = _fingerprint(outside)
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "input.txt").write_text("data\n")
    forged = ["../outside/secret.txt", str(outside / "secret.txt"), "/etc/passwd", "input.txt/.."]
    path = _notebook(folder, "print(open('input.txt').read())", "data\n\n", written=forged)
    report = replay(path, output=tmp_path / "out" / "r.ipynb", timeout=60)
    assert report.reproduced, report.to_markdown()  # only a skip list: nothing else follows
    assert _fingerprint(outside) == before
    assert sorted(p.name for p in (tmp_path / "out" / "r_work").iterdir()) == [
        "input.txt",
        "nb.ipynb",
    ]
