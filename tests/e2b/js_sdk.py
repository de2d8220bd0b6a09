"""The E2B JavaScript SDK, run through node by the tests that only it shows.

``scripts/provision-node-sdk`` installs ``@e2b/code-interpreter`` (the version
``tests/e2b/js/package.json`` pins) into a cache folder named by that file's
hash, :data:`SDK_DIR`; :func:`run_js` runs one of our scripts in
``tests/e2b/js`` (CommonJS, so ``NODE_PATH`` finds the SDK) with the
environment the SDK reads, and returns what it printed as JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["SDK_DIR", "JSSDKMissing", "run_js"]

HERE = Path(__file__).parent / "js"
CACHE = Path(os.environ.get("JUPYTER_EXEC_TEST_CACHE", Path.home() / ".cache/jupyter-exec-tests"))
SDK_DIR = CACHE / f"e2b-js-{hashlib.sha256((HERE / 'package.json').read_bytes()).hexdigest()[:12]}"
"""Where ``scripts/provision-node-sdk`` installs the SDK (a new folder when the pin changes)."""


class JSSDKMissing(RuntimeError):
    """node or the SDK is not there: ``scripts/provision-node-sdk`` was not run."""


def _modules() -> Path:
    if shutil.which("node") is None:
        raise JSSDKMissing(
            "node is not installed: install Node.js 20+, then scripts/provision-node-sdk"
        )
    if not (SDK_DIR / ".jupyter-exec-provisioned").is_file():
        raise JSSDKMissing(
            f"the E2B JavaScript SDK is not in {SDK_DIR}: run scripts/provision-node-sdk"
        )
    return SDK_DIR / "node_modules"


def run_js(script: str, env: dict[str, str], *args: str, timeout: float = 300) -> Any:
    """Run ``tests/e2b/js/<script>`` with ``env`` (the SDK's settings); its last line as JSON.

    A script that fails raises AssertionError with what it printed.
    """
    full = {**os.environ, **env, "NODE_PATH": str(_modules())}
    done = subprocess.run(["node", str(HERE / script), *args], env=full, capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip
    assert done.returncode == 0, (
        f"{script} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    )
    return json.loads(done.stdout.strip().splitlines()[-1])
