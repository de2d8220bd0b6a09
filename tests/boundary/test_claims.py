"""A claim beside a path: one owner at a time, in this process and across processes.

No kernel: the owners here are this test and small Python processes it starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_exec import SessionConflict, StorageError
from jupyter_exec.boundary import claims

HOLD = """
import sys
from jupyter_exec.boundary import claims
held = claims.claim(sys.argv[1], "a test owner", "wait")
print("held", flush=True)
sys.stdin.readline()
"""


def _holder_process(path: Path) -> subprocess.Popen[str]:
    """A process that claims ``path`` and holds it until its stdin closes."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "held\n"  # the event: it holds the claim now
    return process


def test_a_second_claim_in_this_process_is_refused_until_the_first_is_released(
    tmp_path: Path,
) -> None:
    target = tmp_path / "out.ipynb"
    first = claims.claim(target, "the first owner", "wait for it")
    assert first.file == tmp_path / ".out.ipynb.claim"
    record = json.loads(first.file.read_text())
    assert record["pid"] == os.getpid()
    assert record["what"] == "the first owner"

    with pytest.raises(SessionConflict) as refused:
        claims.claim(target, "the second owner", "wait for it")
    message = str(refused.value)
    assert f"the first owner (pid {os.getpid()}" in message
    assert message.endswith("wait for it")

    first.release()
    first.release()  # idempotent
    assert not first.file.exists()
    with claims.claim(target, "the second owner", "wait") as second:
        assert second.held
    assert not second.held
    assert not first.file.exists()


def test_another_process_holding_the_claim_is_named_by_its_pid(tmp_path: Path) -> None:
    target = tmp_path / "out.ipynb"
    holder = _holder_process(target)
    try:
        with pytest.raises(SessionConflict, match=f"a test owner \\(pid {holder.pid},"):
            claims.claim(target, "me", "wait")
    finally:
        holder.communicate(timeout=60)  # its stdin closes: it ends, releasing nothing by hand
        assert holder.returncode == 0
    with claims.claim(target, "me", "wait"):  # released by the end of its owner
        pass


def test_the_claim_of_a_killed_owner_is_taken_over(tmp_path: Path) -> None:
    target = tmp_path / "out.ipynb"
    holder = _holder_process(target)
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=60)  # reaped, its pipes closed
    stale = target.with_name(".out.ipynb.claim")
    assert json.loads(stale.read_text())["pid"] == holder.pid  # left behind, as a crash leaves it

    with claims.claim(target, "the next owner", "wait") as taken:
        assert json.loads(taken.file.read_text())["pid"] == os.getpid()
    assert not stale.exists()


def test_a_record_naming_a_live_pid_blocks_no_one_without_the_lock(tmp_path: Path) -> None:
    target = tmp_path / "out.ipynb"
    stale = tmp_path / ".out.ipynb.claim"
    stale.write_text(json.dumps({"pid": os.getppid(), "what": "a replay of x.ipynb"}))
    with claims.claim(target, "me", "wait") as taken:
        assert json.loads(taken.file.read_text())["pid"] == os.getpid()


def test_an_unreadable_record_still_refuses_and_says_so(tmp_path: Path) -> None:
    target = tmp_path / "out.ipynb"
    with claims.claim(target, "me", "wait") as held:
        os.truncate(held.file, 0)
        with pytest.raises(SessionConflict, match="another process \\(pid unknown\\)"):
            claims.claim(target, "you", "wait")


def test_a_missing_folder_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        claims.claim(tmp_path / "nowhere" / "out.ipynb", "me", "wait")


@pytest.mark.parametrize(
    ("name", "expected"),
    [(".a.ipynb.claim", True), (".claim", False), ("a.claim", False), (".a.ipynb", False)],
)
def test_claim_names(name: str, expected: bool) -> None:
    assert claims.is_claim_name(name) is expected
    assert claims.is_claim_name(claims.claim_name("a.ipynb"))


def test_a_folder_at_the_claims_name_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".out.ipynb.claim").mkdir()
    with pytest.raises(StorageError, match="it is a folder"):
        claims.claim(tmp_path / "out.ipynb", "me", "wait")


def test_held_within_finds_live_claims_deep_inside_and_nothing_else(tmp_path: Path) -> None:
    top = tmp_path / "run"
    deep = top / "a" / "b"
    deep.mkdir(parents=True)
    (top / ".stale.ipynb.claim").write_text("{}")  # left by an owner that ended
    os.mkfifo(top / ".fifo.ipynb.claim")  # never opened, so never waited on
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, top / "link")  # never followed
    with claims.claim(elsewhere / "x.ipynb", "me", "wait"):
        assert claims.held_within(top) == []
        with claims.claim(deep / "out.ipynb", "me", "wait"):
            assert claims.held_within(top) == [deep / "out.ipynb"]
        assert claims.held_within(top) == []
    assert claims.held_within(tmp_path / "missing") == []


def test_two_spellings_of_one_path_are_one_claim(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    os.symlink(tmp_path, tmp_path / "here")
    with claims.claim(tmp_path / "out.ipynb", "me", "wait"):
        for other in (tmp_path / "a" / ".." / "out.ipynb", tmp_path / "here" / "out.ipynb"):
            with pytest.raises(SessionConflict, match="is taken: me"):
                claims.claim(other, "you", "wait")
    with pytest.raises(StorageError, match="a claim file goes beside it"):
        claims.claim("/", "me", "wait")
