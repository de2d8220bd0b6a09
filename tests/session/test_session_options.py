"""SessionOptions: one typed, validated home for every session option."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from jupyter_exec import AsyncSession, InvalidArgument, SessionOptions
from jupyter_exec.options import DEFAULT_TIMEOUT, option_fields, options_from


class _PathLike:
    def __init__(self, path: str) -> None:
        self._path = path

    def __fspath__(self) -> str:
        return self._path


def test_defaults() -> None:
    options = SessionOptions()
    assert options.timeout == DEFAULT_TIMEOUT
    assert options.backend == "local"
    assert options.docker == {}
    assert options.shuts_down_kernel


def test_every_path_takes_pathlike(tmp_path: Path) -> None:
    options = SessionOptions(
        work_dir=_PathLike(str(tmp_path)),  # type: ignore[arg-type]
        notebook=PurePosixPath(tmp_path / "n.ipynb"),  # type: ignore[arg-type]
        python=_PathLike("/usr/bin/python3"),  # type: ignore[arg-type]
    )
    assert options.work_dir == tmp_path
    assert options.notebook == tmp_path / "n.ipynb"
    assert options.python == "/usr/bin/python3"
    assert SessionOptions(notebook=False).notebook is False


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"backend": "cloud"}, "unknown backend 'cloud'"),
        ({"backend": "remote"}, "needs url="),
        ({"timeout": 0}, "timeout must be > 0"),
        ({"timeout": -1}, "timeout must be > 0"),
        ({"timeout": math.nan}, "timeout must be > 0"),
        ({"timeout": "10"}, "number of seconds"),
        ({"interrupt_grace": -0.5}, "interrupt_grace must be >= 0"),
        ({"startup_timeout": True}, "number of seconds"),
        ({"max_output_chars": -1}, "max_output_chars must be >= 0"),
        ({"max_output_chars": 1.5}, "whole number"),
        ({"name": "a/b"}, "session name"),
        ({"work_dir": ""}, "work_dir is empty"),
        ({"work_dir": 3}, "must be a path"),
        ({"work_dir": "dir\u202eevil"}, "bidirectional control character"),
        ({"docker": ["image"]}, "docker must be a mapping"),
        ({"env": {"A": 1}}, "env must map variable names to strings"),
    ],
)
def test_bad_values_are_refused_with_what_to_fix(changes: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        SessionOptions(**changes)
    assert says in str(info.value)


def test_no_limit_is_none() -> None:
    assert SessionOptions(timeout=None).timeout is None
    assert SessionOptions(timeout=math.inf).timeout == math.inf


def test_from_mapping_refuses_unknown_keys_and_lists_the_known_ones() -> None:
    assert SessionOptions.from_mapping({"timeout": 5}).timeout == 5
    with pytest.raises(InvalidArgument, match="unknown session option\\(s\\) 'tiemout'") as info:
        SessionOptions.from_mapping({"tiemout": 5})
    assert "timeout" in str(info.value)


def test_frozen_and_replace_validates() -> None:
    options = SessionOptions(timeout=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.timeout = 6  # type: ignore[misc]
    assert options.replace(timeout=6).timeout == 6
    with pytest.raises(InvalidArgument):
        options.replace(backend="nowhere")


def test_keyword_arguments_override_an_options_object_only_where_given() -> None:
    base = SessionOptions(timeout=5, kernel_name="other", docker={"memory": "1g"})
    assert options_from(base) is base
    merged = options_from(base, timeout=DEFAULT_TIMEOUT, kernel_name="python3", docker=None)
    assert merged == base  # arguments left at their defaults do not override
    assert options_from(base, timeout=None).timeout is None  # None is a real choice: no limit
    assert options_from(base, notebook=False).notebook is False
    session = AsyncSession(options=base, name="x")
    assert (session.options.name, session.options.timeout) == ("x", 5)


def test_every_field_has_help_and_a_default() -> None:
    fields = list(option_fields())
    assert [f.name for f in fields] == [f.name for f in dataclasses.fields(SessionOptions)]
    assert all(f.help.strip().endswith(".") or f.help.strip().endswith(")") for f in fields)
    by_name = {f.name: f for f in fields}
    assert by_name["timeout"].default == DEFAULT_TIMEOUT
    assert by_name["timeout"].cli
    assert not by_name["kernel_manager"].cli  # an object, not a flag
