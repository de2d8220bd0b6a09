"""Run the E2B JavaScript SDK's own test suite (e2b-dev/code-interpreter ``js/tests``) against us.

Not part of CI: it needs a copy of that repository, which is read at run time
and never copied into ours. Give its git directory (a clone or a bare mirror)
or an unpacked checkout::

    python tests/e2b/js_suite.py [--docker] [--debug] /path/to/code-interpreter [vitest args...]

The SDK is the published one, ``@e2b/code-interpreter`` at the version the
repository's ``js/package.json`` names, with the ``vitest`` it names, both
installed from npm into a cache folder kept per version
(``$XDG_CACHE_HOME/jupyter-exec/e2b-js-suite``), so a second run installs
nothing. The tests import the SDK from ``../src``: that folder is written
here, one line re-exporting the installed package, so they run against the
code users install.

The suite runs in API mode by default (a sandbox per test, created through
``E2B_API_URL`` with its own token; most of its tests are skipped in debug
mode), against a server started here on a free loopback port, local kernels
or, with ``--docker``, Docker ones. A pass table per test file follows,
then each failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

from e2b_server_helpers import API_KEY, run_server
from language_kernels import install_language_kernels
from sdk_suite import table, unpack

from jupyter_exec.e2b import E2BConfig

CONFIG = """import { defineConfig } from 'vitest/config'
export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    exclude: ['tests/runtimes/**'],
    testTimeout: 60000,
    hookTimeout: 120000,
    maxWorkers: 2,
    environment: 'node',
  },
})
"""
"""Our vitest config: the suite's files and timeouts, at most two workers (a 2-core machine)."""

SHIM = "export * from '@e2b/code-interpreter'\nexport { default } from '@e2b/code-interpreter'\n"
"""``src/index.ts``: what the tests import as ``../src``, the installed SDK."""


def export_js(repo: Path, into: Path) -> Path:
    """``js/tests`` and ``js/package.json`` of ``repo`` (a checkout, or a git dir)."""
    if (repo / "js" / "tests").is_dir():
        shutil.copytree(repo / "js" / "tests", into / "js" / "tests")
        shutil.copy(repo / "js" / "package.json", into / "js" / "package.json")
        return into / "js"
    unpack(repo, into, ["js/tests", "js/package.json"])
    return into / "js"


def sdk_modules(package: dict[str, object]) -> Path:
    """``node_modules`` with the SDK and vitest the suite's package.json names (cached)."""
    dev = dict(package.get("devDependencies") or {})  # type: ignore[call-overload]
    wanted = [f"@e2b/code-interpreter@{package['version']}", f"vitest@{dev.get('vitest', '*')}"]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(" ".join(wanted).encode()).hexdigest()[:12]
    folder = cache / "jupyter-exec" / "e2b-js-suite" / key
    if not (folder / "node_modules" / "@e2b" / "code-interpreter").is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "package.json").write_text('{"private": true}\n')
        print(f"installing {' '.join(wanted)} into {folder}", file=sys.stderr)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(folder),
                        *wanted], check=True)  # fmt: skip
    return folder / "node_modules"


def report(results: Path, root: Path) -> str:
    """Passed / failed / skipped per test file, as a Markdown table, then each failure."""
    counts: dict[str, Counter[str]] = {}
    failures = []
    for suite in json.loads(results.read_text())["testResults"]:
        name = Path(suite["name"]).relative_to(root).as_posix()
        count = counts.setdefault(name, Counter())
        cases = suite.get("assertionResults") or []
        if not cases and suite.get("status") == "failed":  # the file did not load
            count["failed"] += 1
            failures.append(f"- {name}: {(suite.get('message') or '').splitlines()[:1]}")
        for case in cases:
            status = case["status"]
            outcome = {"passed": "passed", "failed": "failed"}.get(status, "skipped")
            count[outcome] += 1
            if outcome == "failed":
                message = " ".join(case.get("failureMessages") or [])
                first = message.splitlines()[0][:200] if message else ""
                failures.append(f"- {name} > {case['title']}: {first}")
    return table(counts, failures)


def main(argv: list[str]) -> int:
    flags = {"--docker", "--debug"}
    chosen = {a for a in argv if a in flags}
    rest = [a for a in argv if a not in flags]
    if not rest:
        print(__doc__, file=sys.stderr)
        return 2
    repo, extra = Path(rest[0]), rest[1:]
    with tempfile.TemporaryDirectory(prefix="e2b-js-suite-") as scratch:
        suite = export_js(repo, Path(scratch) / "src")
        package = json.loads((suite / "package.json").read_text())
        (suite / "node_modules").symlink_to(sdk_modules(package))
        (suite / "src").mkdir()
        (suite / "src" / "index.ts").write_text(SHIM)
        (suite / "vitest.config.mts").write_text(CONFIG)
        kernels = install_language_kernels(Path(scratch) / "kernels")
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            [str(kernels), *filter(None, [os.environ.get("JUPYTER_PATH")])]
        )
        results = Path(scratch) / "results.json"
        options = {"backend": "docker"} if "--docker" in chosen else {}
        debug = "--debug" in chosen
        config = E2BConfig(root_dir=Path(scratch) / "sandboxes", ports=(0,), debug=debug,
                           api_key=API_KEY, max_sessions=0,
                           session_options=options)  # fmt: skip
        for running in run_server(config):
            env = {**os.environ, "E2B_SANDBOX_URL": running.url, "E2B_API_KEY": API_KEY}
            env.pop("E2B_DEBUG", None)
            if debug:
                env["E2B_DEBUG"] = "true"
            else:
                env["E2B_API_URL"] = running.url
            vitest = suite / "node_modules" / ".bin" / "vitest"
            command = [str(vitest), "run", "--reporter=default", "--reporter=json",
                       f"--outputFile.json={results}", *extra]  # fmt: skip
            code = subprocess.run(command, env=env, cwd=suite, check=False).returncode
            if results.exists():
                print(report(results, suite))
            return code
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
