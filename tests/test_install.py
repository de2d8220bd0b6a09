"""Installing behaves as a user expects: the wheel, and the development install where it matters.

The wheel tests build from a clean copy of the tree (the files a commit carries: no build
output, no ``node_modules``) with pip, exactly as ``pip install .`` does, through the project's
build backend (``server_extension/build_backend.py``), which runs the JupyterLab extension's
TypeScript build first. One wheel build per test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import jupyter_exec

REPO = Path(__file__).parents[1]
LABEXTENSION_SOURCES = Path("server_extension", "labextension")
SKIP_VARIABLES = ("JUPYTER_EXEC_SKIP_LABEXTENSION", "SKIP_JUPYTER_BUILDER")
DATA = ".data/data/"  # inside the wheel, before what installs under the environment's prefix
LABEXTENSION = "share/jupyter/labextensions/jupyter-exec/"
ENABLE_FILE = "etc/jupyter/jupyter_server_config.d/jupyter_exec.json"


def test_the_server_extension_is_enabled_in_this_environment() -> None:
    jupyter = Path(sys.executable).with_name("jupyter")
    listing = subprocess.run(
        [str(jupyter), "server", "extension", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = (listing.stdout + listing.stderr).splitlines()
    ours = [line for line in lines if line.strip().startswith("jupyter_exec.server ")]
    assert ours, "jupyter_exec.server is not listed by `jupyter server extension list`"
    assert "enabled" in ours[0]
    assert any("jupyter_exec.server" in line and "OK" in line for line in lines)


@pytest.mark.timeout(900)
def test_a_clean_checkout_builds_the_labextension_into_the_wheel_and_sdist(
    tmp_path: Path,
) -> None:
    """``pip wheel .`` runs the TypeScript build; the wheel installs the panel and enables the
    server extension; the sdist carries the sources, the lock file and the build.

    The copy reuses this checkout's ``node_modules`` when it matches the lock file (it is only
    the locked dependencies, as an npm cache would be), so a CI run does one ``npm ci``, not two;
    everything the wheel carries is compiled and bundled from the copy's sources.
    """
    source = _clean_copy(tmp_path / "src")
    modules = REPO / LABEXTENSION_SOURCES / "node_modules"
    installed = modules / ".package-lock.json"
    lock = REPO / LABEXTENSION_SOURCES / "package-lock.json"
    if installed.is_file() and installed.stat().st_mtime >= lock.stat().st_mtime:
        (source / LABEXTENSION_SOURCES / "node_modules").symlink_to(modules)
    assert not (source / "jupyter_exec" / "labextension").exists()

    built = _pip_wheel(source, tmp_path / "dist", _environment())

    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheel = zipfile.ZipFile(_one(tmp_path / "dist", "jupyter_exec-*.whl"))
    data = _data_files(wheel)
    meta = json.loads(wheel.read(_data_name(wheel, LABEXTENSION + "package.json")))
    assert meta["name"] == "jupyter-exec"
    # `jupyter labextension list` shows the npm package's version: the package's own.
    assert meta["version"] == jupyter_exec.__version__
    assert {"package.json", "install.json", meta["jupyterlab"]["_build"]["load"]} <= {
        name.removeprefix(LABEXTENSION) for name in data if name.startswith(LABEXTENSION)
    }
    install = json.loads(wheel.read(_data_name(wheel, LABEXTENSION + "install.json")))
    assert (install["packageManager"], install["packageName"]) == ("python", "jupyter-exec")
    enable = json.loads(wheel.read(_data_name(wheel, ENABLE_FILE)))
    assert enable["ServerApp"]["jpserver_extensions"] == {"jupyter_exec.server": True}

    # The sdist, from the same tree (the build is up to date: no npm runs again).
    hook = "import build_backend, sys; print(build_backend.build_sdist(sys.argv[1]))"
    sdist = subprocess.run(
        [sys.executable, "-c", hook, str(tmp_path / "sdist")],
        cwd=source, env={**_environment(), "PYTHONPATH": str(source / "server_extension")},
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert sdist.returncode == 0, sdist.stderr[-3000:]
    assert "up to date" in sdist.stderr
    with tarfile.open(tmp_path / "sdist" / sdist.stdout.split()[-1]) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    sources = LABEXTENSION_SOURCES.as_posix()
    assert {
        f"{sources}/package.json",
        f"{sources}/package-lock.json",
        f"{sources}/tsconfig.json",
        f"{sources}/build.mjs",
        f"{sources}/src/index.ts",
        "server_extension/build_backend.py",
        "server_extension/build_labextension.py",
        "jupyter_exec/labextension/package.json",
        f"jupyter_exec/labextension/{meta['jupyterlab']['_build']['load']}",
    } <= names
    assert not [name for name in names if "/node_modules/" in name or name.endswith("tsbuildinfo")]


def test_without_npm_the_build_stops_and_says_what_to_install(tmp_path: Path) -> None:
    """No npm on PATH: no wheel, and a message (not a traceback) naming Node.js and the way out."""
    source = _clean_copy(tmp_path / "src")

    built = _pip_wheel(source, tmp_path / "dist", _environment(without=("npm", "node")))

    output = built.stdout + built.stderr
    assert built.returncode != 0, output[-3000:]
    assert not list((tmp_path / "dist").glob("*.whl"))
    assert "jupyter-exec: ERROR: building the JupyterLab extension" in output, output[-3000:]
    assert "needs Node.js >= 18 and npm, and `npm` is not on PATH" in output
    assert "JUPYTER_EXEC_SKIP_LABEXTENSION=1 pip install" in output
    assert "Traceback" not in output


def test_the_skip_variable_builds_the_package_without_the_labextension(tmp_path: Path) -> None:
    """For the docs or an environment that never runs JupyterLab: no Node needed, no panel."""
    source = _clean_copy(tmp_path / "src")
    environment = _environment(without=("npm", "node"))
    environment["JUPYTER_EXEC_SKIP_LABEXTENSION"] = "1"

    built = _pip_wheel(source, tmp_path / "dist", environment)

    output = built.stdout + built.stderr
    assert built.returncode == 0, output[-3000:]
    data = _data_files(zipfile.ZipFile(_one(tmp_path / "dist", "jupyter_exec-*.whl")))
    assert ENABLE_FILE in data
    assert not [name for name in data if name.startswith(LABEXTENSION)]


def _clean_copy(target: Path) -> Path:
    """The files a commit of this checkout would carry (tracked, and new ones git does not
    ignore), copied as they are in the work tree: no build output, no ``node_modules``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    for name in filter(None, listed.stdout.decode().split("\0")):
        origin = REPO / name
        if origin.is_file():  # not a file deleted in the work tree and not yet committed
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target / name)
    return target


def _environment(without: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment with the skip variables unset and, if asked, no folder on
    PATH that holds one of the ``without`` commands."""
    environment = {k: v for k, v in os.environ.items() if k not in SKIP_VARIABLES}
    folders = environment.get("PATH", "").split(os.pathsep)
    kept = [f for f in folders if f and not any(Path(f, cmd).exists() for cmd in without)]
    environment["PATH"] = os.pathsep.join(kept)
    for command in without:
        assert shutil.which(command, path=environment["PATH"]) is None
    return environment


def _pip_wheel(
    source: Path, dist: Path, environment: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``pip wheel`` of the tree: the build ``pip install .`` runs, build isolation included."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
         "--wheel-dir", str(dist), str(source)],
        env=environment, capture_output=True, text=True, check=False, timeout=840,
    )  # fmt: skip


def _one(folder: Path, pattern: str) -> Path:
    (found,) = folder.glob(pattern)
    return found


def _data_files(wheel: zipfile.ZipFile) -> set[str]:
    """What the wheel installs under the environment's prefix (share/..., etc/...)."""
    return {name.split(DATA, 1)[1] for name in wheel.namelist() if DATA in name}


def _data_name(wheel: zipfile.ZipFile, installed: str) -> str:
    (name,) = [name for name in wheel.namelist() if name.endswith(DATA + installed)]
    return name
