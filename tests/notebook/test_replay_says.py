"""Replay says what it does: a notebook in another language is refused with ``--python``
instead of run silently in Python, and per-cell kernel state is written only when asked."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_exec import NotebookError, replay
from jupyter_exec.cli import build_parser
from tests.cli_helpers import run_cli


def _notebook(path: Path, metadata: dict[str, Any], source: str) -> Path:
    nb = nbformat.v4.new_notebook(metadata=metadata)
    cell = nbformat.v4.new_code_cell(source, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hi\n")]
    nb.cells = [cell]
    nbformat.write(nb, path)
    return path


FOREIGN = {
    "bash (kernelspec)": {
        "kernelspec": {"name": "bash", "display_name": "Bash", "language": "bash"},
        "language_info": {"name": "bash"},
    },
    "R (language_info only)": {"language_info": {"name": "R"}},
    "R (kernelspec name only)": {"kernelspec": {"name": "ir", "display_name": "R"}},
}


@pytest.mark.parametrize("metadata", FOREIGN.values(), ids=FOREIGN.keys())
def test_a_notebook_in_another_language_is_refused_with_python(
    tmp_path: Path, metadata: dict[str, Any]
) -> None:
    path = _notebook(tmp_path / "other.ipynb", metadata, 'echo "hi"')
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(NotebookError, match=r"the notebook is in (bash|R) \(.*run Python"):
        replay(path, python=sys.executable, timeout=30)
    with pytest.raises(NotebookError, match="run Python"):
        replay(path, environment="python", timeout=30)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no kernel, no record


def test_the_cli_refuses_it_with_exit_2(tmp_path: Path) -> None:
    path = _notebook(tmp_path / "script.ipynb", FOREIGN["bash (kernelspec)"], 'echo "hi"')
    done = run_cli("replay", str(path), "--python", sys.executable, "-q")
    assert done.returncode == 2, done.stderr
    assert "the notebook is in bash (" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "script.replayed.ipynb").exists()


def test_a_python_notebook_still_replays_with_python(tmp_path: Path) -> None:
    metadata = {"kernelspec": {"name": "python3", "language": "python", "display_name": "P"}}
    path = _notebook(tmp_path / "py.ipynb", metadata, "print('hi')")
    report = replay(path, python=sys.executable, timeout=60)
    assert [c.status for c in report.cells] == ["same"]


def _state_folders(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*_state") if p.is_dir())


def test_a_replay_writes_per_cell_state_only_when_asked(tmp_path: Path) -> None:
    metadata = {"kernelspec": {"name": "python3", "language": "python", "display_name": "P"}}
    path = _notebook(tmp_path / "calc.ipynb", metadata, "x = 21 * 2\nprint('hi')")
    report = replay(path, timeout=60)
    assert report.reproduced
    assert _state_folders(tmp_path) == []
    assert not list(tmp_path.rglob(".*_checkpoints"))

    asked = replay(path, timeout=60, save_state=True)
    assert asked.reproduced
    assert asked.work_dir is not None
    found = _state_folders(tmp_path)
    assert len(found) == 1
    state = tmp_path / found[0]
    assert state.parent == asked.work_dir
    assert any(state.glob("gen-*.json"))


def test_the_switch_is_save_state_on_the_command_line_and_off_unless_said() -> None:
    parser = build_parser()
    assert parser.parse_args(["replay", "nb.ipynb"]).save_state is None  # the replay's own: off
    assert parser.parse_args(["replay", "nb.ipynb", "--save-state"]).save_state is True
    assert parser.parse_args(["replay", "nb.ipynb", "--no-save-state"]).save_state is False
    done = run_cli("replay", "--help")
    assert "--save-state" in done.stdout
    assert "off for a replay" in " ".join(done.stdout.split())  # and says it is off
