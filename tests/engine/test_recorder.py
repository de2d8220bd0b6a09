"""The session notebook recorder: valid nbformat v4, nbformat's own layout, atomic saves."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest

import jupyter_exec.engine.recorder as recorder_module
from jupyter_exec import NotebookError
from jupyter_exec.boundary.paths import Folder
from jupyter_exec.engine.recorder import NotebookRecorder, new_cell_id

ReadNotebook = Callable[[Path], nbformat.NotebookNode]

METADATA = {
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python", "version": "3.11.0", "file_extension": ".py"},
}


def code_cell(n: int, outputs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "id": new_cell_id(),
        "execution_count": n,
        "metadata": {"execution": {"iopub.status.busy": "2026-01-01T00:00:00Z"}},
        "outputs": outputs or [],
        "source": f"x = {n}\nprint(x)",
    }


RICH_OUTPUTS: list[dict[str, Any]] = [
    {"output_type": "stream", "name": "stdout", "text": "line 1\nline 2\n"},
    {"output_type": "stream", "name": "stderr", "text": "warn é ü\n"},
    {
        "output_type": "display_data",
        "data": {
            "text/plain": "<Figure>\nsecond line",
            "image/png": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8",
            "image/svg+xml": "<svg>\n</svg>",
            "application/json": {"a": [1, 2, {"b": None}]},
            "application/vnd.plotly.v1+json": {"data": [{"x": [1]}]},
        },
        "metadata": {"image/png": {"width": 10}},
    },
    {
        "output_type": "execute_result",
        "data": {"text/plain": "6", "text/html": "<b>6</b>"},
        "metadata": {},
        "execution_count": 2,
    },
    {
        "output_type": "error",
        "ename": "ZeroDivisionError",
        "evalue": "division by zero",
        "traceback": ["\x1b[31m---\x1b[0m", "ZeroDivisionError: division by zero"],
    },
]


def test_empty_notebook_is_valid_and_laid_out_like_nbformat(
    read_notebook: ReadNotebook, tmp_path: Path
) -> None:
    path = tmp_path / "s.ipynb"
    NotebookRecorder(path, METADATA).save()
    nb = read_notebook(path)
    assert nb.cells == []
    assert nb.metadata == METADATA
    assert nb.nbformat_minor >= 5  # cell ids are allowed
    assert path.read_text(encoding="utf-8") == nbformat.writes(nb) + "\n"


def test_notebook_is_valid_after_every_append(read_notebook: ReadNotebook, tmp_path: Path) -> None:
    path = tmp_path / "s.ipynb"
    rec = NotebookRecorder(path, METADATA)
    for n, outputs in enumerate([[], RICH_OUTPUTS[:1], RICH_OUTPUTS, []], start=1):
        index = rec.append(code_cell(n, [dict(o) for o in outputs]))
        assert index == n - 1
        nb = read_notebook(path)
        assert len(nb.cells) == n
        assert nb.cells[-1].execution_count == n
        assert nb.cells[-1].source == f"x = {n}\nprint(x)"
    assert len(rec) == 4


def test_layout_equals_nbformat_write(tmp_path: Path) -> None:
    """Byte for byte what nbformat.write would produce, so recordings diff well in git."""
    path = tmp_path / "s.ipynb"
    rec = NotebookRecorder(path, METADATA)
    rec.append(code_cell(1, [dict(o) for o in RICH_OUTPUTS]))
    rec.append(code_cell(2))
    on_disk = path.read_text(encoding="utf-8")
    nb = nbformat.reads(on_disk, as_version=4)
    assert on_disk == nbformat.writes(nb) + "\n"
    # And the notebook reads back to exactly the cells we gave it.
    assert nb.cells[0].outputs[2].data["image/png"] == RICH_OUTPUTS[2]["data"]["image/png"]
    assert nb.cells[0].outputs[2].data["application/json"] == {"a": [1, 2, {"b": None}]}
    assert nb.cells[0].outputs[1].text == "warn é ü\n"
    assert rec.notebook() == nb


def test_notebook_node_is_a_valid_copy(tmp_path: Path) -> None:
    rec = NotebookRecorder(tmp_path / "s.ipynb", METADATA, [code_cell(1, [dict(RICH_OUTPUTS[0])])])
    nb = rec.notebook()
    nbformat.validate(nb)
    nb.cells[0].source = "changed"
    assert rec.cells[0]["source"] == "x = 1\nprint(x)"


def test_refresh_reserialises_a_cell_changed_in_place(
    read_notebook: ReadNotebook, tmp_path: Path
) -> None:
    path = tmp_path / "s.ipynb"
    rec = NotebookRecorder(path, METADATA)
    display = {"output_type": "display_data", "data": {"text/plain": "v1"}, "metadata": {}}
    rec.append(code_cell(1, [display]))
    rec.append(code_cell(2))
    display["data"] = {"text/plain": "v2"}  # e.g. update_display_data from a later cell
    rec.save()
    # The cached JSON is what is written: without refresh the file still says v1.
    assert read_notebook(path).cells[0].outputs[0].data["text/plain"] == "v1"
    rec.refresh(0)
    assert read_notebook(path).cells[0].outputs[0].data["text/plain"] == "v2"


def test_replace_and_set_metadata(read_notebook: ReadNotebook, tmp_path: Path) -> None:
    path = tmp_path / "s.ipynb"
    rec = NotebookRecorder(path, METADATA)
    rec.append(code_cell(1))
    rec.replace(0, code_cell(5))
    rec.set_metadata("jupyter_exec", {"session": "s"})
    rec.save()
    nb = read_notebook(path)
    assert nb.cells[0].execution_count == 5
    assert nb.metadata.jupyter_exec == {"session": "s"}


def test_each_cell_is_serialised_once_so_cost_does_not_grow(
    read_notebook: ReadNotebook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = NotebookRecorder(tmp_path / "s.ipynb", METADATA)
    for n in range(1000):
        rec.append(code_cell(n, [dict(RICH_OUTPUTS[0])]), save=False)
    rec.save()
    calls: list[Any] = []
    real = recorder_module._dumps

    def counting(obj: Any, indent: str) -> str:
        calls.append(obj)
        return real(obj, indent)

    monkeypatch.setattr(recorder_module, "_dumps", counting)
    rec.append(code_cell(1000))
    # The new cell, plus at most the (small) notebook metadata: never the 1,000 old cells.
    assert len(calls) <= 2
    assert any(c.get("execution_count") == 1000 for c in calls if "cell_type" in c)
    assert len(read_notebook(tmp_path / "s.ipynb").cells) == 1001


# -- atomic saves ------------------------------------------------------------------------


def _recorder_with_two_cells(path: Path) -> NotebookRecorder:
    rec = NotebookRecorder(path, METADATA)
    rec.append(code_cell(1))
    rec.append(code_cell(2))
    return rec


def test_failed_write_leaves_the_previous_file_valid(
    read_notebook: ReadNotebook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk filling up halfway through a save must not corrupt the notebook."""
    path = tmp_path / "s.ipynb"
    rec = _recorder_with_two_cells(path)
    before = path.read_bytes()
    real_writev = os.writev
    calls: list[int] = []

    def half_then_full(fd: int, buffers: Any) -> int:
        if calls:  # the disk is full now
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        calls.append(fd)
        data = b"".join(bytes(b) for b in buffers)
        return real_writev(fd, [data[: len(data) // 2]])  # a short write, then ENOSPC

    monkeypatch.setattr(recorder_module.os, "writev", half_then_full)
    with pytest.raises(NotebookError) as info:
        rec.append(code_cell(3))
    message = str(info.value)
    assert str(path) in message
    assert os.strerror(errno.ENOSPC) in message
    assert "previous 2 cell(s)" in message
    assert path.read_bytes() == before
    assert len(read_notebook(path).cells) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["s.ipynb"]  # temp file removed
    # The unsaved cell is kept and goes out with the next successful save.
    monkeypatch.undo()
    rec.append(code_cell(4))
    assert [c.execution_count for c in read_notebook(path).cells] == [1, 2, 3, 4]


def test_unwritable_temp_file_raises_notebook_error(
    read_notebook: ReadNotebook, tmp_path: Path
) -> None:
    path = tmp_path / "s.ipynb"
    rec = _recorder_with_two_cells(path)
    before = path.read_bytes()
    # Something that cannot be opened for writing sits where the spare (temp) file goes.
    rec.spare_path.unlink(missing_ok=True)
    rec.spare_path.mkdir()
    with pytest.raises(NotebookError, match="could not save the session notebook"):
        rec.append(code_cell(3))
    assert path.read_bytes() == before
    read_notebook(path)


def _make_unwritable(folder: Path) -> Callable[[], None]:
    """Make ``folder`` refuse new entries; returns the undo.

    An ordinary user gets mode 0555. Root ignores modes, so for root the folder
    is made immutable (``chattr +i``), which root cannot write through either.
    """
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return lambda: folder.chmod(0o755)
    subprocess.run(["chattr", "+i", str(folder)], check=True, capture_output=True)
    return lambda: subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_unwritable_folder_raises_notebook_error_and_keeps_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "s.ipynb"
    rec = _recorder_with_two_cells(path)
    rec.close()  # no spare either: the next save must create a file in the folder
    before = path.read_bytes()
    undo = _make_unwritable(folder)
    try:
        with pytest.raises(NotebookError, match=r"Permission denied|Operation not permitted"):
            rec.append(code_cell(3))
    finally:
        undo()
    assert path.read_bytes() == before
    rec.append(code_cell(4))  # writable again: the kept cell goes out too
    assert [c["execution_count"] for c in rec.cells] == [1, 2, 3, 4]


def test_vanished_folder_raises_notebook_error_naming_the_problem(tmp_path: Path) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    path = folder / "s.ipynb"
    rec = _recorder_with_two_cells(path)
    shutil.rmtree(folder)
    with pytest.raises(NotebookError) as info:
        rec.append(code_cell(3))
    assert str(path) in str(info.value)
    assert "No such file or directory" in str(info.value)
    assert isinstance(info.value.__cause__, OSError)


# -- saves that do not grow with the notebook ---------------------------------------------


def _counting_writev(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many bytes each ``os.writev`` call of the recorder writes."""
    written: list[int] = []
    real = os.writev

    def counting(fd: int, buffers: Any) -> int:
        n = real(fd, buffers)
        written.append(n)
        return n

    monkeypatch.setattr(recorder_module.os, "writev", counting)
    return written


def test_a_save_at_cell_1000_writes_only_the_new_cell(
    read_notebook: ReadNotebook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cost per save is flat: bytes written do not depend on the notebook's length."""
    path = tmp_path / "s.ipynb"
    rec = NotebookRecorder(path, METADATA)
    for n in range(1000):
        rec.append(code_cell(n, [dict(RICH_OUTPUTS[0])]), save=n % 100 == 0)
    rec.save()
    rec.append(code_cell(1000))  # the spare now holds the previous version
    size = path.stat().st_size
    written = _counting_writev(monkeypatch)
    for n in range(1001, 1011):
        rec.append(code_cell(n, [dict(RICH_OUTPUTS[0])]))
    per_save = sum(written) / 10
    assert per_save < 3_000 < size / 50  # one cell and the metadata, not the ~200 KB file
    assert path.read_text() == rec.render()
    assert len(read_notebook(path).cells) == 1011


def test_patched_saves_always_equal_a_full_render(
    read_notebook: ReadNotebook, tmp_path: Path
) -> None:
    path = tmp_path / "s.ipynb"
    rec = NotebookRecorder(path, METADATA)
    for n in range(30):
        rec.append(code_cell(n, [dict(o) for o in RICH_OUTPUTS[: n % 3]]))
        if n % 7 == 3:  # an earlier cell changes (a display update): a full write
            rec.cells[n // 2]["outputs"] = [dict(RICH_OUTPUTS[1])]
            rec.refresh(n // 2)
        if n % 5 == 0:  # metadata changes ride along with the tail
            rec.set_metadata("jupyter_exec", {"session": "s", "n": n})
            rec.save()
        assert path.read_text() == rec.render()
    nb = read_notebook(path)
    assert [c.execution_count for c in nb.cells] == list(range(30))
    assert rec.spare_path.name == ".s.ipynb.jx-tmp"  # hidden, beside the notebook
    rec.close()
    assert not rec.spare_path.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["s.ipynb"]


def test_a_notebook_replaced_by_someone_else_is_never_patched(
    read_notebook: ReadNotebook, tmp_path: Path
) -> None:
    """A person saving the file (temp + rename, as jupyter_server does) between our saves:
    the file we swap out is theirs, so it must not be patched as if it were ours."""
    path = tmp_path / "s.ipynb"
    rec = NotebookRecorder(path, METADATA)
    for n in range(3):
        rec.append(code_cell(n))
    theirs = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("x" * 5000)])
    (tmp_path / "theirs.ipynb").write_text(nbformat.writes(theirs))
    os.replace(tmp_path / "theirs.ipynb", path)
    for n in range(3, 6):
        rec.append(code_cell(n))
        assert path.read_text() == rec.render()
    assert [c.execution_count for c in read_notebook(path).cells] == list(range(6))


def test_without_an_atomic_exchange_saves_fall_back_to_replace(
    read_notebook: ReadNotebook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Folder, "exchange", lambda self, a, b: False)
    path = tmp_path / "s.ipynb"
    rec = NotebookRecorder(path, METADATA)
    for n in range(5):
        rec.append(code_cell(n))
        assert path.read_text() == rec.render()
    assert not rec.spare_path.exists()  # renamed over the notebook each time
    assert len(read_notebook(path).cells) == 5


def test_a_removed_spare_only_costs_one_full_write(
    read_notebook: ReadNotebook, tmp_path: Path
) -> None:
    path = tmp_path / "s.ipynb"
    rec = NotebookRecorder(path, METADATA)
    for n in range(4):
        rec.append(code_cell(n))
    rec.spare_path.unlink()  # a cleanup tool, a person tidying hidden files...
    rec.append(code_cell(4))
    rec.append(code_cell(5))
    assert path.read_text() == rec.render()
    assert [c.execution_count for c in read_notebook(path).cells] == list(range(6))
