"""The result objects, built from nbformat outputs: no kernel needed."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from jupyter_exec import (
    CellError,
    Execution,
    ExecutionError,
    ExecutionTimeout,
    KernelDiedError,
    Result,
)

PNG_B64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0g"
    "AAAABJRU5ErkJggg=="
)


def make_result(**kwargs: object) -> Result:
    data = {
        "text/plain": ["<Figure>\n", "size 1x1"],
        "image/png": PNG_B64,
        "text/html": "<b>x</b>",
        "application/json": {"a": 1},
        "application/pdf": base64.b64encode(b"%PDF-1.4").decode(),
    }
    return Result(data=data, **kwargs)  # type: ignore[arg-type]


def test_result_exposes_each_format() -> None:
    r = make_result(is_main_result=True, files={"image/png": Path("w/x.png")})
    assert r.text == "<Figure>\nsize 1x1"  # lists of lines are joined
    assert r.png == PNG_B64
    assert r.html == "<b>x</b>"
    assert r.json == {"a": 1}
    assert r.markdown is None
    assert r.latex is None
    assert r.svg is None
    assert r.jpeg is None
    assert r.formats() == [
        "text/plain",
        "image/png",
        "text/html",
        "application/json",
        "application/pdf",
    ]
    assert r.data_bytes("image/png") == base64.b64decode(PNG_B64)
    assert r.data_bytes("application/pdf") == b"%PDF-1.4"
    assert r.data_bytes("text/html") == b"<b>x</b>"
    assert json.loads(r.data_bytes("application/json")) == {"a": 1}
    assert repr(r).startswith("Result(main result: text/plain, image/png")


def test_result_renders_itself_in_jupyter() -> None:
    data, metadata = make_result(metadata={"image/png": {"width": 3}})._repr_mimebundle_()
    assert data["text/plain"] == "<Figure>\nsize 1x1"
    assert data["image/png"] == PNG_B64
    assert metadata == {"image/png": {"width": 3}}


def test_results_are_frozen() -> None:
    r = make_result()
    with pytest.raises(AttributeError):
        r.is_main_result = True  # type: ignore[misc]


def _execution(status: str, error: CellError | None = None) -> Execution:
    return Execution(
        code="x",
        status=status,  # type: ignore[arg-type]
        results=(Result(data={"text/plain": "6"}, is_main_result=True), make_result()),
        stdout="out\n",
        stderr="err\n",
        error=error,
        execution_count=4,
        files=(Path("/w/a.png"),),
        duration=0.25,
        cell_index=3,
    )


def test_execution_text_is_the_main_result() -> None:
    e = _execution("ok")
    assert e.ok
    assert e.text == "6"
    assert e.main_result is e.results[0]
    assert Execution(code="", status="ok", results=(make_result(),)).text is None
    assert str(e) == "out\n\nerr\n\n6"


def test_raise_for_error_returns_self_when_ok() -> None:
    e = _execution("ok")
    assert e.raise_for_error() is e


@pytest.mark.parametrize(
    ("status", "exc_type"),
    [("error", ExecutionError), ("timeout", ExecutionTimeout), ("died", KernelDiedError)],
)
def test_raise_for_error_raises_by_status(status: str, exc_type: type[Exception]) -> None:
    e = _execution(status, CellError("ZeroDivisionError", "division by zero", "Traceback\n  1/0"))
    with pytest.raises(exc_type) as info:
        e.raise_for_error()
    assert info.value.execution is e  # type: ignore[attr-defined]
    assert "ZeroDivisionError: division by zero" in str(info.value)
    assert "1/0" in str(info.value)
    assert not e.ok


def test_to_dict_is_json_serialisable_and_complete() -> None:
    e = _execution("error", CellError("E", "v", "tb"))
    d = json.loads(json.dumps(e.to_dict()))
    assert d["status"] == "error"
    assert d["error"] == {"ename": "E", "evalue": "v", "traceback": "tb"}
    assert d["files"] == ["/w/a.png"]
    assert d["text"] == "6"
    assert d["stdout"] == "out\n"
    assert d["stderr"] == "err\n"
    assert d["execution_count"] == 4
    assert d["cell_index"] == 3
    assert d["results"][1]["data"]["text/plain"] == "<Figure>\nsize 1x1"
    assert d["results"][0]["is_main_result"] is True
