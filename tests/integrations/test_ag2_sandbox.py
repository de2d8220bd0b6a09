"""AG2 1.x's ``Sandbox`` protocol on a session, driven by a real AG2 1.x agent in its own venv.

AG2 1.x cannot share a venv with the AG2 0.x the test extra installs; the
venv is the one ``tests/integrations/test_ag2_tools.py`` makes (cached per machine, built once).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_ag2_tools import (  # the fixture making AG2 1.x's venv, and its environment
    ag2x_environment,
    ag2x_python,  # noqa: F401
)

SCRIPT = Path(__file__).parents[1] / "scripts" / "ag2x_sandbox_drive.py"

pytestmark = pytest.mark.timeout(900)


def test_shell_and_code_tools_share_one_session(
    ag2x_python: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [str(ag2x_python), str(SCRIPT), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=ag2x_environment(),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])

    assert report["is_sandbox"] is True
    assert report["is_factory"] is True
    assert report["reply"] == "done"
    wrote, read, failed, counted = report["tool_results"]
    assert "data.csv" not in read  # the code tool read the file the shell tool wrote
    assert "data.csv" in failed
    assert "5" in failed  # a failing command's own exit status reaches the model
    assert counted.strip() == "2"  # the code tool's kernel kept ``rows``
    del wrote

    # argv is run as given: no word splitting, no expansion; env is passed.
    is_result, output, status = report["argv"]
    assert is_result is True
    assert output == "a b|$HOME|"
    assert status == 0
    assert report["env"].strip() == "hi"
    exit_code, seconds = report["timeout"]
    assert exit_code == 124
    assert seconds < 20
    assert report["put"] == "put content"
    assert report["removed"] == ""
    assert report["absolute"].startswith("refused")
    assert report["code_adapter"][1] == 0
    assert report["code_adapter"][0].strip() == "42"
    workdir, host = report["workdir"]
    assert workdir == host == str(tmp_path.resolve())

    # Every command is in the session's notebook, beside the code tool's cells.
    notebook = json.loads(Path(report["notebook"]).read_text())
    sources = ["".join(c["source"]) for c in notebook["cells"]]
    assert any(s.startswith("%%bash\n") and "data.csv" in s for s in sources)
    assert any("rows = open('data.csv')" in s for s in sources)
