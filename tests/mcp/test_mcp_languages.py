"""MCP's ``execute_code`` with ``language``: an R or TypeScript session made on first use,
its plot returned as an image, and a session kept to the language it was made with."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tests.mcp.test_mcp import PNG_MAGIC, _is_error, _stdio, _texts

pytestmark = [pytest.mark.timeout(180), pytest.mark.languages]


async def test_execute_code_in_r_and_typescript_sessions(tmp_path: Path) -> None:
    async with _stdio(tmp_path) as client:

        async def run(code: str, session: str, language: str) -> object:
            return await client.call_tool(
                "execute_code", {"code": code, "session": session, "language": language}
            )

        assert not _is_error(await run("x <- 41", "stats", "R"))
        assert "[1] 42" in _texts(await run("x + 1", "stats", "r"))
        plot = await run("plot(1:10)", "stats", "r")
        images = [c for c in plot.content if c.type == "image"]  # type: ignore[attr-defined]
        assert images, _texts(plot)
        assert base64.b64decode(images[0].data).startswith(PNG_MAGIC)
        failed = await run("stop('no data')", "stats", "r")
        assert _is_error(failed)
        assert "no data" in _texts(failed)

        assert not _is_error(await run("const n: number = 20", "web", "ts"))
        assert "42" in _texts(await run("n + 22", "web", "typescript"))

        # A session keeps its language: Python code is not sent to the R kernel.
        wrong = await run("import os", "stats", "python")
        assert _is_error(wrong)
        assert "session 'stats' runs r" in _texts(wrong)
        unknown = await run("1", "other", "cobol")
        assert _is_error(unknown)
        assert "unknown language 'cobol'" in _texts(unknown)
        listing = _texts(await client.call_tool("list_sessions", {}))
        assert "other" not in listing
