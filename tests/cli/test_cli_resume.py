"""``jupyter-exec run --resume NOTEBOOK [FILE]``: a recorded session carries on, in real processes.

One ``run`` records a session; the next resumes its notebook, so the state it left
(``x = 41``) is back (``x + 1 == 42``) and the new cells are appended to the same
notebook. A missing, mistyped or damaged notebook stops the run with one line and
exit status 2 before any kernel starts or any cell runs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jupyter_exec.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from tests.cli_helpers import run_cli
from tests.conftest import read_valid_notebook

pytestmark = pytest.mark.timeout(300)

SIDE_EFFECT = "open('ran.txt', 'w').write('the file ran')\n"


def cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*argv, cwd=cwd)


def sources(notebook: Path) -> list[str]:
    return [c.source for c in read_valid_notebook(notebook).cells if c.cell_type == "code"]


@pytest.mark.parametrize(
    ("saving", "rerun"),
    [([], "0 recorded cell(s) re-run"), (["--no-save-state"], "1 recorded cell(s) re-run")],
    ids=["from-the-saved-state", "by-re-running"],
)
def test_a_run_resumes_the_state_an_earlier_run_recorded(
    tmp_path: Path, saving: list[str], rerun: str
) -> None:
    (tmp_path / "first.py").write_text("x = 41\n")
    (tmp_path / "next.py").write_text("print('answer', x + 1)\n")
    first = cli("run", "first.py", *saving, "--work-dir", "out", "--name", "job", cwd=tmp_path)
    assert first.returncode == EXIT_OK, first.stderr
    notebook = tmp_path / "out" / "job.ipynb"

    second = cli("run", "next.py", "--resume", str(notebook), cwd=tmp_path)

    assert second.returncode == EXIT_OK, second.stderr
    assert "answer 42" in second.stdout
    assert rerun in second.stderr
    assert sources(notebook) == ["x = 41\n", "print('answer', x + 1)\n"]  # one record, extended
    counts = [c.execution_count for c in read_valid_notebook(notebook).cells]
    assert counts == [1, 2]  # numbering goes on


def test_resume_without_a_file_only_rebuilds_the_state_and_says_when_it_did_not(
    tmp_path: Path,
) -> None:
    (tmp_path / "first.py").write_text("x = 1\n# %%\nimport no_such_module_here\n")
    first = cli("run", "first.py", "-k", "--work-dir", "out", "--name", "job", cwd=tmp_path)
    assert first.returncode == EXIT_FAILED
    notebook = tmp_path / "out" / "job.ipynb"
    before = notebook.read_bytes()

    again = cli("run", "--resume", str(notebook), cwd=tmp_path)

    assert again.returncode == EXIT_FAILED, again.stderr  # the import fails again on re-run
    assert "failed again: cell(s) 2" in again.stderr
    assert sources(notebook) == sources_of(before, tmp_path)  # no cell added


def sources_of(data: bytes, tmp_path: Path) -> list[str]:
    copy = tmp_path / "copy.ipynb"
    copy.write_bytes(data)
    return sources(copy)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("missing.ipynb", "no such notebook"),
        ("notes.txt", "a session's record is a .ipynb notebook"),
        ("broken.ipynb", "not valid JSON"),
        ("", "--resume is empty"),
    ],
)
def test_a_notebook_that_cannot_be_resumed_stops_the_run_before_any_cell(
    tmp_path: Path, given: str, said: str
) -> None:
    (tmp_path / "broken.ipynb").write_text("{not json")
    (tmp_path / "notes.txt").write_text("x = 1\n")
    (tmp_path / "next.py").write_text(SIDE_EFFECT)

    result = cli("run", "next.py", "--resume", given, cwd=tmp_path)

    assert result.returncode == EXIT_USAGE, result.stderr
    assert said in result.stderr
    assert result.stderr.count("\n") == 1  # one line, no traceback
    assert not (tmp_path / "ran.txt").exists()


def test_resume_and_restore_together_are_refused(tmp_path: Path) -> None:
    (tmp_path / "first.py").write_text("x = 41\n")
    assert cli("run", "first.py", "--work-dir", "out", cwd=tmp_path).returncode == EXIT_OK
    result = cli("run", "--resume", "out/first.ipynb", "--restore", "somewhere/cp", cwd=tmp_path)
    assert result.returncode == EXIT_USAGE
    assert "give one of them" in result.stderr


def test_run_without_a_file_or_resume_says_what_to_give(tmp_path: Path) -> None:
    result = cli("run", cwd=tmp_path)
    assert result.returncode == EXIT_USAGE
    assert "give a FILE to run, or --resume NOTEBOOK" in result.stderr


def test_run_help_teaches_resume(tmp_path: Path) -> None:
    result = cli("run", "--help", cwd=tmp_path)
    assert result.returncode == EXIT_OK
    assert "--resume NOTEBOOK" in result.stdout
    assert "jupyter-exec run next.py --resume out/job.ipynb" in result.stdout
