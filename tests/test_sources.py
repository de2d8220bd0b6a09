"""Reading scripts and notebooks: every malformed file is our error, saying what to fix."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from jupyter_exec.engine.sources import MAX_JSON_DEPTH, check_text, read_notebook, read_source
from jupyter_exec.exceptions import InvalidArgument, NotebookError


def test_pep_263_declaration_is_honoured(tmp_path: Path) -> None:
    path = tmp_path / "legacy.py"
    path.write_bytes("# -*- coding: cp1252 -*-\nprice = '\u20ac5'\n".encode("cp1252"))
    assert "\u20ac5" in read_source(path)


def test_utf8_bom_is_dropped(tmp_path: Path) -> None:
    for name in ("bom.py", "bom.md"):
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbfprint(1)\n")
        assert read_source(path) == "print(1)\n"


def test_a_bad_byte_is_named_with_its_place(tmp_path: Path) -> None:
    path = tmp_path / "bad.md"
    path.write_bytes(b"line one\nab\xffcd\n")
    with pytest.raises(InvalidArgument, match=r"byte 0xff at offset 11 \(line 2, column 3\)"):
        read_source(path)


def test_the_declared_encoding_is_used_to_judge(tmp_path: Path) -> None:
    path = tmp_path / "ascii.py"
    path.write_bytes(b"# coding: ascii\nx = '\xc3\xa9'\n")
    with pytest.raises(InvalidArgument, match="not valid ascii: byte 0xc3"):
        read_source(path)


def test_lone_surrogates_are_refused_with_their_position() -> None:
    with pytest.raises(InvalidArgument, match="U\\+DC80 at character 6 \\(line 2\\)"):
        check_text("a = 1\n\udc80", "cell")
    assert check_text("a pair: \U0001f600", "cell") == "a pair: \U0001f600"


def test_nesting_past_the_limit_is_refused_without_recursion(tmp_path: Path) -> None:
    path = tmp_path / "deep.ipynb"
    body = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
    text = json.dumps(body)[:-1] + ', "x": ' + "[" * 500_000 + "]" * 500_000 + "}"
    path.write_text(text)
    with pytest.raises(NotebookError, match=f"more than {MAX_JSON_DEPTH} deep"):
        read_notebook(path)


def test_brackets_inside_strings_do_not_count(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = " + "[" * 200 + "]" * 200 + "  # '\\\"[[[")]
    path = tmp_path / "fine.ipynb"
    nbformat.write(nb, path)
    assert read_notebook(path).cells[0].source.startswith("x = [[[")


def test_v3_is_upgraded(tmp_path: Path) -> None:
    data = Path(__file__).parent / "data" / "v3.ipynb"
    assert read_notebook(data).nbformat == 4


def test_cells_without_ids_get_them_as_nbformat_gives_them(tmp_path: Path) -> None:
    path = tmp_path / "old-tool.ipynb"
    cell = {
        "cell_type": "code",
        "source": "1",
        "metadata": {},
        "outputs": [],
        "execution_count": None,
    }
    body = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell]}
    path.write_text(json.dumps(body))
    nb = read_notebook(path)  # no MissingIDFieldWarning: pytest makes warnings errors
    assert nb.cells[0].id
