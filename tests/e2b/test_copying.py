"""Copying a sandbox's files (snapshots, forks) where its code may have planted links and
FIFOs: a link is copied as a link, never followed (into a folder or to a file outside); a
FIFO is skipped, never waited on; files, folders and modes come across."""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_exec.boundary.paths import Folder
from jupyter_exec.e2b.copying import copy_tree


def test_links_are_copied_as_links_and_fifos_skipped(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the sandbox's")
    source = tmp_path / "sandbox"
    (source / "data").mkdir(parents=True)
    (source / "data" / "a.csv").write_text("1,2")
    (source / "run.sh").write_text("echo hi")
    (source / "run.sh").chmod(0o750)
    (source / "to_secret").symlink_to(outside / "secret.txt")
    (source / "to_outside").symlink_to(outside)
    os.mkfifo(source / "pipe")
    (source / ".own_state").mkdir()

    copy = tmp_path / "copy"
    with Folder.open(source) as folder:
        size = copy_tree(folder.fd, copy, skip=lambda name: name == ".own_state")

    assert (copy / "data" / "a.csv").read_text() == "1,2"
    assert (copy / "run.sh").stat().st_mode & 0o777 == 0o750
    assert os.readlink(copy / "to_secret") == str(outside / "secret.txt")
    assert os.readlink(copy / "to_outside") == str(outside)
    assert (copy / "to_outside").is_symlink()  # not a folder with the secret copied in
    assert not (copy / "pipe").exists()
    assert not (copy / ".own_state").exists()
    assert size == len("1,2") + len("echo hi")  # nothing read through a link
