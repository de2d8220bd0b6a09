"""Run AG2's own Jupyter and command-line executor tests against our AG2 executors.

Not part of CI: it needs a copy of AG2's repository (ag2ai/ag2), read at run
time and never copied into ours. Give its git directory (a clone or a bare
mirror) or a checkout::

    python tests/ag2_suite.py /path/to/ag2 [pytest args...]

The files ``test/coding/test_embedded_ipython_code_executor.py`` and
``test/coding/test_commandline_code_executor.py`` are exported to a scratch
folder beside a conftest written here, which puts our classes where AG2's
are before the tests import them::

    EmbeddedIPythonCodeExecutor, JupyterCodeExecutor -> SessionCodeExecutor
    LocalCommandLineCodeExecutor                     -> SessionCommandLineExecutor

(AG2's ``LocalJupyterCodeExecutor`` test class hands a kernel-gateway server
to ``JupyterCodeExecutor``; ours needs none, so the server is not started and
not passed on.) AG2's Docker executors have an API of their own and are not
replaced: the run sets ``AUTOGEN_USE_DOCKER=False``, as AG2's CI does without
Docker. Deselected, because they test AG2's own API rather than an executor's
behaviour: the command sanitiser (``sanitize_command``), ``virtual_env_context``
(ours is ``environment="venv:..."``), and the Docker-only cases. The summary
prints passed / failed per file and each failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
from collections import Counter
from io import BytesIO
from pathlib import Path

FILES = (
    "test/coding/test_embedded_ipython_code_executor.py",
    "test/coding/test_commandline_code_executor.py",
)
DESELECT = (
    "dangerous_commands or custom_python_env or docker or container_create_kwargs "
    "or policy_override"
)

CONFTEST = '''
"""Our AG2 executors in the place of AG2's (written by jupyter-exec's tests/ag2_suite.py)."""
from typing import Any

import autogen.coding as coding
import autogen.coding.jupyter as jupyter
import autogen.coding.jupyter.embedded_ipython_code_executor as embedded
import autogen.coding.local_commandline_code_executor as local

from jupyter_exec.integrations.ag2 import SessionCodeExecutor, SessionCommandLineExecutor

MOCK_OPEN_AI_API_KEY = "sk-mock-key-for-offline-tests"


class GatewayFreeExecutor(SessionCodeExecutor):
    """AG2's JupyterCodeExecutor signature: the server it is given is not needed."""

    def __init__(self, jupyter_server: Any = None, **options: Any) -> None:
        super().__init__(**options)


jupyter.EmbeddedIPythonCodeExecutor = SessionCodeExecutor
embedded.EmbeddedIPythonCodeExecutor = SessionCodeExecutor
jupyter.JupyterCodeExecutor = GatewayFreeExecutor
jupyter.LocalJupyterServer = lambda *args, **kwargs: None
local.LocalCommandLineCodeExecutor = SessionCommandLineExecutor
coding.LocalCommandLineCodeExecutor = SessionCommandLineExecutor
'''

PYTEST_INI = """[pytest]
markers =
    docker
    jupyter_executor
"""


def export(repo: Path, into: Path) -> Path:
    """AG2's two test files under ``into/test/coding`` (from a checkout, or a git dir)."""
    coding = into / "test" / "coding"
    coding.mkdir(parents=True)
    for name in FILES:
        if (repo / name).is_file():
            (into / name).write_bytes((repo / name).read_bytes())
            continue
        archive = subprocess.run(
            ["git", f"--git-dir={repo}", "archive", "HEAD", name],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(into, filter="data")
    (into / "test" / "__init__.py").write_text("")
    (coding / "__init__.py").write_text("")
    (into / "test" / "conftest.py").write_text(CONFTEST)
    (into / "pytest.ini").write_text(PYTEST_INI)
    return into


def report(junit: Path) -> str:
    counts: dict[str, Counter[str]] = {}
    failures = []
    for case in ElementTree.parse(junit).iter("testcase"):
        name = case.get("classname") or "?"
        failed = case.find("failure")
        if failed is None:
            failed = case.find("error")
        outcome = "skipped" if case.find("skipped") is not None else "passed"
        if failed is not None:
            outcome = "failed"
            first = (failed.get("message") or "").splitlines()[0][:200]
            failures.append(f"- {name}::{case.get('name')}: {first}")
        counts.setdefault(name.split(".")[2] if name.count(".") >= 2 else name, Counter())[
            outcome
        ] += 1
    lines = ["| AG2 test file | passed | failed | skipped |", "|---|---:|---:|---:|"]
    for name, count in sorted(counts.items()):
        lines.append(f"| `{name}` | {count['passed']} | {count['failed']} | {count['skipped']} |")
    return "\n".join([*lines, "", *failures])


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    repo, extra = Path(argv[0]), argv[1:]
    with tempfile.TemporaryDirectory(prefix="ag2-suite-") as scratch:
        root = export(repo, Path(scratch) / "src")
        junit = Path(scratch) / "junit.xml"
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        env = {**os.environ, "AUTOGEN_USE_DOCKER": "False", "PATH": path}  # AG2 runs `jupyter`
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-c",
                   str(root / "pytest.ini"), "--rootdir", str(root), "-q", "-rfE",
                   "--timeout=300", "-k", f"not ({DESELECT})", f"--junitxml={junit}",
                   *(str(root / name) for name in FILES), *extra]  # fmt: skip
        code = subprocess.run(command, env=env, cwd=root, check=False).returncode
        if junit.exists():
            print(report(junit))
        return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
