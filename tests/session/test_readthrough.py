"""ReadThrough: an attribute read through what an object holds is a plain read-only property."""

from __future__ import annotations

import inspect

import pytest

from jupyter_exec import AsyncSession, Session
from jupyter_exec.session.readthrough import ReadThrough


class _Inner:
    def __init__(self) -> None:
        self.value = 1


class _Outer:
    value = ReadThrough[int]("inner.value", "The inner object's value.")
    bare = ReadThrough[int]("inner.value")

    def __init__(self) -> None:
        self.inner = _Inner()


def test_it_reads_the_held_objects_attribute_each_time() -> None:
    outer = _Outer()
    assert outer.value == 1
    outer.inner.value = 2
    assert outer.value == 2


def test_it_is_a_property_with_its_own_doc_or_none() -> None:
    assert isinstance(inspect.getattr_static(_Outer, "value"), property)
    assert _Outer.__dict__["value"].__doc__ == "The inner object's value."
    assert _Outer.__dict__["bare"].__doc__ is None


def test_assigning_to_it_is_refused_as_for_any_property_without_a_setter() -> None:
    with pytest.raises(AttributeError, match="property 'value' of '_Outer' object has no setter"):
        _Outer().value = 3  # type: ignore[assignment]


def test_the_sessions_read_through_attributes_keep_their_docs_and_values() -> None:
    assert Session.__dict__["files_dir"].__doc__ == (
        "``<work_dir>/<name>_files``: where rich outputs are saved."
    )
    assert AsyncSession.__dict__["timeout"].__doc__ == (
        "Default seconds per execution (``None``: no limit)."
    )
    session = Session(timeout=7, start=False)
    assert session.async_session.timeout == 7
    assert session.sleeping is False
    assert session.resumed == []
    assert session.resumed_cells == []
