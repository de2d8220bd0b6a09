"""The one reader of kernels' and hosts' answers (:mod:`jupyter_exec.boundary.replies`),
without a kernel: what IPython shows for a str of JSON is read back exactly; anything
else (another literal, a nested repr, an oversized or malformed answer) is no answer,
found in time linear in what was sent. And the message around it
(:mod:`jupyter_exec.engine.receiver`): too long, or too many containers, is a note, unparsed."""

from __future__ import annotations

import ast
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.session import Session

from jupyter_exec import AsyncSession
from jupyter_exec.boundary.replies import (
    MAX_CONTAINERS,
    answer,
    answer_str,
    decode_json,
    printable,
    quoted_str,
)
from jupyter_exec.engine.receiver import MAX_CONTAINERS as MAX_MESSAGE_CONTAINERS
from jupyter_exec.engine.receiver import _deserialize
from jupyter_exec.inkernel.state import CHANGED_EXPRESSION
from jupyter_exec.state.kernel_calls import DONE_EXPRESSION, ask, user_names


def reply(text: Any, status: str = "ok") -> dict[str, Any]:
    """A ``user_expressions`` entry as ipykernel sends it."""
    return {"status": status, "data": {"text/plain": text}, "metadata": {}}


@pytest.mark.parametrize(
    "value",
    [
        "",
        "plain",
        "it's",
        'say "hi"',
        "both ' and \"",
        "back\\slash",
        "\\'",
        "'\\",
        "\\\\\\'",
        '["caf\\u00e9", "x"]',
        json.dumps({"a": ["it's", 'q"uote', "\\"]}),
    ],
)
def test_repr_of_an_ascii_str_reads_back_exactly(value: str) -> None:
    assert quoted_str(repr(value)) == value


def test_every_repr_of_random_ascii_reads_back_and_nothing_else_is_invented() -> None:
    rng = random.Random(7)
    alphabet = "ab'\"\\ {}[]"
    for _ in range(5000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert quoted_str(repr(value)) == value
        junk = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        got = quoted_str(junk)
        if got is not None:  # accepted only as the str literal it is (checked by Python)
            assert ast.literal_eval(junk) == got


@pytest.mark.parametrize(
    "text",
    [
        None,
        42,
        "",
        "'",
        "x",
        "[1, 2]",  # a list's repr: not a str
        "'a' 'b'",  # two literals
        "'a'+'b'",
        "'unterminated\\'",
        "'a'b'",
        "'\\n'",  # an escape repr makes only for a control character
        "'\\x41'",
        "'caf\u00e9'",  # non-ASCII: a str of JSON with ensure_ascii never holds any
        "'line\nbreak'",
        '"\'""',
        "u'x'",
        "b'x'",
        "'''x'''",
    ],
)
def test_anything_but_one_quoted_ascii_literal_is_no_answer(text: Any) -> None:
    assert quoted_str(text) is None


def test_the_limit_is_checked_on_the_raw_text() -> None:
    value = json.dumps(["x" * 100])
    assert quoted_str(repr(value), limit=len(repr(value))) == value
    assert quoted_str(repr(value), limit=len(repr(value)) - 1) is None
    assert answer({"k": reply(repr(value))}, "k", limit=len(value) + 1) is None


def test_answer_reads_only_the_key_asked_for() -> None:
    found = {
        "asked": reply(repr(json.dumps({"names": ["x"]}))),
        "unasked": reply("[" * 100_000),
    }
    assert answer(found, "asked") == {"names": ["x"]}
    assert answer(found, "missing") is None
    assert answer({"k": reply(repr("[]"), status="error")}, "k") is None
    assert answer({"k": {"status": "ok", "data": "not a mapping"}}, "k") is None
    assert answer("not a mapping", "k") is None
    assert answer({"k": reply(repr(""))}, "k") is None  # empty: nothing to say
    assert answer_str({"k": reply(repr("QUJD"))}, "k") == "QUJD"


@pytest.mark.parametrize(
    "text",
    [
        "[" * 200_000 + "]" * 200_000,  # nested past the parser's recursion limit
        "[" + "[]," * (MAX_CONTAINERS + 1) + "[]]",  # too many containers
        "{'a': 1}",  # a Python repr, not JSON
        "(0,)",
        "NaN garbage",
        '{"a": ',
    ],
)
def test_malformed_json_is_no_answer(text: str) -> None:
    assert decode_json(text, limit=len(text) + 1) is None
    assert answer({"k": reply(repr(text))}, "k", limit=len(repr(text))) is None


def test_non_ascii_travels_as_json_escapes() -> None:
    names = ["café", "名前", "x\u202ey"]
    text = json.dumps(names, ensure_ascii=True)
    assert text.isascii()
    assert answer({"k": reply(repr(text))}, "k") == names


def test_an_inflated_answer_costs_time_linear_in_its_size() -> None:
    """The attack of issue 30 (8 MB of ``[[],[],...]`` that ``literal_eval`` turned into
    3.7 GB and 20 s): refused by its length, or by its containers, at once."""
    inflated = "[" + "[]," * ((8 << 20) // 3) + "[]]"
    started = time.perf_counter()
    assert answer({"k": reply(repr(inflated))}, "k") is None  # over the 1 MiB default
    assert answer({"k": reply(repr(inflated))}, "k", limit=64 << 20) is None  # containers
    assert answer({"k": reply(inflated)}, "k", limit=64 << 20) is None  # not a str
    assert time.perf_counter() - started < 2.0


def test_printable_escapes_what_drives_a_terminal_and_keeps_unicode() -> None:
    forged = "3.12\x1b]0;owned\x07\x1b[2K\rALL HOSTS OK\n\u202etxt.exe\x9b\x7f"
    shown = printable(forged)
    assert not any(c in shown for c in "\x1b\x07\r\n\u202e\x9b\x7f")
    assert "\\x1b]0;owned\\x07" in shown
    assert "\\u202e" in shown
    assert "\\x9b" in shown
    assert printable("café 名前 ✓") == "café 名前 ✓"
    assert printable("x" * 1000, limit=10) == "x" * 10 + "..."


# -- the message itself, before jupyter_client's JSON parser --------------------------------


def _frames(session: Session, kind: str, content: dict[str, Any]) -> list[bytes]:
    parts = session.serialize(session.msg(kind, content))
    _, frames = session.feed_identities(parts)
    return [f if isinstance(f, bytes) else f.bytes for f in frames]


def test_a_message_of_too_many_containers_becomes_a_note_unparsed() -> None:
    sender, receiver = Session(key=b"k"), Session(key=b"k")
    flood: list[list[int]] = [[] for _ in range(MAX_MESSAGE_CONTAINERS + 1)]
    frames = _frames(sender, "display_data", {"data": {"application/json": flood}})
    started = time.perf_counter()
    msg = _deserialize(receiver, frames)
    assert time.perf_counter() - started < 1.0
    note = msg["content"]["data"]["text/plain"]
    assert "output removed" in note
    assert "JSON arrays and objects" in note
    assert msg["msg_type"] == "display_data"


def test_a_message_past_the_read_limit_becomes_a_note_and_one_under_it_is_read() -> None:
    sender, receiver = Session(key=b"k"), Session(key=b"k")
    text = "x" * 5000
    frames = _frames(sender, "stream", {"name": "stdout", "text": text})
    assert _deserialize(receiver, frames, limit=10_000)["content"]["text"] == text
    frames = _frames(sender, "stream", {"name": "stdout", "text": text})
    refused = _deserialize(receiver, frames, limit=1000)["content"]
    assert refused["name"] == "stderr"
    assert "the limit is 1,000 bytes" in refused["text"]
    reply = _frames(sender, "execute_reply", {"status": "ok", "user_expressions": {"r": text}})
    assert _deserialize(receiver, reply, limit=1000)["content"] == {}  # no answer at all


def test_a_message_of_ordinary_large_data_is_read_whole() -> None:
    sender, receiver = Session(key=b"k"), Session(key=b"k")
    image = "iVBORw0KGgo" * 400_000  # ~4.4 MB of base64: no containers to count
    points = {"x": list(range(200_000)), "y": list(range(200_000))}
    content = {"data": {"image/png": image, "application/json": points}, "metadata": {}}
    msg = _deserialize(receiver, _frames(sender, "display_data", content))
    assert msg["content"] == content


# -- a real kernel's answers, non-ASCII names included ----------------------------------------


async def test_a_kernels_answers_carry_non_ascii_names_through_json(tmp_path: Path) -> None:
    async with AsyncSession(work_dir=tmp_path, name="names") as session:
        kernel = session._kernel
        assert kernel is not None
        await session.execute("café = 1\n名前 = 2\nplain = 3")
        assert {"café", "名前", "plain"} <= set(await user_names(kernel))
        changed = await ask(kernel, "", CHANGED_EXPRESSION, 30.0)  # the last cell's
        assert {"café", "名前", "plain"} <= set(changed)
        assert await ask(kernel, "", DONE_EXPRESSION, 30.0) == 1


def test_nothing_in_the_package_literal_evals_what_it_reads() -> None:
    """The rule holds for code written later: no ``literal_eval`` call anywhere in the package
    (a kernel's or a host's text is read by :mod:`jupyter_exec.boundary.replies` alone)."""
    package = Path(__file__).resolve().parents[2] / "jupyter_exec"
    found = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = getattr(node, "attr", None) or getattr(node, "id", None)
            if name == "literal_eval":
                found.append(f"{path.relative_to(package)}:{getattr(node, 'lineno', '?')}")
    assert not found, found
