"""The agent runner's rules for what reaches the kernel (end to end: test_ag2*.py, test_mcp.py)."""

from __future__ import annotations

import pytest

from jupyter_exec.agents.agent import kernel_source, not_run_notice
from jupyter_exec.agents.codeblocks import CodeBlock


@pytest.mark.parametrize(
    ("code", "language", "expected"),
    [
        ("!pip install pandas", "python", "!pip install -qq pandas"),
        ("%pip install pandas numpy", "python", "%pip install -qq pandas numpy"),
        ("!pip install -q pandas", "python", "!pip install -q pandas"),
        ("x = 1  # pip install in a comment", "python", "x = 1  # pip install in a comment"),
        ('!echo "hi"\n!ls', "sh", '%%bash\necho "hi"\nls'),
        ("!pip install polars", "sh", "%%bash\npip install -qq polars"),
        ("echo plain", "sh", "%%bash\necho plain"),
    ],
)
def test_kernel_source(code: str, language: str, expected: str) -> None:
    assert kernel_source(CodeBlock(code, language)) == expected


def test_not_run_notice_counts() -> None:
    assert not_run_notice(1) == "[1 later code block was not run because this one failed]"
    assert "2 later code blocks were not run" in not_run_notice(2)
