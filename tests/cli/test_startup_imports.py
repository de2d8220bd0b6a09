"""A command imports only what it uses: ``--version`` and ``--help`` load no kernel, server or
Docker machinery.

Each case runs the real command line in a fresh interpreter and reads back the
modules it imported, rather than timing it: what a command imports is the
same on any machine, and it is what makes ``jupyter-exec --version`` take
seconds on a loaded one (jupyter_server, tornado, zmq and Docker's SDK, tens
of milliseconds each on a quiet machine, a second or more together on a busy
one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = (
    "jupyter_server",
    "tornado",
    "docker",
    "nbformat",
    "jupyter_client",
    "zmq",
    "traitlets",
    "mcp",
    "IPython",
    "uvicorn",
    "starlette",
    "pydantic",
)
"""What the command line's own words never need: kernels, servers, Docker, notebooks, MCP."""

_RUN = """\
import json, runpy, sys
out, sys.argv = sys.argv[1], ["jupyter-exec", *sys.argv[2:]]
try:
    runpy.run_module("jupyter_exec", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    status = stop.code
with open(out, "w") as f:
    json.dump({"status": status, "modules": sorted(sys.modules)}, f)
"""
"""``python -m jupyter_exec ARGS``, then the modules it loaded, written to a file (its own
output stays the command's)."""


def _imported(tmp_path: Path, *argv: str) -> tuple[int, str, set[str]]:
    """The exit status, the output, and the top-level packages ``jupyter-exec ARGV`` imported."""
    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(out), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "100"},
    )
    seen = json.loads(out.read_text())
    ours.clear()
    ours.update(name for name in seen["modules"] if name.startswith("jupyter_exec"))
    return seen["status"], done.stdout, {name.split(".")[0] for name in seen["modules"]}


ours: set[str] = set()
"""The project's own modules the last :func:`_imported` command loaded."""


def test_version_imports_no_kernel_server_or_docker_code(tmp_path: Path) -> None:
    from jupyter_exec import __version__

    status, output, packages = _imported(tmp_path, "--version")
    assert status == 0
    assert output.strip() == f"jupyter-exec {__version__}"
    assert packages.isdisjoint(HEAVY), sorted(packages & set(HEAVY))
    # Nor any command's module: the version is answered before a parser is built.
    root = {"", "._lazy", "._version", ".exceptions", ".__main__", ".cli"}  # `import jupyter_exec`
    assert ours <= {f"jupyter_exec{name}" for name in root}, sorted(ours)


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("run", "--help"), ("e2b", "--help"), ("mcp", "--help"), ("gateway", "--help")],
    ids=" ".join,
)
def test_help_imports_no_kernel_server_or_docker_code(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    status, output, packages = _imported(tmp_path, *argv)
    assert status == 0
    assert "usage: jupyter-exec" in output
    assert packages.isdisjoint(HEAVY), sorted(packages & set(HEAVY))


def test_the_package_imports_its_heavy_names_on_first_use(tmp_path: Path) -> None:
    """``import jupyter_exec`` is cheap; ``jupyter_exec.Session`` still works, and says so."""
    code = (
        "import json, sys, jupyter_exec\n"
        "before = sorted({m.split('.')[0] for m in sys.modules})\n"
        "session = jupyter_exec.Session\n"
        "after = sorted({m.split('.')[0] for m in sys.modules})\n"
        "print(json.dumps([before, after, repr(session), 'Session' in dir(jupyter_exec)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    before, after, shown, listed = json.loads(done.stdout)
    assert set(before).isdisjoint(HEAVY), sorted(set(before) & set(HEAVY))
    assert "jupyter_client" in after
    assert shown == "<class 'jupyter_exec.Session'>"
    assert listed
