"""The wire formats without a server: outputs to protocol lines, Connect framing, paths."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from jupyter_exec.e2b.connect import end_stream, envelope, read_request
from jupyter_exec.e2b.kernel_formats import CHART_MIME, DATA_MIME
from jupyter_exec.e2b.paths import SandboxPaths
from jupyter_exec.e2b.protocol import count_line, encode, event_lines, result_line
from jupyter_exec.exceptions import InvalidArgument, WorkDirError


def test_result_fields_by_mime() -> None:
    line = result_line(
        {
            "text/plain": ["a", "b"],
            "image/png": "iVBOR\nw0K",
            "application/vnd.custom+json": {"k": 1},
        },
        main=True,
    )
    assert line == {"type": "result", "is_main_result": True, "text": "ab", "png": "iVBORw0K",
                    "extra": {"application/vnd.custom+json": {"k": 1}}}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "sent"),
    [("'bar'", "bar"), ('"it\'s"', "it's"), ("'", "'"), ("1", "1"), ("'a' + 'b'", "a' + 'b")],
)
def test_string_results_lose_their_quotes_as_in_e2b(text: str, sent: str) -> None:
    assert result_line({"text/plain": text}, main=True)["text"] == sent


def test_e2b_formats_fill_data_and_chart() -> None:
    line = result_line({"e2b/data": {"a": [1]}, "e2b/chart": {"type": "line"}}, main=False)
    assert (line["data"], line["chart"]) == ({"a": [1]}, {"type": "line"})
    ours = result_line({CHART_MIME: {"type": "pie"}, DATA_MIME: {"b": [2]}}, main=False)
    assert (ours["data"], ours["chart"], "extra" in ours) == ({"b": [2]}, {"type": "pie"}, False)


def test_stream_error_and_ignored_events() -> None:
    (out,) = event_lines({"output_type": "stream", "name": "stderr", "text": "x"})
    assert (out["type"], out["text"]) == ("stderr", "x")
    assert isinstance(out["timestamp"], int)
    (error,) = event_lines(
        {
            "output_type": "error",
            "ename": "E",
            "evalue": "v",
            "traceback": ["\x1b[31mred\x1b[0m", "b"],
        }
    )
    assert error == {"type": "error", "name": "E", "value": "v", "traceback": "red\nb"}
    assert event_lines({"output_type": "clear_output", "wait": False}) == []
    assert count_line(None) is None
    assert json.loads(encode(count_line(3) or {})) == {
        "type": "number_of_executions",
        "execution_count": 3,
    }
    assert encode({"a": 1}).endswith(b"\n")


def test_connect_framing() -> None:
    framed = envelope({"path": "/home/user"})
    assert read_request(framed, "application/connect+json") == {"path": "/home/user"}
    assert read_request(b'{"a": 1}', "application/json") == {"a": 1}
    assert end_stream()[0] == 0x02
    flags, size = struct.unpack(">BI", end_stream({"code": "not_found", "message": "m"})[:5])
    assert flags == 0x02
    assert size > 0
    for body, kind in [(b"\x00\x00", "application/connect+json"), (b"[1]", "application/json"),
                       (b"{not json", "application/json"),
                       (b"\x01\x00\x00\x00\x02{}", "application/connect+json")]:  # fmt: skip
        with pytest.raises(InvalidArgument):
            read_request(body, kind)


@pytest.mark.parametrize(
    ("path", "relative"),
    [
        ("/home/user", ""),
        ("/home/user/a/b.txt", "a/b.txt"),
        ("a/./b", "a/b"),
        ("~/x", "x"),
        (None, ""),
    ],
)
def test_paths_inside(path: str | None, relative: str) -> None:
    assert SandboxPaths(Path("/srv/sbx")).relative(path) == relative


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/etc/passwd",
        "/home/userx",
        "/home/user/../x",
        "../x",
        "a/../../x",
        "a\x00b",
        "a\u202eb",
    ],
)
def test_paths_outside_are_refused(path: str) -> None:
    with pytest.raises((WorkDirError, InvalidArgument)):
        SandboxPaths(Path("/srv/sbx")).relative(path)
