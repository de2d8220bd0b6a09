"""Run the E2B SDK's own test suite (e2b-dev/code-interpreter ``python/tests``) against our server.

Not part of CI: it needs a copy of that repository, which is read at run time
and never copied into ours. Give its git directory (a clone or a bare
mirror) or an unpacked checkout::

    python tests/e2b/sdk_suite.py [--api] [--docker] /path/to/code-interpreter [pytest args...]

By default the suite runs in the SDK's debug mode (``E2B_DEBUG=true``, which
skips the tests marked ``skip_debug``); with ``--api`` it runs in API mode, a
sandbox per test created through ``E2B_API_URL`` with its own token, and the
``skip_debug`` tests run too. Either way ``E2B_SANDBOX_URL`` points at a
server started here on a free loopback port. pytest's summary line gives the
pass count. The R, Deno and bash kernelspecs are installed into the scratch
folder first (:mod:`language_kernels`), so the SDK's language tests run on real
kernels of those languages.
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

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

from e2b_server_helpers import API_KEY, run_server
from language_kernels import install_language_kernels

from jupyter_exec.e2b import E2BConfig


def unpack(repo: Path, into: Path, paths: list[str]) -> None:
    """``paths`` of the HEAD of ``repo`` (a git dir, read with ``git archive``) under ``into``."""
    archive = subprocess.run(
        ["git", f"--git-dir={repo}", "archive", "HEAD", *paths],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def export_tests(repo: Path, into: Path) -> Path:
    """``python/tests`` of ``repo`` (a checkout, or a git dir read with ``git archive``)."""
    if (repo / "python" / "tests").is_dir():
        return repo / "python"
    unpack(repo, into, ["python/tests", "python/pytest.ini"])
    return into / "python"


def table(counts: dict[str, Counter[str]], failures: list[str]) -> str:
    """The pass table, per SDK test file and in all, then each failure."""
    total: Counter[str] = sum(counts.values(), Counter())
    lines = ["| SDK test file | passed | failed | skipped |", "|---|---:|---:|---:|"]
    for name, count in sorted(counts.items()):
        lines.append(f"| `{name}` | {count['passed']} | {count['failed']} | {count['skipped']} |")
    lines.append(f"| **all** | {total['passed']} | {total['failed']} | {total['skipped']} |")
    return "\n".join([*lines, "", *failures])


def report(junit: Path) -> str:
    """Passed / failed / skipped per test file, as a Markdown table, then each failure."""
    counts: dict[str, Counter[str]] = {}
    failures = []
    for case in ElementTree.parse(junit).iter("testcase"):
        name = (case.get("classname") or "?").replace(".", "/") + ".py"
        failed = case.find("failure")
        if failed is None:
            failed = case.find("error")
        outcome = "skipped" if case.find("skipped") is not None else "passed"
        if failed is not None:
            outcome = "failed"
            first = (failed.get("message") or "").splitlines()[0][:160]
            failures.append(f"- {name}::{case.get('name')}: {first}")
        counts.setdefault(name, Counter())[outcome] += 1
    return table(counts, failures)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    api = "--api" in argv[:2]
    docker = "--docker" in argv[:2]
    argv = [a for a in argv[:2] if a not in ("--api", "--docker")] + argv[2:]
    repo, extra = Path(argv[0]), argv[1:]
    with tempfile.TemporaryDirectory(prefix="e2b-sdk-suite-") as scratch:
        suite = export_tests(repo, Path(scratch) / "src")
        kernels = install_language_kernels(Path(scratch) / "kernels")
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            [str(kernels), *filter(None, [os.environ.get("JUPYTER_PATH")])]
        )
        junit = Path(scratch) / "junit.xml"
        options = {"backend": "docker"} if docker else {}
        config = E2BConfig(root_dir=Path(scratch) / "sandboxes", ports=(0,), debug=not api,
                           api_key=API_KEY, max_sessions=0,
                           session_options=options)  # fmt: skip
        for running in run_server(config):
            env = {**os.environ, "E2B_SANDBOX_URL": running.url, "E2B_API_KEY": API_KEY}
            if api:
                env.pop("E2B_DEBUG", None)
                env["E2B_API_URL"] = running.url
            else:
                env["E2B_DEBUG"] = "true"
            command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-c",
                       str(suite / "pytest.ini"), "--rootdir", str(suite), "-o",
                       "addopts=--import-mode=importlib", "-q", "-rfEs", "--timeout=120",
                       f"--junitxml={junit}", str(suite / "tests"), *extra]  # fmt: skip
            code = subprocess.run(command, env=env, cwd=suite, check=False).returncode
            if junit.exists():
                print(report(junit))
            return code
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
