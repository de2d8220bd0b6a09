"""A replay runs in a fresh copy of the recording folder's inputs, never in that folder.

Replayed in the recording's folder, ``%%file x.txt`` said "Overwriting" where the record said
"Writing", and a cell that appends to a file met the lines earlier runs left. Each test here
records a notebook with a real kernel, then replays it and looks at both folders.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from jupyter_exec import NotebookError, Session, replay

CELLS = [
    "%%file x.txt\nhello",
    "with open('log.txt', 'a') as f:\n    f.write('run\\n')\n"
    "print(len(open('log.txt').readlines()))",
    "print(open('data/input.csv').read())",
]


def _listing(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (hidden ones too): a file's sha256, else its kind."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            out[key] = "link"
        elif path.is_dir():
            out[key] = "folder"
        else:
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "data").mkdir(parents=True)
    (root / "data" / "input.csv").write_text("a,b\n1,2\n")
    with Session(work_dir=root, name="files", timeout=60) as session:
        for code in CELLS:
            assert session.execute(code).ok
    return root / "files.ipynb"


def _stdout(path: Path, index: int) -> str:
    cell = json.loads(path.read_text())["cells"][index]
    return "".join("".join(o.get("text", "")) for o in cell["outputs"])


def test_the_recording_folder_is_untouched_and_side_effects_meet_the_recorded_start(
    recorded: Path, tmp_path: Path
) -> None:
    root = recorded.parent
    assert _stdout(recorded, 0) == "Writing x.txt\n"
    assert json.loads(recorded.read_text())["metadata"]["jupyter_exec"]["written"] == [
        "x.txt",
        "log.txt",
    ]
    before = _listing(root)
    for number in (1, 2):  # a file the first replay wrote does not change the second
        out = tmp_path / "out" / f"again{number}.ipynb"
        report = replay(recorded, output=out, timeout=60)
        assert [c.status for c in report.cells] == ["same"] * 3, report.to_markdown()
        assert _stdout(out, 0) == "Writing x.txt\n"
        assert _stdout(out, 1) == "1\n"
        assert report.work_dir == out.parent / f"again{number}_work"
        assert (report.work_dir / "data" / "input.csv").read_text() == "a,b\n1,2\n"
        assert _listing(root) == before  # not one entry added, removed or changed


def test_by_default_the_replay_adds_its_record_and_run_folder_beside_the_notebook(
    recorded: Path,
) -> None:
    root = recorded.parent
    before = _listing(root)
    first = replay(recorded, timeout=60)
    second = replay(recorded, timeout=60)  # its run folder made afresh: the same verdicts
    for report in (first, second):
        assert report.reproduced, report.to_markdown()
    after = _listing(root)
    assert {k: v for k, v in after.items() if k in before} == before
    added = {k.split("/")[0] for k in set(after) - set(before)}
    assert added == {"files.replayed.ipynb", "files.replayed_work"}
    work = root / "files.replayed_work"
    assert (work / "log.txt").read_text() == "run\n"  # the second replay's only line


def test_two_runs_each_get_a_fresh_copy(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "twice" / "nb.ipynb"
    report = replay(recorded, output=out, runs=2, timeout=60)
    assert [c.status for c in report.cells] == ["same"] * 3, report.to_markdown()
    assert (out.parent / "nb_work" / "log.txt").read_text() == "run\n"
    assert (out.parent / "nb-run2_work" / "log.txt").read_text() == "run\n"


def test_a_work_dir_that_is_the_recording_folder_is_refused(recorded: Path) -> None:
    before = _listing(recorded.parent)
    with pytest.raises(NotebookError, match="never runs in the recording's folder"):
        replay(recorded, work_dir=recorded.parent, timeout=60)
    assert _listing(recorded.parent) == before


def test_a_given_work_dir_gets_the_inputs_and_hidden_folders_stay_behind(
    recorded: Path, tmp_path: Path
) -> None:
    hidden = recorded.parent / ".private"
    hidden.mkdir()
    (hidden / "token").write_text("not an input")
    work = tmp_path / "scratch"
    report = replay(recorded, work_dir=work, timeout=60)
    assert report.reproduced, report.to_markdown()
    assert report.output == work / "files.replayed.ipynb"
    assert (work / "data" / "input.csv").exists()
    assert not (work / ".private").exists()
    assert not (work / ".files_state").exists()  # the recording's own state stays too


def test_copy_inputs_false_runs_in_the_folder_as_you_filled_it(
    recorded: Path, tmp_path: Path
) -> None:
    work = tmp_path / "filled"
    (work / "data").mkdir(parents=True)
    (work / "data" / "input.csv").write_text("a,b\n9,9\n")
    report = replay(recorded, work_dir=work, copy_inputs=False, timeout=60)
    assert [c.status for c in report.cells] == ["same", "same", "different"]
    assert "+a,b" not in report.cells[2].diff  # same header, only the row differs
    assert "+9,9" in report.cells[2].diff
    names = {p.name for p in work.iterdir()}
    assert {"data", "files.replayed.ipynb", "log.txt", "x.txt"} <= names
    assert "files.ipynb" not in names  # nothing was copied


def test_a_folder_too_large_to_copy_is_refused_before_any_kernel(
    recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_exec.notebook import inputs

    monkeypatch.setattr(inputs, "MAX_INPUT_FILES", 1)  # files.ipynb and input.csv
    before = _listing(recorded.parent)
    with pytest.raises(NotebookError, match="too much to copy for a replay"):
        replay(recorded, output=recorded.parent.parent / "big" / "r.ipynb", timeout=60)
    assert _listing(recorded.parent) == before
    assert not (recorded.parent.parent / "big" / "r.ipynb").exists()
    assert not (recorded.parent.parent / "big" / "r_work").exists()  # not left half full


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files away needs root")
def test_run_as_root_the_copy_belongs_to_the_owner_of_the_original(tmp_path: Path) -> None:
    """A Docker kernel runs as its work dir's owner: the copy's owner is the recording's."""
    from jupyter_exec.notebook.inputs import copy_inputs

    source, dest = tmp_path / "rec", tmp_path / "run"
    (source / "data").mkdir(parents=True)
    (source / "data" / "in.csv").write_text("a\n")
    (source / "mine.txt").write_text("root's\n")
    for path in (source, source / "data", source / "data" / "in.csv"):
        os.chown(path, 1000, 1000)
    dest.mkdir()
    copy_inputs(source, dest, own_dest=True)
    owners = {
        str(p.relative_to(tmp_path)): (p.stat().st_uid, p.stat().st_gid)
        for p in (dest, dest / "data", dest / "data" / "in.csv", dest / "mine.txt")
    }
    assert owners == {
        "run": (1000, 1000),
        "run/data": (1000, 1000),
        "run/data/in.csv": (1000, 1000),
        "run/mine.txt": (0, 0),
    }
