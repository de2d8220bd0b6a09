"""Session names and derived file names: what is refused, and why the message says so."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from jupyter_exec import InvalidArgument
from jupyter_exec.boundary.naming import (
    check_text,
    default_session_name,
    files_folder,
    output_file_name,
    safe_name,
    validate_name,
)


@pytest.mark.parametrize("name", ["a", "analysis-1", "run_2.v3", "X" * 100])
def test_plain_names_are_accepted(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "empty"),
        ("x" * 101, "at most 100"),
        ("a/b", "path"),
        ("a\\b", "path"),
        ("..", "path"),
        ("name\n", "control character (U+000A)"),
        ("tab\there", "control character (U+0009)"),
        ("evil\u202egpj.py", "bidirectional control character (U+202E)"),
        ("iso\u2066late", "bidirectional control character (U+2066)"),
        ("mark\u200f", "bidirectional control character (U+200F)"),
        ("half\ud800", "lone surrogate (U+D800)"),
        ("-dash-first", "starting with a letter or digit"),
        ("space name", "use letters, digits"),
    ],
)
def test_bad_names_are_refused_with_what_to_fix(name: str, says: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_name(name)
    assert says in str(info.value)
    assert isinstance(info.value, ValueError)  # InvalidArgument is also a ValueError


def test_a_name_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="must be a str"):
        validate_name(3)  # type: ignore[arg-type]


def test_check_text_allows_newlines_only_when_asked() -> None:
    assert check_text("a\nb\tc", "code", allow_newlines=True) == "a\nb\tc"
    with pytest.raises(InvalidArgument, match="position 1"):
        check_text("a\nb", "the folder")
    with pytest.raises(InvalidArgument, match="lone surrogate"):
        check_text("x = '\udcff'", "code", allow_newlines=True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("my notebook", "my-notebook"), ("évier", "vier"), ("...", "session"), ("a\u202eb", "a-b")],
)
def test_safe_name_makes_a_valid_name(text: str, expected: str) -> None:
    made = safe_name(text)
    assert made == expected
    assert validate_name(made) == made


def test_default_name_numbers_on_past_taken_ones(tmp_path: Path) -> None:
    now = datetime(2026, 1, 2, 3, 4, 5)
    first = default_session_name(tmp_path, now=now)
    assert first == "session-20260102-030405"
    (tmp_path / files_folder(first)).mkdir()
    assert default_session_name(tmp_path, now=now) == f"{first}-2"
    taken = {f"{first}-2"}
    assert default_session_name(tmp_path, now=now, taken=taken.__contains__) == f"{first}-3"


def test_output_file_names_count_cells_from_one() -> None:
    assert output_file_name(0, "1", ".png") == "cell-001-1.png"
    assert output_file_name(41, "stdout", ".txt") == "cell-042-stdout.txt"
