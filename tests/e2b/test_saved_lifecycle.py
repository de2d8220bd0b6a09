"""A sandbox's saved entry (``e2b/saved.py``) keeps its lifecycle and whether it is paused;
an entry written before those were kept still loads, as a sandbox killed on its timeout."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_exec.e2b.saved import SavedSandbox, _checked
from jupyter_exec.manager.saved import BadEntry

KEY = "sbx-0123456789abcdef"
OLD: dict[str, Any] = {
    "id": KEY,
    "template": "code-interpreter-v1",
    "metadata": {"job": "x"},
    "started": 1.0,
    "end": None,
    "notebook": KEY,
    "salt": "0" * 32,
}
NEW: dict[str, Any] = {
    **OLD,
    "on_timeout": "pause",
    "pause_memory": True,
    "auto_resume": False,
    "paused": True,
}


def test_the_lifecycle_and_the_paused_flag_come_back() -> None:
    saved = _checked(KEY, dict(NEW))
    assert (saved.on_timeout, saved.pause_memory, saved.auto_resume, saved.paused) == (
        "pause", True, False, True,
    )  # fmt: skip


def test_an_entry_from_before_the_lifecycle_was_kept_loads_as_it_was() -> None:
    saved = _checked(KEY, dict(OLD))
    assert saved == SavedSandbox(**OLD)
    assert (saved.on_timeout, saved.auto_resume, saved.paused) == ("kill", None, False)


@pytest.mark.parametrize(
    "bad",
    [
        {"on_timeout": "explode"},
        {"paused": "yes"},
        {"pause_memory": 1},
        {"auto_resume": "true"},
        {"paused": True, "extra": 1},
    ],
)
def test_a_bad_lifecycle_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(BadEntry):
        _checked(KEY, {**NEW, **bad})
