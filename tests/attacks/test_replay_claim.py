"""Attacks on who owns a replay's output: its replayed notebook and its run folder.

I want a replay's work destroyed or its host hurt. I can start a second replay to the same
output while the first runs (its fresh run folder would wipe the first's folder under its
kernel, and both would write one notebook). I wrote the notebook's folder (a Docker kernel
recorded there, or I share it), so I can plant what stands at the claim file's name beside
the replayed notebook: a link to a file or folder of the host's (to be written, truncated or
removed through), a FIFO (to hang the replay), a hard link to a host file (to be
overwritten), or a record naming a live pid (to block every replay for ever). Or I killed a
replay with SIGKILL, hoping its claim blocks every replay after it.

Each test asserts the refusal (or that the replay is not blocked) and that the asset is
untouched: the first replay completes with its run folder and a valid notebook, the host's
files keep their bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
from pathlib import Path

import pytest

from jupyter_exec import NotebookError, replay
from tests.replay_claim_helpers import (
    Held,
    claim_file,
    finish,
    held_notebook,
    kill_quietly,
    start_replay,
    valid,
    wait_for,
)


def _asset(tmp_path: Path) -> tuple[Path, Path]:
    """A host folder and file the attacker must not reach."""
    outside = tmp_path / "host"
    (outside / "vault").mkdir(parents=True)
    (outside / "vault" / "keys.txt").write_text("PIN 4711\n")
    secret = outside / "secret.txt"
    secret.write_text("PIN 4711\n")
    return outside, secret


def _fingerprint(folder: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_nlink)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _stop_held(held: Held, *pids: int) -> None:
    """End what a test left running: its replay processes and the held replay's kernel."""
    held.release()
    for pid in pids:
        kill_quietly(pid)
    if held.started.exists():
        kill_quietly(held.kernel_pid())


def test_a_second_replay_process_to_the_same_output_is_refused_and_the_first_completes(
    tmp_path: Path,
) -> None:
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    output = tmp_path / "out" / "again.ipynb"
    first = start_replay(str(held.notebook), "--output", str(output), "--timeout", "300")
    try:
        wait_for(held.started.exists, "the first replay's first cell")
        run = held.kernel_folder()
        assert run == output.with_name("again_work")
        inputs_then = sorted(p.name for p in run.iterdir())

        # The attack: the same replay again, to the same output, while the first runs.
        second = start_replay(str(held.notebook), "--output", str(output), "--timeout", "60")
        status, _, err = finish(second)

        assert status == 2, err
        assert f"a replay of held.ipynb (pid {first.pid}," in err
        assert "wait for it to end, or record this replay elsewhere (--output" in err
        assert held.kernel_folder() == run  # the first's kernel still works in its folder
        assert sorted(p.name for p in run.iterdir()) == inputs_then
        held.release()
        status, _, err = finish(first)
    finally:
        _stop_held(held, first.pid)
    assert status == 0, err
    assert sorted(p.name for p in run.iterdir()) == ["data.csv", "held.ipynb", "made_by_cell.txt"]
    nb = valid(output)
    assert [o["text"] for c in nb.cells for o in c.outputs] == ["ready\n", "a,b\n1,2\n"]
    assert nb.metadata["jupyter_exec"]["replay"]["reproduced"] is True
    assert not claim_file(output).exists()


def test_a_killed_replays_claim_does_not_block_the_next_one(tmp_path: Path) -> None:
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    output = held.notebook.with_name("held.replayed.ipynb")
    first = start_replay(str(held.notebook), "--timeout", "300", "--quiet")
    try:
        wait_for(held.started.exists, "the first replay's first cell")
        first.send_signal(signal.SIGKILL)  # no cleanup runs: the claim file stays
        finish(first)
        kill_quietly(held.kernel_pid())
        assert json.loads(claim_file(output).read_text())["pid"] == first.pid
        held.release()

        again = start_replay(str(held.notebook), "--timeout", "120", "--quiet")
        status, _, err = finish(again)
    finally:
        _stop_held(held, first.pid)
    assert status == 0, err
    assert valid(output).metadata["jupyter_exec"]["replay"]["reproduced"] is True
    assert not claim_file(output).exists()


@pytest.mark.parametrize("target", ["file", "folder", "missing"])
def test_a_link_planted_at_the_claims_name_is_refused_not_followed(
    tmp_path: Path, target: str
) -> None:
    outside, secret = _asset(tmp_path)
    before = _fingerprint(outside)
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    held.release()
    output = held.notebook.with_name("held.replayed.ipynb")
    aim = {"file": secret, "folder": outside / "vault", "missing": outside / "made.txt"}[target]
    os.symlink(aim, claim_file(output))

    with pytest.raises(NotebookError, match="it is a symbolic link"):
        replay(held.notebook, timeout=60)

    assert _fingerprint(outside) == before
    assert not (outside / "made.txt").exists()
    assert claim_file(output).is_symlink()  # named for the person to remove, never removed
    assert not output.exists()
    assert not output.with_name("held.replayed_work").exists()


def test_a_fifo_planted_at_the_claims_name_is_refused_without_waiting(tmp_path: Path) -> None:
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    held.release()
    output = held.notebook.with_name("held.replayed.ipynb")
    os.mkfifo(claim_file(output))

    with pytest.raises(NotebookError, match="not a regular file"):
        replay(held.notebook, timeout=60)  # a FIFO opened for reading would block for ever

    assert stat.S_ISFIFO(os.lstat(claim_file(output)).st_mode)
    assert not output.with_name("held.replayed_work").exists()


def test_a_hard_link_to_a_host_file_at_the_claims_name_is_not_written(tmp_path: Path) -> None:
    outside, secret = _asset(tmp_path)
    before = _fingerprint(outside)
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    held.release()
    output = held.notebook.with_name("held.replayed.ipynb")
    os.link(secret, claim_file(output))

    with pytest.raises(NotebookError, match="it has 2 names"):
        replay(held.notebook, timeout=60)

    assert secret.read_text() == "PIN 4711\n"
    assert {k: v[0] for k, v in _fingerprint(outside).items()} == {
        k: v[0] for k, v in before.items()
    }
    assert not output.with_name("held.replayed_work").exists()


def test_a_planted_record_naming_a_live_process_blocks_no_replay(tmp_path: Path) -> None:
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    held.release()
    output = held.notebook.with_name("held.replayed.ipynb")
    planted = {"pid": os.getppid(), "what": "a replay of held.ipynb", "since": "always"}
    claim_file(output).write_text(json.dumps(planted))

    report = replay(held.notebook, timeout=120)

    assert report.reproduced, report.to_markdown()
    valid(output)
    assert not claim_file(output).exists()
