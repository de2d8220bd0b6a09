"""``binder/`` as mybinder.org uses it: install into a fresh venv, run postBuild, start JupyterLab.

The venv with ``binder/requirements.txt`` is cached under ``~/.cache/jupyter-exec-tests``, keyed
by a hash of that file and the Python version (installing JupyterLab takes a while); the
package itself is installed fresh every time, by ``binder/postBuild``, from a copy of this
checkout. The server must come up with the extension enabled *by the installed config file*
(no ``enable`` step), and the demo notebook must run against it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import requests
from server_helpers import JupyterProcess

REPO = Path(__file__).parents[2]
CACHE = Path(
    os.environ.get("JUPYTER_EXEC_TEST_CACHE", Path.home() / ".cache" / "jupyter-exec-tests")
)
_SKIP = {".git", ".venv", "artifacts", "build", "dist", "node_modules", "demo-output"}


def _binder_venv() -> Path:
    requirements = (REPO / "binder" / "requirements.txt").read_bytes()
    key = hashlib.sha256(requirements + sys.version.encode()).hexdigest()[:16]
    venv = CACHE / f"binder-{key}"
    if (venv / ".complete").exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r",
         str(REPO / "binder" / "requirements.txt")],
        check=True,
    )  # fmt: skip
    (venv / ".complete").touch()
    return venv


def _checkout_copy(target: Path) -> Path:
    def ignore(folder: str, names: list[str]) -> set[str]:
        return {
            n for n in names
            if n in _SKIP or n.endswith((".egg-info", "_cache")) or n == "__pycache__"
        }  # fmt: skip

    shutil.copytree(REPO, target, ignore=ignore, symlinks=True)
    return target


def test_binder_environment_serves_the_extension(tmp_path: Path) -> None:
    venv = _binder_venv()
    repo = _checkout_copy(tmp_path / "repo")
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    build = subprocess.run(
        ["bash", "binder/postBuild"], cwd=repo, env=env, capture_output=True, text=True, check=False
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]

    # postBuild's own check printed what `jupyter server extension list` says of the
    # extension (every line naming it): read there, not asked of a second `jupyter` start.
    lines = build.stdout.splitlines()
    assert any("jupyter_exec.server" in ln and "enabled" in ln for ln in lines), lines
    assert any("jupyter_exec.server" in ln and "OK" in ln for ln in lines), lines

    lab = JupyterProcess(
        tmp_path / "lab", app="lab", python=venv / "bin" / "python", enable_extension=False, env=env
    )
    with lab:
        sessions = requests.get(f"{lab.url}/api/exec/sessions", headers=lab.headers, timeout=10)
        assert sessions.status_code == 200, lab.tail()
        assert "jupyter_exec.server | extension was successfully loaded" in lab.log.read_text()

        # The demo notebook, run as a person would on Binder: it finds this server and uses it.
        demo = lab.root / "demo.ipynb"
        shutil.copy(repo / "binder" / "demo.ipynb", demo)
        run = subprocess.run(
            [str(venv / "bin" / "jupyter"), "nbconvert", "--to", "notebook", "--execute",
             "--inplace", str(demo)],
            env=lab.env | {"PATH": env["PATH"]}, capture_output=True, text=True, check=False,
            timeout=180,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        outputs = [
            o.get("text", "") for c in json.loads(demo.read_text())["cells"]
            for o in c.get("outputs", [])
        ]  # fmt: skip
        printed = "".join("".join(t) if isinstance(t, list) else t for t in outputs)
        assert "ok -> 28.27" in printed
        assert "saved: jupyter-exec/" in printed
        listed_sessions = requests.get(
            f"{lab.url}/api/exec/sessions", headers=lab.headers, timeout=10
        ).json()
        assert len(listed_sessions) == 1
        notebook = lab.root / listed_sessions[0]["notebook"]["path"]
        assert len(json.loads(notebook.read_text())["cells"]) == 2
