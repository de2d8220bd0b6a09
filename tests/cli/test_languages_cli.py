"""``jupyter-exec kernels install|list`` for each language and ``run --language``, as real
processes: the kernelspecs land where asked, the kernels they name start, and bad names
get our own message with the install command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager

from jupyter_exec import Session
from jupyter_exec.cli.exits import EXIT_OK, EXIT_USAGE
from tests.cli_helpers import run_cli

pytestmark = pytest.mark.languages


def test_kernels_install_puts_each_languages_kernelspec_in_the_prefix(tmp_path: Path) -> None:
    done = run_cli("kernels", "install", "r", "bash", "js", "ts", "java", "--prefix", str(tmp_path))
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    kernels = tmp_path / "share" / "jupyter" / "kernels"
    r = json.loads((kernels / "ir" / "kernel.json").read_text())
    assert r["language"] == "R"
    bash = json.loads((kernels / "bash" / "kernel.json").read_text())
    assert "codemirror_mode" not in bash  # not a kernelspec field: jupyter_client would warn
    deno = json.loads((kernels / "deno" / "kernel.json").read_text())
    assert deno["interrupt_mode"] == "message"
    assert Path(deno["argv"][0]).name == "deno"
    # javascript and typescript share Deno's kernel: installed once.
    assert done.stdout.count("kernelspec 'deno'") == 1
    java = json.loads((kernels / "java" / "kernel.json").read_text())
    assert java["language"] == "java"
    assert (kernels / "java" / "jjava.jar").is_file()  # the kernel itself comes along
    assert sorted(p.name for p in kernels.iterdir()) == ["bash", "deno", "ir", "java"]
    assert f"in {kernels / 'ir'}" in done.stdout

    # Jupyter finds them there, and each starts (bash shown; the others in the session tests).
    found = KernelSpecManager(kernel_dirs=[str(kernels)]).find_kernel_specs()
    assert {"ir", "bash", "deno", "java"} <= set(found)
    env = {**os.environ, "JUPYTER_PATH": str(tmp_path / "share" / "jupyter")}
    with Session(language="bash", work_dir=tmp_path / "w", env=env) as s:
        assert s.execute("echo $((6 * 7))").stdout == "42\n"


def test_kernels_list_names_every_language_and_where_its_kernel_is() -> None:
    done = run_cli("kernels", "list")
    assert done.returncode == EXIT_OK, done.stderr
    rows = {line.split("\t")[0]: line.split("\t") for line in done.stdout.splitlines()}
    for language, kernel in [("python", "python3"), ("r", "ir"), ("typescript", "deno")]:
        assert rows[language][1] == kernel
        assert Path(rows[language][2], "kernel.json").is_file()
    assert "Python 3 (Docker)" in done.stdout


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["kernels", "install", "cobol"], "unknown language 'cobol'"),
        (["kernels", "install", "python"], "comes with jupyter-exec"),
        (["run", "cell.txt", "--language", "cobol"], "jupyter-exec kernels install"),
        (["run", "cell.txt", "--language", "r", "--kernel-name", "bash"], "give one of them"),
    ],
)
def test_a_bad_language_is_a_usage_error_with_our_message(
    argv: list[str], says: str, tmp_path: Path
) -> None:
    (tmp_path / "cell.txt").write_text("1\n")
    done = run_cli(*argv, cwd=tmp_path)
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr


def test_run_an_r_script_with_language_r(tmp_path: Path) -> None:
    script = tmp_path / "analysis.R"
    script.write_text("scores <- c(3, 4, 5)\n# %%\ncat(sum(scores) * 2, '\\n')\n")
    done = run_cli("run", str(script), "--language", "r", "--work-dir", str(tmp_path / "out"))
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    assert "24" in done.stdout
    notebook = json.loads((tmp_path / "out" / "analysis.ipynb").read_text())
    assert notebook["metadata"]["kernelspec"]["name"] == "ir"
    assert len(notebook["cells"]) == 2
