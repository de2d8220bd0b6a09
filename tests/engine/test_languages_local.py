"""Sessions in R, Bash, JavaScript and TypeScript on real local kernels (IRkernel, bash_kernel,
Deno): state across cells, errors, rich outputs saved, timeouts that keep the state, the
notebook's language, its replay and resume, and the Python-only features refused.

The kernels come from ``jupyter-exec kernels install r bash javascript typescript``; a
missing one fails these tests with the install command in the message (never a skip).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_exec import (
    CheckpointError,
    ForkError,
    InvalidArgument,
    Session,
    replay,
)

pytestmark = pytest.mark.languages

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def r_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    with Session(language="R", work_dir=tmp_path_factory.mktemp("r"), name="r-analysis") as s:
        yield s


@pytest.fixture(scope="module")
def bash_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    with Session(language="bash", work_dir=tmp_path_factory.mktemp("bash"), name="sh") as s:
        yield s


@pytest.fixture(scope="module", params=["typescript", "javascript"])
def deno_session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    work = tmp_path_factory.mktemp(request.param)
    with Session(language=request.param, work_dir=work, name="deno") as s:
        yield s


# -- R ------------------------------------------------------------------------------------


def test_r_keeps_state_and_reports_an_error_as_data(r_session: Session) -> None:
    assert r_session.language == "r"
    assert r_session.execute("x <- 41").ok
    assert r_session.execute("x + 1").results[0].text == "[1] 42"
    failed = r_session.execute("stop('no such column')")
    assert failed.status == "error"
    assert failed.error is not None
    assert "no such column" in failed.error.evalue
    assert r_session.execute("x").results[0].text == "[1] 41"  # the error kept the state


def test_r_plots_and_data_frames_are_saved_as_files(r_session: Session) -> None:
    png = r_session.execute("plot(1:10)")
    assert png.results[0].png
    (png_file,) = [f for f in png.files if f.suffix == ".png"]
    assert png_file.read_bytes().startswith(PNG)
    assert png_file.parent == r_session.files_dir
    # IRkernel draws a cell's plots as it ends, in the formats set then.
    svg = r_session.execute("options(jupyter.plot_mimetypes = 'image/svg+xml')\nplot(1:3)")
    r_session.execute("options(jupyter.plot_mimetypes = c('text/plain', 'image/png'))")
    (svg_file,) = [f for f in svg.files if f.suffix == ".svg"]
    assert "<svg" in svg_file.read_text()
    frame = r_session.execute("data.frame(city = c('Oslo', 'Lima'), temp = c(4, 19))")
    html = frame.results[0].html
    assert html is not None
    assert "<table" in html
    assert "Oslo" in html
    (html_file,) = [f for f in frame.files if f.suffix == ".html"]
    assert "Lima" in html_file.read_text()


# -- Bash ---------------------------------------------------------------------------------


def test_bash_keeps_variables_and_the_working_directory(bash_session: Session) -> None:
    assert bash_session.execute("GREETING=hello; mkdir -p sub && cd sub").ok
    echoed = bash_session.execute('echo "$GREETING from $(basename "$PWD")"')
    assert echoed.stdout == "hello from sub\n"
    assert bash_session.execute("cd ..").ok


def test_bash_reports_a_failing_command(bash_session: Session) -> None:
    failed = bash_session.execute("no-such-command-xyz")
    assert failed.status == "error"
    assert "no-such-command-xyz" in failed.stdout + failed.stderr
    assert bash_session.execute("echo $GREETING").stdout == "hello\n"


# -- Deno (JavaScript, TypeScript) -----------------------------------------------------------


def test_deno_keeps_state_and_every_result_arrives(deno_session: Session) -> None:
    """Deno publishes a cell's result after its idle status now and then: each of these
    cells' results is still there (the session fences the cell), never a later cell's."""
    assert deno_session.execute("let total = 0").ok
    for i in range(1, 21):
        run = deno_session.execute(f"total += {i}; total")
        assert run.text == str(i * (i + 1) // 2), (i, run.results)


def test_deno_reports_an_error_and_goes_on(deno_session: Session) -> None:
    # Its own state: under xdist the test that built ``total`` may run on another worker.
    assert deno_session.execute("var kept = 210").ok
    failed = deno_session.execute("throw new RangeError('too far')")
    assert failed.status == "error"
    assert failed.error is not None
    assert (failed.error.ename, failed.error.evalue) == ("RangeError", "too far")
    assert deno_session.execute("kept").text == "210"


def test_deno_displays_are_saved(deno_session: Session) -> None:
    shown = deno_session.execute(
        "await Deno.jupyter.display({'text/html': '<b>shown</b>'}, {raw: true})\n"
        "Deno.jupyter.html`<i>returned</i>`"
    )
    htmls = [r.html for r in shown.results]
    assert htmls == ["<b>shown</b>", "<i>returned</i>"]
    assert sorted(f.read_text() for f in shown.files) == ["<b>shown</b>", "<i>returned</i>"]
    printed = deno_session.execute("console.log('plain'); console.error('warned')")
    assert (printed.stdout, printed.stderr) == ("plain\n", "warned\n")


# -- timeouts keep the state -------------------------------------------------------------


@pytest.mark.parametrize(
    ("language", "setup", "runaway", "check", "expected"),
    [
        ("r", "kept <- 7", "Sys.sleep(60)", "kept * 6", "[1] 42"),
        ("bash", "KEPT=7", "sleep 60", "echo $((KEPT * 6))", "42\n"),
        ("typescript", "const kept = 7", "while (true) {}", "kept * 6", "42"),
    ],
)
def test_a_timeout_interrupts_the_cell_and_keeps_the_state(
    language: str, setup: str, runaway: str, check: str, expected: str, tmp_path: Path
) -> None:
    with Session(language=language, work_dir=tmp_path, interrupt_grace=10) as s:
        s.execute(setup).raise_for_error()
        stopped = s.execute(runaway, timeout=1.5)
        assert stopped.status == "timeout"
        assert not stopped.state_lost
        after = s.execute(check, timeout=30)
        assert (after.stdout if language == "bash" else after.results[0].text) == expected


# -- the notebook: language, replay, resume ---------------------------------------------------


@pytest.mark.parametrize(
    ("language", "kernel", "info", "cells"),
    [
        ("r", "ir", "R", ["x <- 20", "x + 22"]),
        ("bash", "bash", "bash", ["X=20", "echo $((X + 22))"]),
        ("typescript", "deno", "typescript", ["const x: number = 20", "x + 22"]),
    ],
)
def test_the_notebook_carries_the_kernel_and_replays_and_resumes_on_it(
    language: str, kernel: str, info: str, cells: list[str], tmp_path: Path
) -> None:
    with Session(language=language, work_dir=tmp_path, name="record") as s:
        for cell in cells:
            s.execute(cell).raise_for_error()
        notebook = s.notebook_path
    assert notebook is not None
    meta = json.loads(notebook.read_text())["metadata"]
    assert meta["kernelspec"]["name"] == kernel
    assert meta["language_info"]["name"] == info

    report = replay(notebook)  # on the notebook's own kernel
    assert report.reproduced, report.problems()
    replayed = json.loads(Path(str(report.output)).read_text())["metadata"]
    assert replayed["kernelspec"]["name"] == kernel

    with Session.resume(notebook) as resumed:  # the notebook says which kernel
        assert resumed.language_info["name"] == info
        again = resumed.execute(cells[-1])
        assert "42" in again.stdout + "".join(r.text or "" for r in again.results)


# -- Python-only features ----------------------------------------------------------------


def test_python_only_features_are_refused_for_other_languages(r_session: Session) -> None:
    with pytest.raises(ForkError, match=r"fork\(\) needs an IPython kernel.*'r'"):
        r_session.fork()
    with pytest.raises(ForkError, match=r"undo\(\) needs an IPython kernel"):
        r_session.undo()
    with pytest.raises(CheckpointError, match=r"checkpoint\(\) needs an IPython kernel"):
        r_session.checkpoint("before")
    with pytest.raises(CheckpointError, match=r"restore\(\) needs an IPython kernel"):
        r_session.restore("before")
    with pytest.raises(InvalidArgument, match="undo_steps needs a Python kernel"):
        Session(language="r", undo_steps=3, start=False)


@pytest.mark.parametrize("which", ["r", "bash", "deno"])
def test_no_python_helper_is_ever_sent_to_another_kernel(
    which: str, r_session: Session, bash_session: Session, deno_session: Session
) -> None:
    """The one seam (``KernelHandle.runs_ipython``) keeps the stream guard and the durable
    state's Python out of these kernels: after cells ran (automatic checkpoints are on by
    default), neither was installed, and no probe file was left in the work dir."""
    session = {"r": r_session, "bash": bash_session, "deno": deno_session}[which]
    session.execute("1")
    kernel = session._async._kernel
    assert kernel is not None
    assert not kernel.runs_ipython
    assert kernel.stream_guard is False
    durable = session._async._state.durable
    assert durable.installed is None
    assert durable.unavailable is not None
    assert "needs an IPython kernel" in durable.unavailable
    assert not list(session.work_dir.glob(".jupyter-exec-probe-*"))
    assert not (session.work_dir / f".{session.name}_checkpoints").exists()


def test_a_python_session_still_gets_its_helpers(tmp_path: Path) -> None:
    """The seam decides by the kernel: an IPython kernel has the guard and durable state."""
    with Session(language="py", work_dir=tmp_path, python=sys.executable) as s:
        s.execute("x = 1").raise_for_error()
        kernel = s._async._kernel
        assert kernel is not None
        assert kernel.runs_ipython
        assert kernel.stream_guard is True
        assert s._async._state.durable.installed is kernel


def test_java_keeps_state_reports_errors_and_is_interrupted(tmp_path: Path) -> None:
    """JJava (PyPI's jjava on a JDK): its JeroMQ has no ipc, so it runs on loopback TCP."""
    with Session(language="java", work_dir=tmp_path, interrupt_grace=10) as s:
        assert s.language == "java"
        s.execute("int x = 41;").raise_for_error()
        assert s.execute("x + 1").text == "42"
        failed = s.execute('throw new IllegalStateException("not yet");')
        assert failed.error is not None
        assert "not yet" in failed.error.evalue
        stopped = s.execute("while (true) {}", timeout=1.5)
        assert (stopped.status, stopped.state_lost) == ("timeout", False)
        assert s.execute("x").text == "41"
        kernel = s._async._kernel
        assert kernel is not None
        assert kernel.km.transport == "tcp"
        assert kernel.stream_guard is False
