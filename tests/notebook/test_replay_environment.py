"""The environment in the record, and replay telling what changed before it runs.

Real kernels, real venvs made from the package index (``six`` 1.16.0 beside the
shared venv's own six; cached in ``$JUPYTER_EXEC_CACHE`` like any managed venv, so only
the first run pays for them), and the real CLI.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_exec import Session
from jupyter_exec.cli import main
from jupyter_exec.engine.environments import VirtualEnv, default_cache_dir
from jupyter_exec.exceptions import KernelStartError, NotebookError
from jupyter_exec.notebook import envdiff
from jupyter_exec.notebook.replay import replay

OLD_SIX = "1.16.0"
SIX_HERE = __import__("importlib.metadata").metadata.version("six")


def _metadata(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text())["metadata"])


def test_what_a_traceback_imports_is_not_the_cells_and_costs_the_next_cell_no_scan(
    tmp_path: Path,
) -> None:
    """IPython imports stack_data and its kin the first time it shows a traceback (a timeout's
    KeyboardInterrupt, any error): counted as the cells' packages, the next cell's report
    scanned every installed distribution (0.25 to 0.9 s after a timeout)."""
    capture = "__import__('sys').modules['_jupyter_exec_environment']._capture"
    with Session(work_dir=tmp_path, name="tb", timeout=60) as session:
        session.execute("import time")
        slow = session.execute("time.sleep(600)", timeout=1)
        assert slow.status == "timeout"
        session.execute("1 / 0")  # (a failing cell's reply carries no report)
        session.execute("x = 1")  # its report is the first since the traceback's imports
        after = session.execute(
            f"{capture}._distributions is None, 'stack_data' in {capture}.baseline"
        )
        assert after.text == "(True, True)"  # no scan: nothing new was the cells' doing
    environment = _metadata(tmp_path / "tb.ipynb")["jupyter_exec"]["environment"]
    assert environment["packages"] == {}


def test_a_local_session_records_its_environment(tmp_path: Path) -> None:
    (tmp_path / "input.csv").write_text("a,b\n1,2\n")
    with Session(work_dir=tmp_path, name="env") as session:
        session.execute("import six\nwith open('input.csv') as f: rows = f.read()")
        session.execute("open('output.txt', 'w').write('written, not read')")
        names = session.execute("print(sorted(n for n in dir() if 'jupyter' in n))").stdout
    environment = _metadata(tmp_path / "env.ipynb")["jupyter_exec"]["environment"]
    assert environment["packages"] == {"six": SIX_HERE}
    assert environment["interpreter"]["version"].count(".") == 2
    assert environment["platform"]["system"] == os.uname().sysname
    assert environment["kernelspec"] == "python3"
    assert environment["backend"] == "local"
    digest = __import__("hashlib").sha256(b"a,b\n1,2\n").hexdigest()
    assert environment["files"] == {"input.csv": digest}  # output.txt was written, not read
    assert names.strip() == "[]"  # the capture leaves no name in the user's namespace


def test_environment_differences_are_listed_first_and_in_the_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "input.csv").write_text("1\n")
    with Session(work_dir=tmp_path, name="rec") as session:
        session.execute("import six\nprint(open('input.csv').read().strip())")
    path = tmp_path / "rec.ipynb"
    raw = json.loads(path.read_text())  # as if recorded elsewhere, with other versions
    environment = raw["metadata"]["jupyter_exec"]["environment"]
    environment["packages"] = {"six": "1.10.0", "gone-package": "0.1"}
    environment["interpreter"]["version"] = "3.9.1"
    environment["platform"]["machine"] = "riscv64"
    path.write_text(json.dumps(raw))
    (tmp_path / "input.csv").write_text("2\n")
    html = tmp_path / "out.html"
    assert main(["replay", str(path), "--report", str(html)]) == 1
    err = capsys.readouterr().err
    expected = [
        "interpreter: CPython 3.9.1 recorded, CPython "
        f"{environment['interpreter']['version'] and _here_version()} here",
        f"platform machine: riscv64 recorded, {os.uname().machine} here",
        "gone-package 0.1 recorded, not installed here",
        f"six 1.10.0 recorded, {SIX_HERE} here",
        "input file input.csv: its content changed (sha256 differs)",
    ]
    head = err.splitlines()
    assert head[0] == "replaying on the host: no --backend given and the record names no Docker"
    assert head[1] == "environment: 5 difference(s) from the record"
    assert head[2:7] == [f"  {line}" for line in expected]
    assert head[7].startswith("[1/1] cell 1 ...")  # before any cell ran
    page = html.read_text()
    assert f"six 1.10.0 recorded, {SIX_HERE} here" in page
    report = replay(path, output=tmp_path / "again.ipynb")
    assert list(report.environment) == expected
    assert report.to_dict()["environment_differences"] == expected
    assert report.extra["environment"]["recorded"]["packages"]["six"] == "1.10.0"


def _here_version() -> str:
    import platform

    return platform.python_version()


def test_runs_2_marks_a_random_cell_nondeterministic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Session(work_dir=tmp_path, name="random") as session:
        session.execute("import random\nprint(random.random())")
        session.execute("print('steady')")
    path = tmp_path / "random.ipynb"
    assert main(["replay", str(path), "--runs", "2", "--report", str(tmp_path / "r.json")]) == 0
    data = json.loads((tmp_path / "r.json").read_text())
    assert [c["status"] for c in data["cells"]] == ["nondeterministic", "same"]
    assert data["runs"] == 2
    assert (tmp_path / "random.replayed-run2.ipynb").exists()
    assert main(["replay", str(path), "--quiet"]) == 1  # one run: blamed as different
    capsys.readouterr()


# -- a real venv from the index -----------------------------------------------------------


@pytest.fixture(scope="module")
def old_six_notebook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A notebook recorded in a managed venv holding six 1.16.0 (made once, then cached)."""
    python = VirtualEnv(packages=(f"six=={OLD_SIX}",)).session_options(lambda _: None)["python"]
    root = tmp_path_factory.mktemp("old-six")
    with Session(work_dir=root, name="six", python=python) as session:
        assert session.execute("import six\nprint(six.__version__)").stdout == f"{OLD_SIX}\n"
    return root / "six.ipynb"


def test_a_version_difference_is_reported_then_the_recorded_env_reproduces_it(
    old_six_notebook: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = envdiff.recorded(_metadata(old_six_notebook))
    assert record is not None
    assert record["packages"] == {"six": OLD_SIX}
    here = replay(old_six_notebook, output=tmp_path / "here.ipynb")
    assert list(here.environment) == [f"six {OLD_SIX} recorded, {SIX_HERE} here"]
    assert [c.status for c in here.cells] == ["different"]
    code = main(["replay", str(old_six_notebook), "--in-recorded-env", "--output",
                 str(tmp_path / "there.ipynb")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    assert "environment: as recorded" in err
    assert "reproduced: 1 same" in err
    # The venv is the cached one, keyed by the spec the record makes.
    made = envdiff.recorded_environment(record)
    assert isinstance(made, VirtualEnv)
    assert made.packages == (f"six=={OLD_SIX}",)
    assert str(default_cache_dir()) in made.session_options(lambda _: None)["python"]


def test_a_version_the_index_lacks_is_named(old_six_notebook: Path, tmp_path: Path) -> None:
    raw = json.loads(old_six_notebook.read_text())
    raw["metadata"]["jupyter_exec"]["environment"]["packages"] = {"six": "0.0.404"}
    forged = tmp_path / "forged.ipynb"
    forged.write_text(json.dumps(raw))
    with pytest.raises(KernelStartError, match=r"the package index has no six==0\.0\.404"):
        replay(forged, in_recorded_env=True)


def test_in_recorded_env_refuses_another_environment_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), path)
    for flags in (["--python", sys.executable], ["--env", "venv"], ["--env", "docker"]):
        assert main(["replay", str(path), "--in-recorded-env", *flags]) == 2
        assert "--in-recorded-env makes the environment from" in capsys.readouterr().err
    # --backend says where the record's environment is made: taken, then this notebook
    # (which records none) is refused for that.
    assert main(["replay", str(path), "--in-recorded-env", "--backend", "local"]) == 2
    assert "records no environment" in capsys.readouterr().err


def test_in_recorded_env_needs_a_recorded_environment(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("1")]
    path = tmp_path / "plain.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(NotebookError, match="records no environment"):
        replay(path, in_recorded_env=True)


# -- where it runs: the person's flags, never the record ----------------------------------


def _as_if_docker(path: Path, target: Path) -> None:
    """The notebook at ``path`` as a Docker kernel would have recorded it (then edited to
    drop its image), at ``target``."""
    raw = json.loads(path.read_text())
    ours = raw["metadata"]["jupyter_exec"]
    ours["backend"] = ours["environment"]["backend"] = "docker"
    target.write_text(json.dumps(raw))


@pytest.mark.parametrize(
    ("metadata", "trace"),
    [
        ({"jupyter_exec": {"backend": "docker"}}, "its session's backend is 'docker'"),
        ({"jupyter_exec": {"environment": {"backend": "docker"}}}, "environment's backend"),
        ({"jupyter_exec": {"environment": {"docker_image": {"tag": "t"}}}}, "a Docker image"),
        ({"kernelspec": {"name": "python3-docker"}}, "kernelspec 'python3-docker'"),
        (
            {
                "jupyter_exec": {
                    "environment": {"interpreter": {"executable": "/opt/kernel/bin/py"}}
                }
            },
            "the kernel image's",
        ),
    ],
)
def test_any_trace_of_docker_in_the_record_counts(metadata: dict[str, Any], trace: str) -> None:
    from jupyter_exec.notebook.where import docker_traces

    found = docker_traces(metadata)
    assert len(found) == 1
    assert trace in found[0]
    assert docker_traces({"jupyter_exec": {"backend": "local"}}) == []


def test_a_docker_record_is_refused_on_the_host_until_backend_local_is_given(
    old_six_notebook: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "docker.ipynb"
    _as_if_docker(old_six_notebook, path)
    for flags in ([], ["--in-recorded-env"]):
        assert main(["replay", str(path), *flags, "--output", str(tmp_path / "o.ipynb")]) == 2
        err = capsys.readouterr().err
        assert "docker.ipynb was recorded in Docker (its session's backend is 'docker'" in err
        assert "Choose: --backend docker" in err
        assert not (tmp_path / "o.ipynb").exists()
    with pytest.raises(NotebookError, match="refusing to replay it on the host"):
        replay(path, output=tmp_path / "o.ipynb")
    # The person's word: the recorded pins rebuilt in a venv on this host.
    code = main(["replay", str(path), "--in-recorded-env", "--backend", "local",
                 "--output", str(tmp_path / "o.ipynb")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    assert err.splitlines()[0] == (
        "replaying on the host: --backend local given; the record names Docker "
        "(its session's backend is 'docker')"
    )
    assert "reproduced: 1 same" in err
    report = json.loads((tmp_path / "o.ipynb").read_text())["metadata"]["jupyter_exec"]
    assert report["environment"]["backend"] == "local"


def test_quiet_still_says_where_it_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Session(work_dir=tmp_path, name="q") as session:
        session.execute("print(1)")
    assert main(["replay", str(tmp_path / "q.ipynb"), "-q", "--backend", "local"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "replaying on the host: --backend local given"


CAPTURING = (
    "import sys\n"
    "capture = getattr(sys.modules.get('_jupyter_exec_environment'), '_capture', None)\n"
    "print('capturing' if capture is not None else 'not capturing')"
)


def test_a_replays_kernel_runs_without_the_environment_capture(tmp_path: Path) -> None:
    """The capture's scan of every installed distribution after a cell's new imports (0.4 to
    0.7 s after ``import matplotlib``) and its audit hook were a replay's whole gap to
    nbclient on plot notebooks; a replay asks the kernel its versions once instead."""
    with Session(work_dir=tmp_path, name="rec") as session:  # a recording session captures
        assert session.execute(CAPTURING).stdout == "capturing\n"
    path = tmp_path / "rec.ipynb"
    raw = json.loads(path.read_text())
    raw["cells"][0]["outputs"][0]["text"] = "not capturing\n"
    path.write_text(json.dumps(raw))
    report = replay(path)
    assert [c.status for c in report.cells] == ["same"]
    assert report.environment == ()  # the versions it compares were still asked
    assert report.extra["environment"]["here"]["interpreter"]["version"] == (
        ".".join(map(str, sys.version_info[:3]))
    )
