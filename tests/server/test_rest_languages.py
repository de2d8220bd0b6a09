"""``POST /api/exec/sessions`` with a ``language``: a session on that language's kernel, a
notebook that says so, and a 400 with a reason for a language that cannot be had."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec.cli.kernels import install_language

Api = Callable[..., Awaitable[tuple[int, Any]]]

pytestmark = pytest.mark.languages


async def test_an_r_session_over_rest(api: Api, root: Path, jp_data_dir: Path) -> None:
    # The test server sees only its own Jupyter dirs: R's kernel goes in as a user's would.
    install_language("r", user=True, prefix=None)
    assert (jp_data_dir / "kernels" / "ir" / "kernel.json").is_file()
    status, model = await api("POST", "sessions", body={"name": "stats", "language": "R"})
    assert status == 201, model
    sid = model["id"]
    try:
        status, out = await api("POST", "sessions", sid, "execute", body={"code": "x <- 41"})
        assert (status, out["status"]) == (200, "ok")
        status, out = await api("POST", "sessions", sid, "execute", body={"code": "cat(x + 1)"})
        assert (status, out["stdout"]) == (200, "42")
        nb = json.loads((root / model["notebook"]["path"]).read_text())
        assert nb["metadata"]["kernelspec"]["name"] == "ir"
        assert nb["metadata"]["language_info"]["name"] == "R"
    finally:
        await api("DELETE", "sessions", sid)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"language": "cobol"}, "unknown language 'cobol'"),
        ({"language": 3}, "language"),
        ({"language": "r", "kernel_name": "python3"}, "give one of them"),
        ({"language": "bash", "undo_steps": 2}, "'undo_steps' needs a Python kernel"),
    ],
)
async def test_a_language_that_cannot_be_had_is_a_400_with_a_reason(
    api: Api, body: dict[str, Any], says: str
) -> None:
    status, error = await api("POST", "sessions", body={"name": "nope", **body})
    assert status == 400, error
    assert says in json.dumps(error)
    status, sessions = await api("GET", "sessions")
    assert sessions == []
