"""``jupyter-exec checkpoints list|verify`` on checkpoints a real kernel wrote."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from jupyter_exec import Session
from jupyter_exec.cli.exits import EXIT_USAGE
from tests.cli_helpers import run_cli


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("checkpoints", *args, timeout=120)


def test_checkpoints_list_and_verify(tmp_path: Path) -> None:
    work = tmp_path / "work"
    with Session(work_dir=work, name="main", timeout=60, checkpoint_every=0) as session:
        session.execute("rows = [1, 2, 3]\ngen = (i for i in rows)").raise_for_error()
        made = session.checkpoint("loaded")
    assert made.path is not None

    listed = cli("list", str(work))
    assert listed.returncode == 0, listed.stderr
    assert "main" in listed.stdout
    assert "loaded" in listed.stdout
    assert "skipped: gen" in listed.stdout
    as_json = json.loads(cli("list", str(work), "--json").stdout)
    assert [(c["session"], c["name"], c["names"]) for c in as_json] == [
        ("main", "loaded", ["rows"])
    ]
    assert cli("list", str(tmp_path / "nothing-here")).returncode == EXIT_USAGE

    checked = cli("verify", str(made.path))
    assert checked.returncode == 0, checked.stderr
    assert "whole (1 names" in checked.stdout
    assert "signed by this host; written by a kernel on this host" in checked.stdout
    assert "not stored: gen" in checked.stdout

    data = next(made.path.glob("*.pkl"))
    data.write_bytes(data.read_bytes() + b"!")
    damaged = cli("verify", str(made.path))
    assert damaged.returncode == EXIT_USAGE  # bad input: the checkpoint given
    assert "damaged" in damaged.stderr


def test_checkpoints_help_teaches() -> None:
    shown = cli("--help")
    assert shown.returncode == 0
    assert "checkpoints verify" in shown.stdout
    assert "session.restore" in shown.stdout
    assert "--restore" in shown.stdout
