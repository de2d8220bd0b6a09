"""Message-level tests of the output layer: kernel messages in, nbformat outputs out. No kernel.

Messages are built the way ipykernel sends them (header / parent_header /
content), in the manner of nbclient's ``prepare_cell_mocks``.
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import nbformat

from jupyter_exec.engine.outputs import (
    CellOutputs,
    overwrite_line,
    stream_text,
    strip_ansi,
)

PARENT = {"msg_id": "exec-1", "msg_type": "execute_request", "session": "s", "username": "u"}
_counter = itertools.count()


def message(msg_type: str, **content: Any) -> dict[str, Any]:
    """A kernel IOPub message replying to the execute_request ``PARENT``."""
    return {
        "header": {
            "msg_id": f"{uuid.uuid4().hex}_{next(_counter)}",
            "msg_type": msg_type,
            "session": "kernel-session",
            "username": "kernel",
            "date": "2026-01-01T00:00:00.000000Z",
            "version": "5.3",
        },
        "parent_header": dict(PARENT),
        "metadata": {},
        "content": content,
        "buffers": [],
        "msg_type": msg_type,
        "msg_id": "",
    }


def stream(text: str, name: str = "stdout") -> dict[str, Any]:
    return message("stream", name=name, text=text)


def display(
    data: dict[str, Any], display_id: str | None = None, metadata: dict[str, Any] | None = None
) -> dict[str, Any]:
    transient = {"display_id": display_id} if display_id else {}
    return message("display_data", data=data, metadata=metadata or {}, transient=transient)


def update(data: dict[str, Any], display_id: str) -> dict[str, Any]:
    return message(
        "update_display_data", data=data, metadata={}, transient={"display_id": display_id}
    )


def clear(wait: bool) -> dict[str, Any]:
    return message("clear_output", wait=wait)


def run(*msgs: dict[str, Any], **kwargs: Any) -> list[dict[str, Any]]:
    builder = CellOutputs(**kwargs)
    for m in msgs:
        builder.feed(m)
    return builder.finish()


def assert_valid_outputs(outputs: list[dict[str, Any]]) -> None:
    cell = nbformat.v4.new_code_cell("x", outputs=outputs)
    nb = nbformat.v4.new_notebook(cells=[cell])
    nbformat.validate(nb)


class RecordingSpill:
    """A Spill that keeps everything written to it, per stream."""

    def __init__(self) -> None:
        self.writes: dict[str, list[str]] = {}

    def write(self, name: str, text: str) -> None:
        self.writes.setdefault(name, []).append(text)

    def location(self, name: str) -> str | None:
        return f"spill/{name}.txt" if name in self.writes else None

    def text(self, name: str) -> str:
        return "".join(self.writes.get(name, []))


# -- streams ---------------------------------------------------------------------------


def test_consecutive_chunks_of_a_stream_coalesce_into_one_output() -> None:
    outputs = run(stream("a"), stream("b\n"), stream("c\n"))
    assert outputs == [{"output_type": "stream", "name": "stdout", "text": "ab\nc\n"}]
    assert_valid_outputs(outputs)


def test_a_different_stream_or_output_in_between_starts_a_new_output() -> None:
    outputs = run(
        stream("out1\n"),
        stream("err\n", "stderr"),
        stream("out2\n"),
        display({"text/plain": "shown"}),
        stream("out3\n"),
    )
    assert [(o["output_type"], o.get("name"), o.get("text")) for o in outputs] == [
        ("stream", "stdout", "out1\n"),
        ("stream", "stderr", "err\n"),
        ("stream", "stdout", "out2\n"),
        ("display_data", None, None),
        ("stream", "stdout", "out3\n"),
    ]
    assert stream_text(outputs, "stdout") == "out1\nout2\nout3\n"
    assert stream_text(outputs, "stderr") == "err\n"
    assert_valid_outputs(outputs)


def test_stream_text_joins_lists_of_lines() -> None:
    outputs = [{"output_type": "stream", "name": "stdout", "text": ["a\n", "b"]}]
    assert stream_text(outputs, "stdout") == "a\nb"


def test_feed_returns_the_chunk_for_on_output_and_nothing_for_status() -> None:
    builder = CellOutputs()
    assert builder.feed(message("status", execution_state="busy")) == []
    assert builder.feed(message("execute_input", code="1", execution_count=7)) == []
    assert builder.execution_count == 7
    (event,) = builder.feed(stream("hi\n"))
    assert event == {"output_type": "stream", "name": "stdout", "text": "hi\n"}


def test_carriage_return_progress_bar_keeps_only_the_final_state() -> None:
    chunks = [f"\r{i:3d}%|{'#' * (i // 10):<10}|" for i in range(0, 101, 5)]
    outputs = run(*(stream(c) for c in chunks), stream("\ndone\n"))
    assert outputs[0]["text"] == "100%|##########|\ndone\n"


def test_carriage_return_overwrites_only_what_is_rewritten() -> None:
    # As in a terminal (and JupyterLab): "\r" moves to column 0, it does not erase.
    assert run(stream("abcdef\rXY\n"))[0]["text"] == "XYcdef\n"
    # ... also when the rewrite arrives across several chunks.
    assert run(stream("abcdef\r"), stream("XY"), stream("Z"))[0]["text"] == "XYZdef"


def test_carriage_return_splitting_a_number_across_chunks() -> None:
    outputs = run(stream("10%"), stream("\r2"), stream("0%"), stream("\r3"), stream("0%\n"))
    assert outputs[0]["text"] == "30%\n"


def test_crlf_split_across_chunks_is_a_newline_not_an_overwrite() -> None:
    outputs = run(stream("line1\r"), stream("\nline2\r\n"), stream("line3\n"))
    assert outputs[0]["text"] == "line1\nline2\nline3\n"


def test_carriage_return_does_not_touch_completed_lines() -> None:
    outputs = run(stream("keep\n"), stream("a\rb\n"))
    assert outputs[0]["text"] == "keep\nb\n"


def test_backspace_moves_back_one_column() -> None:
    assert run(stream("abc\bd\n"))[0]["text"] == "abd\n"
    assert run(stream("abc"), stream("\bX"), stream("\b\bZ"))[0]["text"] == "aZX"
    # Backspace never goes before column 0.
    assert run(stream("\b\bab"))[0]["text"] == "ab"


def test_cursor_position_survives_across_chunks() -> None:
    # The cursor, not the end of the shown text, is where the next chunk writes.
    assert run(stream("abc\b"), stream("X"))[0]["text"] == "abX"
    assert run(stream("abc\b\b"), stream("\rZ"))[0]["text"] == "Zbc"
    assert run(stream("abcdef\r"), stream("\b"), stream("XY\n"))[0]["text"] == "XYcdef\n"
    assert run(stream("abc\b"), stream("\b\n"), stream("z"))[0]["text"] == "abc\nz"


def test_overwrite_line_pure_function() -> None:
    assert overwrite_line("hello") == "hello"
    assert overwrite_line("hello\rj") == "jello"
    assert overwrite_line("ab\bc") == "ac"
    assert overwrite_line("abc\r\bX") == "Xbc"


# -- clear_output ---------------------------------------------------------------------


def test_clear_output_wait_false_clears_at_once() -> None:
    builder = CellOutputs()
    builder.feed(stream("old\n"))
    builder.feed(display({"text/plain": "old display"}))
    (event,) = builder.feed(clear(wait=False))
    assert event == {"output_type": "clear_output", "wait": False}
    assert builder.outputs == []
    assert builder.finish() == []


def test_clear_output_wait_true_clears_when_the_next_output_arrives() -> None:
    builder = CellOutputs()
    builder.feed(stream("frame 1\n"))
    (event,) = builder.feed(clear(wait=True))
    assert event == {"output_type": "clear_output", "wait": True}
    # Nothing new yet: the old output is still shown.
    assert [o["output_type"] for o in builder.outputs] == ["stream"]
    builder.feed(stream("frame 2\n"))
    assert builder.finish() == [{"output_type": "stream", "name": "stdout", "text": "frame 2\n"}]


def test_clear_output_wait_true_with_nothing_after_keeps_the_last_output() -> None:
    outputs = run(stream("0\n"), clear(wait=True), stream("1\n"), clear(wait=True))
    assert outputs == [{"output_type": "stream", "name": "stdout", "text": "1\n"}]


def test_clear_output_wait_true_loop_of_displays_leaves_one_output() -> None:
    msgs: list[dict[str, Any]] = []
    for i in range(10):
        msgs += [clear(wait=True), display({"text/plain": str(i)})]
    outputs = run(*msgs)
    assert len(outputs) == 1
    assert outputs[0]["output_type"] == "display_data"
    assert outputs[0]["data"] == {"text/plain": "9"}
    assert_valid_outputs(outputs)


# -- display updates ---------------------------------------------------------------------


def test_update_display_data_rewrites_every_output_with_that_display_id() -> None:
    builder = CellOutputs()
    builder.feed(display({"text/plain": "v1"}, display_id="d1"))
    builder.feed(stream("between\n"))
    builder.feed(display({"text/plain": "v1 again"}, display_id="d1"))
    builder.feed(display({"text/plain": "other"}, display_id="d2"))
    (event,) = builder.feed(update({"text/plain": "v2", "text/html": "<b>v2</b>"}, "d1"))
    assert event["output_type"] == "update_display_data"
    assert event["display_id"] == "d1"
    outputs = builder.finish()
    assert [o.get("data") for o in outputs if o["output_type"] == "display_data"] == [
        {"text/plain": "v2", "text/html": "<b>v2</b>"},
        {"text/plain": "v2", "text/html": "<b>v2</b>"},
        {"text/plain": "other"},
    ]
    # Handed back too: earlier cells showing "d1" must be updated as well (as Jupyter does).
    assert [u["display_id"] for u in builder.foreign_updates] == ["d1"]
    # nbformat outputs carry no transient data.
    assert all("transient" not in o for o in outputs)
    assert_valid_outputs(outputs)


def test_update_for_a_display_of_another_cell_is_handed_back() -> None:
    builder = CellOutputs()
    builder.feed(display({"text/plain": "mine"}, display_id="mine"))
    builder.feed(update({"text/plain": "new"}, "elsewhere"))
    outputs = builder.finish()
    assert outputs[0]["data"] == {"text/plain": "mine"}
    assert builder.foreign_updates == [
        {"display_id": "elsewhere", "data": {"text/plain": "new"}, "metadata": {}}
    ]


def test_update_without_display_id_is_ignored() -> None:
    builder = CellOutputs()
    builder.feed(display({"text/plain": "x"}, display_id="d"))
    msg = message("update_display_data", data={"text/plain": "y"}, metadata={}, transient={})
    assert builder.feed(msg) == []
    assert builder.finish()[0]["data"] == {"text/plain": "x"}
    assert builder.foreign_updates == []


def test_displays_lists_shown_outputs_by_display_id_and_forgets_cleared_ones() -> None:
    builder = CellOutputs()
    builder.feed(display({"text/plain": "a"}, display_id="gone"))
    builder.feed(clear(wait=False))
    builder.feed(display({"text/plain": "b"}, display_id="kept"))
    displays = builder.displays
    assert displays.get("gone", []) == []
    assert [o["data"] for o in displays["kept"]] == [{"text/plain": "b"}]


def test_execute_result_and_error_become_nbformat_outputs() -> None:
    builder = CellOutputs()
    builder.feed(
        message("execute_result", data={"text/plain": "6"}, metadata={}, execution_count=3)
    )
    builder.feed(
        message(
            "error",
            ename="ZeroDivisionError",
            evalue="division by zero",
            traceback=["\x1b[31mZeroDivisionError\x1b[0m: division by zero"],
        )
    )
    outputs = builder.finish()
    assert builder.execution_count == 3
    assert outputs[0] == {
        "output_type": "execute_result",
        "data": {"text/plain": "6"},
        "metadata": {},
        "execution_count": 3,
    }
    assert outputs[1]["output_type"] == "error"
    assert outputs[1]["ename"] == "ZeroDivisionError"
    assert_valid_outputs(outputs)


# -- truncation and spill ----------------------------------------------------------------


def test_flood_keeps_head_marker_and_tail_and_spills_the_full_text() -> None:
    lines = [f"line {i:05d}\n" for i in range(2000)]  # 11 chars each
    full = "".join(lines)
    spill = RecordingSpill()
    builder = CellOutputs(max_stream_chars=1000, spill=spill)
    # Chunks that do not respect line boundaries.
    for start in range(0, len(full), 37):
        builder.feed(stream(full[start : start + 37]))
    outputs = builder.finish()
    assert builder.truncated
    assert spill.text("stdout") == full
    assert len(outputs) == 1
    text = outputs[0]["text"]
    head, sep, rest = text.partition("\n[... stdout truncated: ")
    assert sep, text[:2000]
    assert full.startswith(head)
    assert 700 <= len(head) <= 800  # the head budget (80%)
    marker, _, tail = rest.partition(" ...]\n")
    assert marker == f"{len(full):,} characters in all; full text in spill/stdout.txt"
    assert full.endswith(tail)
    assert tail.startswith("line ")  # the tail starts on a line boundary
    assert 0 < len(tail) <= 200
    assert len(text) < 1000 + 200


def test_flood_without_spill_still_truncates_and_says_so() -> None:
    builder = CellOutputs(max_stream_chars=100)
    for i in range(1000):
        builder.feed(stream(f"{i}\n"))
    outputs = builder.finish()
    assert builder.truncated
    text = outputs[0]["text"]
    assert text.startswith("0\n1\n2\n")
    assert text.endswith("999\n")
    assert "characters in all ...]" in text
    assert "full text in" not in text
    assert len(text) < 300


def test_under_budget_nothing_is_truncated_or_spilled() -> None:
    spill = RecordingSpill()
    builder = CellOutputs(max_stream_chars=1000, spill=spill)
    builder.feed(stream("x" * 500 + "\n"))
    outputs = builder.finish()
    assert not builder.truncated
    assert spill.writes == {}
    assert outputs[0]["text"] == "x" * 500 + "\n"


def test_flood_on_stdout_also_spills_earlier_stderr() -> None:
    spill = RecordingSpill()
    builder = CellOutputs(max_stream_chars=1000, spill=spill)
    builder.feed(stream("warning\n", "stderr"))
    out = "".join(f"{i:09d}\n" for i in range(500))
    builder.feed(stream(out))
    builder.feed(stream("late error\n", "stderr"))
    outputs = builder.finish()
    assert spill.text("stdout") == out
    assert spill.text("stderr") == "warning\nlate error\n"
    assert builder.truncated
    assert "late error" in stream_text(outputs, "stderr")
    assert stream_text(outputs, "stderr").startswith("warning\n")


def test_strip_ansi_removes_colours_cursor_moves_and_hyperlinks() -> None:
    coloured = "\x1b[0;31mZeroDivisionError\x1b[0m: division by \x1b[1;32mzero\x1b[39m"
    assert strip_ansi(coloured) == "ZeroDivisionError: division by zero"
    assert strip_ansi("\x1b[2K\x1b[1Aup") == "up"
    link = "\x1b]8;;https://example.org\x1b\\docs\x1b]8;;\x1b\\"
    assert strip_ansi(link) == "docs"
    assert strip_ansi("\x1b]0;title\x07text") == "text"
    assert strip_ansi("plain [31m text") == "plain [31m text"


# -- cost stays linear ------------------------------------------------------------------


def _feed_seconds(chunks: int, chunk: str) -> tuple[float, str]:
    builder = CellOutputs(max_stream_chars=10**9)
    msgs = [stream(chunk) for _ in range(chunks)]
    started = time.perf_counter()
    for m in msgs:
        builder.feed(m)
    outputs = builder.finish()
    return time.perf_counter() - started, outputs[0]["text"]


def test_long_line_without_newline_is_fed_in_linear_time() -> None:
    # 4 MB on one line in 256-char chunks: re-scanning the open line per chunk
    # would copy ~32 GB; linear work takes well under a second.
    seconds, text = _feed_seconds(16_000, "y" * 256)
    assert len(text) == 16_000 * 256
    assert set(text) == {"y"}
    assert seconds < 5, f"{seconds:.1f} s: quadratic in the line length?"


def test_progress_bar_without_newline_stays_cheap_and_correct() -> None:
    builder = CellOutputs(max_stream_chars=10**9)
    started = time.perf_counter()
    for i in range(50_000):
        builder.feed(stream(f"\r{i:06d} " + "=" * 50))
    outputs = builder.finish()
    assert time.perf_counter() - started < 5
    assert outputs[0]["text"] == "049999 " + "=" * 50


def test_long_backspacing_line_is_linear_too() -> None:
    # Each chunk may only redo the columns its cursor can reach, not the whole open line.
    seconds, text = _feed_seconds(10_000, "ab\b" * 40)
    # Every "a" stays; a "b" still under the cursor when an over-long open line is
    # made final stays too (the documented cut-off), so only a few remain.
    assert text.count("a") == 400_000
    assert set(text) == {"a", "b"}
    assert text.count("b") <= 400_000 // 65_536 + 1
    assert seconds < 5, f"{seconds:.1f} s: quadratic in the line length?"


def test_many_carriage_returns_per_chunk_are_linear() -> None:
    seconds, text = _feed_seconds(10_000, "x\ry" * 40)
    # "x\ry" leaves the cursor after the "y", so the next "x" lands beside it.
    assert text == "yx"
    assert seconds < 5, f"{seconds:.1f} s: quadratic?"


# -- redaction and bounds on the way in ---------------------------------------------------

SECRET = "Bearer tok-9c1e-secret-value"


def _redactor() -> Any:
    from jupyter_exec.network.redact import Redactor

    return Redactor([SECRET])


def _stream_events(events: list[dict[str, Any]], name: str = "stdout") -> str:
    return "".join(e["text"] for e in events if e.get("name") == name)


def test_a_secret_split_over_any_chunking_is_redacted_in_events_and_outputs() -> None:
    import random

    text = f"a {SECRET} b {SECRET[7:]} c\n"
    rng = random.Random(7)
    for _ in range(200):  # any way the kernel may cut the text into chunks
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 12)))
        chunks = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        builder = CellOutputs(redactor=_redactor())
        events = [e for c in chunks for e in builder.feed(stream(c))] + builder.release()
        shown = _stream_events(events)
        assert shown == "a [secret redacted] b [secret redacted] c\n", chunks
        assert builder.finish()[0]["text"] == shown


def test_text_that_cannot_begin_a_secret_is_not_held_back() -> None:
    builder = CellOutputs(redactor=_redactor())
    assert _stream_events(builder.feed(stream("progress 10%\n"))) == "progress 10%\n"
    # the end of this one may begin the secret: held until the next chunk of stdout
    assert _stream_events(builder.feed(stream("token: Bear"))) == "token: "
    # stderr and a display in between do not release it (kernels interleave streams)
    assert _stream_events(builder.feed(stream("warn\n", "stderr")), "stderr") == "warn\n"
    assert builder.feed(display({"text/plain": SECRET}))[0]["data"] == {
        "text/plain": "[secret redacted]"
    }
    assert _stream_events(builder.feed(stream("er tok-9c1e-secret-value!\n"))) == (
        "[secret redacted]!\n"
    )
    assert _stream_events(builder.feed(stream("ends Bea"))) == "ends "
    assert _stream_events(builder.release()) == "Bea"  # the cell ended: it was harmless
    assert builder.release() == []


def test_encoded_forms_and_keys_are_redacted() -> None:
    import base64
    import urllib.parse

    redactor = _redactor()
    token = SECRET.split()[1]
    for encoded in (
        base64.b64encode(SECRET.encode()).decode(),
        base64.b64encode(b"x" + token.encode()).decode(),  # shifted by a byte
        base64.urlsafe_b64encode(b"xy" + SECRET.encode()).decode(),
        urllib.parse.quote(SECRET, safe=""),
        urllib.parse.quote_plus(SECRET),
        SECRET.encode().hex(),
    ):
        assert "[secret redacted]" in redactor.text(f"<{encoded}>"), encoded
    assert redactor.value({SECRET: [token]}) == {"[secret redacted]": ["[secret redacted]"]}
    basic = base64.b64encode(b"user:hunter2-long").decode()
    from jupyter_exec.network.redact import Redactor

    assert Redactor([f"Basic {basic}"]).text("got user:hunter2-long") == "got [secret redacted]"


def test_output_nested_too_deep_becomes_a_note_naming_the_limit() -> None:
    from jupyter_exec.engine.outputs import MAX_OUTPUT_DEPTH

    deep: Any = 1
    for _ in range(MAX_OUTPUT_DEPTH + 5):
        deep = [deep]
    fine: Any = 1
    for _ in range(MAX_OUTPUT_DEPTH - 2):
        fine = {"a": fine}
    builder = CellOutputs()
    builder.feed(display({"application/json": deep}))
    builder.feed(display({"text/plain": "x"}, metadata={"m": deep}))
    builder.feed(display({"application/json": fine}))
    builder.feed(message("display_data", data=["not", "a", "bundle"], metadata={}))
    builder.feed(message("stream", name="stdout", text=["not text"]))
    outputs = builder.finish()
    notes = [o["data"]["text/plain"] for o in outputs[:2]]
    assert all(f"more than {MAX_OUTPUT_DEPTH} levels deep" in n for n in notes)
    assert outputs[2]["data"]["application/json"] == fine
    assert "wrong types" in outputs[3]["data"]["text/plain"]
    assert outputs[4]["name"] == "stderr"
    assert_valid_outputs(outputs)
