"""A replay owns its output (the replayed notebook and its run folder) while it runs.

Two replays to one output would share the run folder: the second would wipe it under the
first's kernel, and both would write the notebook. The replay claims the output first
(:func:`jupyter_exec.notebook.inputs.claim_outputs`), a second one is refused naming the
first, and the claim goes when the replay ends, however it ends.
"""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec import NotebookError, Session, SessionConflict, replay
from jupyter_exec.boundary.claims import is_claim_name
from jupyter_exec.notebook import inputs
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


class _Background:
    """A replay run in a thread of this process (its report or error kept)."""

    def __init__(self, held: Held, **kwargs: Any) -> None:
        self.report: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(held, kwargs), daemon=True)
        self.thread.start()

    def _run(self, held: Held, kwargs: dict[str, Any]) -> None:
        try:
            self.report = replay(held.notebook, timeout=300, **kwargs)
        except BaseException as exc:  # kept for the test to look at
            self.error = exc

    def result(self) -> Any:
        self.thread.join(300)
        assert not self.thread.is_alive(), "the replay did not end"
        if self.error is not None:
            raise self.error
        return self.report


def test_a_second_replay_to_the_same_output_is_refused_while_the_first_runs(
    tmp_path: Path,
) -> None:
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    output = held.notebook.with_name("held.replayed.ipynb")
    first = _Background(held)
    try:
        wait_for(held.started.exists, "the first replay's first cell")
        assert claim_file(output).is_file()
        run = held.kernel_folder()
        assert run == output.with_name("held.replayed_work")

        with pytest.raises(SessionConflict) as refused:
            replay(held.notebook, timeout=60)
        message = str(refused.value)
        assert "a replay of held.ipynb (pid " in message
        assert "wait for it to end, or record this replay elsewhere" in message
        # Another output, but the first's run folder as the work dir: refused as well.
        with pytest.raises(SessionConflict, match=rf"^{re.escape(str(run))} is taken: a"):
            replay(held.notebook, work_dir=run, output=tmp_path / "b.ipynb", timeout=60)
        assert held.kernel_folder() == run
        assert sorted(p.name for p in run.iterdir()) == ["data.csv", "held.ipynb"]  # not wiped
    finally:
        held.release()
    report = first.result()
    assert report.reproduced, report.to_markdown()
    assert (run / "made_by_cell.txt").read_text() == "x"
    assert valid(output).metadata["jupyter_exec"]["replay"]["reproduced"] is True
    assert not claim_file(output).exists()  # released: the next replay may run
    assert not any(is_claim_name(p.name) for p in run.rglob("*"))


def test_a_replay_given_a_running_replays_folder_as_its_work_dir_is_refused(
    tmp_path: Path,
) -> None:
    """Two outputs, one folder: the run folder is claimed as itself, not only through the
    notebook it belongs to."""
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    shared = tmp_path / "scratch"
    first = _Background(held, work_dir=shared, output=tmp_path / "a.ipynb")
    try:
        wait_for(held.started.exists, "the first replay's first cell")
        assert held.kernel_folder() == shared
        with pytest.raises(SessionConflict, match=rf"^{re.escape(str(shared))} is taken: a"):
            replay(held.notebook, work_dir=shared, output=tmp_path / "b.ipynb", timeout=60)
        assert sorted(p.name for p in shared.iterdir()) == ["data.csv", "held.ipynb"]
        assert not (tmp_path / "b.ipynb").exists()
    finally:
        held.release()
    assert first.result().reproduced


def test_with_two_runs_the_second_record_is_claimed_too(tmp_path: Path) -> None:
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    first = _Background(held, runs=2)
    try:
        wait_for(held.started.exists, "the first replay's first cell")
        second_record = held.notebook.with_name("held.replayed-run2.ipynb")
        with pytest.raises(SessionConflict, match=r"held\.replayed-run2\.ipynb is taken"):
            replay(held.notebook, output=second_record, timeout=60)
    finally:
        held.release()
    assert first.result().reproduced


def test_a_run_folder_holding_another_live_replays_output_is_not_removed(tmp_path: Path) -> None:
    """One replay's output put inside another's run folder: the other's next replay would
    wipe that folder, and the first replay's notebook and folder with it."""
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    run = held.notebook.with_name("held.replayed_work")
    inner = run / "inner.ipynb"
    first = _Background(held, output=inner)
    try:
        wait_for(held.started.exists, "the first replay's first cell")
        with pytest.raises(SessionConflict, match=r"holds .*inner\.ipynb, which another run"):
            replay(held.notebook, timeout=60)
        assert held.kernel_folder() == run / "inner_work"
        assert (run / "inner_work" / "data.csv").is_file()
    finally:
        held.release()
    assert first.result().reproduced
    valid(inner)


def test_the_claim_is_released_when_the_replay_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    output = held.notebook.with_name("held.replayed.ipynb")
    monkeypatch.setattr(inputs, "MAX_INPUT_FILES", 0)  # fails after the claim, before a kernel
    with pytest.raises(NotebookError, match="too much to copy"):
        replay(held.notebook, timeout=60)
    assert not claim_file(output).exists()
    monkeypatch.undo()
    held.release()
    assert replay(held.notebook, timeout=120).reproduced


def test_a_sigterm_ends_the_replay_and_gives_its_output_back(tmp_path: Path) -> None:
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    output = held.notebook.with_name("held.replayed.ipynb")
    process = start_replay(str(held.notebook), "--timeout", "300", "--quiet")
    try:
        wait_for(held.started.exists, "the replay's first cell")
        assert claim_file(output).is_file()
        process.send_signal(signal.SIGTERM)
        status, _, err = finish(process)
    finally:
        kill_quietly(process.pid)
        if held.started.exists():
            kill_quietly(held.kernel_pid())
    assert status == 128 + signal.SIGTERM, err
    assert not claim_file(output).exists()
    held.release()
    assert replay(held.notebook, timeout=120).reproduced


def test_an_output_in_the_recordings_own_folder_leaves_that_folder_as_it_was(
    tmp_path: Path,
) -> None:
    """The default output lies in the notebook's own folder: its claim file is there while
    the replay runs, and is neither copied into the run folder nor left behind."""
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    before = sorted(p.name for p in held.notebook.parent.iterdir())
    held.release()
    report = replay(held.notebook, timeout=120)
    assert report.reproduced
    after = sorted(p.name for p in held.notebook.parent.iterdir())
    assert after == sorted([*before, "held.replayed.ipynb", "held.replayed_work"])
    assert report.work_dir is not None
    assert sorted(p.name for p in report.work_dir.iterdir()) == [
        "data.csv",
        "held.ipynb",
        "made_by_cell.txt",
    ]


def test_a_replay_to_the_notebook_of_a_live_session_in_this_process_is_refused(
    tmp_path: Path,
) -> None:
    held = held_notebook(tmp_path / "project", tmp_path / "control")
    held.release()
    live = tmp_path / "live"
    with Session(work_dir=live, name="agent", timeout=60) as session:
        session.execute("x = 1")
        with pytest.raises(SessionConflict, match="live session 'agent'"):
            replay(held.notebook, output=session.notebook_path, timeout=60)
        assert valid(live / "agent.ipynb").cells[0].source == "x = 1"
