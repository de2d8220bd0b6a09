"""Sessions on real ipykernel kernels: state, rich outputs, errors, timeouts, dead kernels.

Tests that only need a working kernel share the module's ``session``; the
ones that kill, restart, interrupt or time out a kernel make their own with
``fresh_session``.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_exec import (
    AsyncSession,
    Execution,
    ExecutionError,
    ExecutionTimeout,
    InvalidArgument,
    KernelDiedError,
    KernelStartError,
    NotebookError,
    Session,
    SessionClosedError,
)

ReadNotebook = Callable[[Path], nbformat.NotebookNode]
MakeSession = Callable[..., Session]


def cell_of(nb: nbformat.NotebookNode, r: Execution) -> nbformat.NotebookNode:
    assert r.cell_index is not None
    return nb.cells[r.cell_index]


# -- the issue's example ----------------------------------------------------------------


def test_the_issue_example(tmp_path: Path, read_notebook: ReadNotebook) -> None:
    analysis = tmp_path / "analysis"
    with Session(work_dir=analysis) as s:
        assert s.work_dir == analysis
        s.execute("import pandas as pd; df = pd.DataFrame({'x': [1, 2, 3]})")
        r = s.execute("df.x.sum()")
        assert r.ok
        assert "6" in r.text  # numpy 2 says 'np.int64(6)'
        assert s.execute("int(df.x.sum())").text == "6"
        r = s.execute("import matplotlib.pyplot as plt; plt.plot([1, 3, 2]); plt.show()")
        assert len(r.files) == 1
        png = r.files[0]
        assert png.suffix == ".png"
        assert png.parent == analysis / f"{s.name}_files"
        assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        r = s.execute("1/0")
        assert r.error is not None
        assert r.error.ename == "ZeroDivisionError"
        started = time.monotonic()
        r = s.execute("import time; time.sleep(60)", timeout=2)
        assert time.monotonic() - started < 4
        assert r.status == "timeout"
        assert s.notebook_path == analysis / f"{s.name}.ipynb"
        nb = read_notebook(s.notebook_path)
        assert [c.source for c in nb.cells] == [
            "import pandas as pd; df = pd.DataFrame({'x': [1, 2, 3]})",
            "df.x.sum()",
            "int(df.x.sum())",
            "import matplotlib.pyplot as plt; plt.plot([1, 3, 2]); plt.show()",
            "1/0",
            "import time; time.sleep(60)",
        ]
    assert not s.is_alive


# -- state and results -----------------------------------------------------------------


def test_state_is_kept_across_calls(session: Session) -> None:
    session.execute("counter = 40")
    session.execute("counter += 2")
    assert session.execute("counter").text == "42"


def test_main_result_is_what_the_kernel_returned(session: Session) -> None:
    session.execute("import pandas as pd; df = pd.DataFrame({'x': [1, 2, 3]})")
    assert session.execute("int(df.x.sum())").text == "6"
    numpy_result = session.execute("df.x.sum()").text
    assert numpy_result is not None
    assert numpy_result in {"6", "np.int64(6)"}
    r = session.execute("x = 1")  # no expression value, no main result
    assert r.text is None
    assert r.results == ()


def test_execution_counts_increase(session: Session) -> None:
    first = session.execute("1").execution_count
    second = session.execute("2").execution_count
    assert first is not None
    assert second == first + 1


def test_streams_are_separated(session: Session) -> None:
    r = session.execute("import sys; print('out'); print('err', file=sys.stderr); 'value'")
    assert r.stdout == "out\n"
    assert r.stderr == "err\n"
    assert r.text == "'value'"
    assert r.duration > 0


def test_plot_is_saved_as_png_in_the_files_folder(session: Session) -> None:
    r = session.execute("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
    assert r.ok
    (result,) = r.results
    assert not result.is_main_result
    assert result.png is not None
    path = result.files["image/png"]
    assert r.files == (path,)
    assert path.parent == session.work_dir / "shared_files"
    assert r.cell_index is not None
    assert path.name.startswith(f"cell-{r.cell_index + 1:03d}-")
    assert path.read_bytes() == result.data_bytes("image/png")
    assert "text/plain" not in result.files  # text/plain stays inline


def test_files_written_by_the_code_are_listed(session: Session) -> None:
    r = session.execute(
        "import matplotlib.pyplot as plt\n"
        "fig = plt.figure(); plt.plot([1, 2]); plt.savefig('x.png'); plt.close(fig)\n"
        "import os; os.makedirs('data', exist_ok=True)\n"
        "with open('data/t.csv', 'w') as f:\n"
        "    f.write('a,b\\n')"
    )
    assert r.ok, r.error
    assert session.work_dir / "x.png" in r.files
    assert session.work_dir / "data" / "t.csv" in r.files
    assert (session.work_dir / "x.png").read_bytes().startswith(b"\x89PNG")
    # Unchanged files are not listed again.
    assert session.execute("1").files == ()
    # A rewrite is.
    r = session.execute("open('data/t.csv', 'a').write('1,2\\n')")
    assert r.files == (session.work_dir / "data" / "t.csv",)


def test_code_errors_are_data(session: Session) -> None:
    r = session.execute("1/0")
    assert r.status == "error"
    assert not r.ok
    assert r.error is not None
    assert r.error.ename == "ZeroDivisionError"
    assert r.error.evalue == "division by zero"
    assert "\x1b[" not in r.error.traceback
    assert "ZeroDivisionError" in r.error.traceback
    assert "1/0" in r.error.traceback
    with pytest.raises(ExecutionError) as info:
        r.raise_for_error()
    assert info.value.execution is r
    # The session goes on.
    assert session.execute("2 + 2").text == "4"


def test_stdout_printed_before_an_error_is_kept(session: Session) -> None:
    r = session.execute("print('before'); raise ValueError('bad value')")
    assert r.stdout == "before\n"
    assert r.error is not None
    assert r.error.ename == "ValueError"
    assert r.error.evalue == "bad value"
    assert [o["output_type"] for o in r.outputs] == ["stream", "error"]


def test_input_fails_fast_instead_of_hanging(session: Session) -> None:
    started = time.monotonic()
    r = session.execute("input('name? ')", timeout=30)
    assert time.monotonic() - started < 5
    assert r.status == "error"
    assert r.error is not None
    assert r.error.ename == "StdinNotImplementedError"


_IMAGE = """
import io
from PIL import Image as _PIL
from IPython.display import Image, display
_buf = io.BytesIO()
_PIL.new("RGB", (4, 4), "red").save(_buf, {fmt!r})
display(Image(data=_buf.getvalue(), format={fmt!r}))
"""

RICH_CASES = [
    pytest.param(
        "from IPython.display import HTML; HTML('<b>bold</b>')",
        "text/html",
        ".html",
        b"<b>bold</b>",
        id="html",
    ),
    pytest.param(
        "from IPython.display import Markdown; Markdown('# Title')",
        "text/markdown",
        ".md",
        b"# Title",
        id="markdown",
    ),
    pytest.param(
        "from IPython.display import Latex; Latex(r'$\\alpha^2$')",
        "text/latex",
        ".tex",
        b"$\\alpha^2$",
        id="latex",
    ),
    pytest.param(
        "from IPython.display import SVG\n"
        'SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>\')',
        "image/svg+xml",
        ".svg",
        b"<svg",
        id="svg",
    ),
    pytest.param(_IMAGE.format(fmt="jpeg"), "image/jpeg", ".jpg", b"\xff\xd8\xff", id="jpeg"),
    pytest.param(_IMAGE.format(fmt="gif"), "image/gif", ".gif", b"GIF8", id="gif"),
    pytest.param(
        "class Doc:\n"
        "    def _repr_pdf_(self):\n"
        "        return b'%PDF-1.4 tiny'\n"
        "    def __repr__(self):\n"
        "        return 'Doc'\n"
        "display(Doc())",
        "application/pdf",
        ".pdf",
        b"%PDF-1.4 tiny",
        id="pdf",
    ),
]


@pytest.mark.parametrize(("code", "mime", "ext", "content"), RICH_CASES)
def test_rich_outputs_are_saved_with_the_right_extension(
    session: Session, code: str, mime: str, ext: str, content: bytes
) -> None:
    r = session.execute(code)
    assert r.ok, r.error
    (result,) = r.results
    assert mime in result.formats()
    path = result.files[mime]
    assert path.suffix == ext
    assert path in r.files
    assert path.parent == session.work_dir / "shared_files"
    data = path.read_bytes()
    assert data.startswith(content)
    assert data == result.data_bytes(mime)


@pytest.mark.parametrize(
    ("mime", "ext"),
    [
        ("application/json", ".json"),
        ("application/vnd.plotly.v1+json", ".plotly.json"),
        ("application/vnd.vegalite.v5+json", ".vegalite.json"),
    ],
)
def test_json_outputs_are_saved_decoded(session: Session, mime: str, ext: str) -> None:
    payload = {"data": [{"x": [1, 2, 3]}], "title": "é"}
    r = session.execute(
        "from IPython.display import display\n"
        f"display({{{mime!r}: {payload!r}, 'text/plain': 'chart'}}, raw=True)"
    )
    assert r.ok, r.error
    (result,) = r.results
    assert result.data[mime] == payload
    assert result.text == "chart"
    path = result.files[mime]
    assert path.name.endswith(ext)
    assert json.loads(path.read_text(encoding="utf-8")) == payload
    assert set(result.files) == {mime}


def test_json_display_object(session: Session) -> None:
    r = session.execute("from IPython.display import JSON; JSON({'a': [1, 2]})")
    (result,) = r.results
    assert result.json == {"a": [1, 2]}
    assert json.loads(result.files["application/json"].read_text()) == {"a": [1, 2]}


def test_widget_state_is_not_saved(session: Session) -> None:
    r = session.execute(
        "display({'application/vnd.jupyter.widget-view+json': "
        "{'model_id': 'abc', 'version_major': 2, 'version_minor': 0}, "
        "'text/plain': 'Widget'}, raw=True)"
    )
    (result,) = r.results
    assert result.files == {}
    assert r.files == ()


# -- streams like JupyterLab --------------------------------------------------------------


def test_progress_bar_with_carriage_returns_keeps_the_final_state(
    session: Session, read_notebook: ReadNotebook
) -> None:
    r = session.execute(
        "import sys, time\n"
        "for i in range(0, 101, 10):\n"
        "    sys.stdout.write(f'\\r{i:3d}% ' + '#' * (i // 10))\n"
        "    sys.stdout.flush()\n"
        "    time.sleep(0.01)\n"
        "print()\n"
        "print('done')"
    )
    assert r.stdout == "100% ##########\ndone\n"
    assert session.notebook_path is not None
    recorded = cell_of(read_notebook(session.notebook_path), r)
    assert [o.output_type for o in recorded.outputs] == ["stream"]
    assert recorded.outputs[0].text == "100% ##########\ndone\n"


def test_clear_output_wait_loop_leaves_one_output(
    session: Session, read_notebook: ReadNotebook
) -> None:
    r = session.execute(
        "from IPython.display import clear_output, display, HTML\n"
        "for i in range(5):\n"
        "    clear_output(wait=True)\n"
        "    display(HTML(f'<p>{i}</p>'))\n"
    )
    assert len(r.outputs) == 1
    (result,) = r.results
    assert result.html == "<p>4</p>"
    assert result.files["text/html"].read_text() == "<p>4</p>"
    assert session.notebook_path is not None
    recorded = cell_of(read_notebook(session.notebook_path), r)
    assert len(recorded.outputs) == 1
    assert recorded.outputs[0].data["text/html"] == "<p>4</p>"


def test_clear_output_without_wait(session: Session) -> None:
    r = session.execute(
        "from IPython.display import clear_output\nprint('gone')\nclear_output()\nprint('kept')"
    )
    assert r.stdout == "kept\n"


def test_update_display_from_a_later_cell_updates_the_earlier_cell(
    session: Session, read_notebook: ReadNotebook
) -> None:
    first = session.execute(
        "from IPython.display import HTML, display\n"
        "handle = display(HTML('<i>v1</i>'), display_id=True)\n"
        "handle.update(HTML('<i>v2</i>'))"  # same cell: updated in place
    )
    (shown,) = first.results
    assert shown.html == "<i>v2</i>"
    path = shown.files["text/html"]
    assert path.read_text() == "<i>v2</i>"
    later = session.execute("handle.update(HTML('<i>v3</i>'))")
    assert later.ok
    assert later.results == ()
    assert session.notebook_path is not None
    nb = read_notebook(session.notebook_path)
    assert cell_of(nb, first).outputs[0].data["text/html"] == "<i>v3</i>"
    assert cell_of(nb, later).outputs == []
    assert path.read_text() == "<i>v3</i>"  # the saved file follows the update


# -- output floods -------------------------------------------------------------------------


def test_output_flood_is_truncated_and_spilled_to_a_file(
    session: Session, read_notebook: ReadNotebook
) -> None:
    total = 200_000 * 100  # 20 MB
    r = session.execute(
        "import sys\nline = 'x' * 99 + '\\n'\nfor _ in range(200_000):\n    sys.stdout.write(line)"
    )
    assert r.ok, r.error
    assert r.truncated
    assert len(r.stdout) < 600_000
    assert r.stdout.startswith("x" * 99 + "\n")
    assert r.stdout.endswith("x" * 99 + "\n")
    assert "truncated" in r.stdout
    spills = [p for p in r.files if p.name.endswith("-stdout.txt")]
    assert len(spills) == 1
    assert spills[0].stat().st_size == total
    assert spills[0].relative_to(session.work_dir).as_posix() in r.stdout  # the marker says where
    assert session.notebook_path is not None
    assert session.notebook_path.stat().st_size < 2_000_000
    read_notebook(session.notebook_path)


# -- callbacks ------------------------------------------------------------------------------


def test_on_output_sees_outputs_in_order_while_streaming(session: Session) -> None:
    events: list[tuple[float, dict[str, Any]]] = []
    r = session.execute(
        "import time\n"
        "print('first', flush=True)\n"
        "time.sleep(0.5)\n"
        "display('shown')\n"
        "print('last')\n"
        "'value'",
        on_output=lambda e: events.append((time.monotonic(), e)),
    )
    returned = time.monotonic()
    # A kernel may split a stream into any number of chunks ('first' and '\n' can arrive
    # apart): join consecutive chunks of a stream before comparing.
    kinds: list[tuple[str, Any]] = []
    for _, event in events:
        if event["output_type"] == "stream" and kinds and kinds[-1][0] == "stream":
            kinds[-1] = ("stream", kinds[-1][1] + event["text"])
        else:
            kinds.append((event["output_type"], event.get("text")))
    assert kinds == [
        ("stream", "first\n"),
        ("display_data", None),
        ("stream", "last\n"),
        ("execute_result", None),
    ]
    first_shown = next(at for at, e in events if e["output_type"] == "display_data")
    assert returned - events[0][0] >= 0.4  # the first chunk came while the cell still ran
    assert first_shown - events[0][0] >= 0.4  # ... before the display that followed the sleep
    assert r.text == "'value'"


def test_a_failing_on_output_callback_does_not_break_the_execution(session: Session) -> None:
    def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("callback bug")

    r = session.execute("print('still here')", on_output=broken)
    assert r.ok
    assert r.stdout == "still here\n"


def test_to_dict_round_trips_through_json(session: Session) -> None:
    r = session.execute(
        "import matplotlib.pyplot as plt\nplt.plot([1]); plt.show()\nprint('p')\n1/0"
    )
    d = r.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["status"] == "error"
    assert d["error"]["ename"] == "ZeroDivisionError"
    assert d["files"] == [str(p) for p in r.files]
    assert d["stdout"] == "p\n"


# -- the notebook ----------------------------------------------------------------------------


def test_notebook_is_valid_and_complete(
    fresh_session: MakeSession, read_notebook: ReadNotebook
) -> None:
    s = fresh_session(name="nbcheck")
    runs = [
        s.execute("print('hi')"),
        s.execute("from IPython.display import HTML; display(HTML('<b>x</b>')); 41 + 1"),
        s.execute("undefined_name"),
    ]
    assert s.notebook_path == s.work_dir / "nbcheck.ipynb"
    nb = read_notebook(s.notebook_path)
    assert nb.metadata.kernelspec.name == "python3"
    assert nb.metadata.kernelspec.display_name
    assert nb.metadata.kernelspec.language == "python"
    assert nb.metadata.language_info.name == "python"
    assert nb.metadata.language_info.version.startswith(f"{sys.version_info.major}.")
    assert len(nb.cells) == 3
    ids = [c.id for c in nb.cells]
    assert len(set(ids)) == 3
    assert [c.execution_count for c in nb.cells] == [1, 2, 3]
    for cell, r in zip(nb.cells, runs, strict=True):
        assert cell.cell_type == "code"
        assert cell.source == r.code
        assert cell.execution_count == r.execution_count
        timing = cell.metadata.execution
        busy = datetime.fromisoformat(timing["iopub.status.busy"].replace("Z", "+00:00"))
        idle = datetime.fromisoformat(timing["iopub.status.idle"].replace("Z", "+00:00"))
        assert busy <= idle
        assert "iopub.execute_input" in timing
        assert [dict(o) for o in cell.outputs] == [
            json.loads(json.dumps(dict(o))) for o in r.outputs
        ]
    assert nb.cells[2].outputs[0].output_type == "error"
    assert nb.cells[2].outputs[0].ename == "NameError"


def test_outputs_are_stored_as_nbclient_stores_them(
    fresh_session: MakeSession, tmp_path: Path, read_notebook: ReadNotebook
) -> None:
    """Same code, same kernel: our recorded outputs equal those nbclient records.

    (``\\r`` is left out: like JupyterLab we store a progress bar's final state,
    where nbclient keeps the raw characters.)
    """
    nbclient = pytest.importorskip("nbclient")
    sources = [
        "print('a'); print('b')\nimport sys; print('e', file=sys.stderr)",
        "from IPython.display import HTML, Markdown, display\n"
        "display(HTML('<b>x</b>'), Markdown('*y*'))\n{'k': [1, 2]}",
        "raise KeyError('nope')",
    ]
    s = fresh_session(name="cmp")
    for src in sources:
        s.execute(src)
    assert s.notebook_path is not None
    ours = read_notebook(s.notebook_path)

    theirs = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in sources])
    theirs.metadata.kernelspec = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbclient.NotebookClient(
        theirs, timeout=60, allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    for mine, reference in zip(ours.cells, theirs.cells, strict=True):
        assert mine.execution_count == reference.execution_count
        assert mine.outputs == reference.outputs, mine.source


# -- timeouts, interrupts and dead kernels ---------------------------------------------------


def test_timeout_interrupts_and_keeps_state(
    fresh_session: MakeSession, read_notebook: ReadNotebook
) -> None:
    s = fresh_session()
    s.execute("kept = 41")
    started = time.monotonic()
    r = s.execute("import time\nprint('working', flush=True)\ntime.sleep(60)", timeout=1.5)
    elapsed = time.monotonic() - started
    assert 1.4 <= elapsed < 3.5
    assert r.status == "timeout"
    assert not r.state_lost
    assert r.stdout == "working\n"
    assert r.error is not None
    assert r.error.ename == "ExecutionTimeout"
    assert "1.5 s" in r.error.evalue
    assert "time.sleep(60)" in r.error.traceback  # where it was stopped
    with pytest.raises(ExecutionTimeout) as info:
        r.raise_for_error()
    assert isinstance(info.value, TimeoutError)
    assert info.value.execution is r

    started = time.monotonic()
    after = s.execute("kept + 1")
    assert time.monotonic() - started < 1.0
    assert after.text == "42"

    assert s.notebook_path is not None
    nb = read_notebook(s.notebook_path)
    cell = cell_of(nb, r)
    assert cell.metadata.jupyter_exec.status == "timeout"
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert [e.ename for e in errors] == ["ExecutionTimeout"]


def test_timeout_of_a_cell_that_ignores_sigint_restarts_the_kernel(
    fresh_session: MakeSession, read_notebook: ReadNotebook
) -> None:
    # save_state=False: this holds the restart of a kernel with nothing to come back from
    # (tests/state/test_generations.py holds the state coming back).
    s = fresh_session(interrupt_grace=1.0, save_state=False)
    s.execute("lost = 1")
    started = time.monotonic()
    r = s.execute(
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
        timeout=1.0,
    )
    assert time.monotonic() - started < 10
    assert r.status == "timeout"
    assert r.state_lost
    assert r.error is not None
    assert r.error.ename == "ExecutionTimeout"
    assert "restarted" in r.error.evalue
    with pytest.raises(ExecutionTimeout):
        r.raise_for_error()
    assert s.is_alive
    gone = s.execute("lost")
    assert gone.error is not None
    assert gone.error.ename == "NameError"
    assert s.execute("1 + 1").text == "2"

    assert s.notebook_path is not None
    nb = read_notebook(s.notebook_path)
    meta = cell_of(nb, r).metadata.jupyter_exec
    assert meta.status == "timeout"
    assert meta.state_lost is True
    assert "restarted" in cell_of(nb, gone).metadata.jupyter_exec.kernel


@pytest.mark.parametrize(
    ("code", "how"),
    [
        ("import os; os._exit(1)", "exited with code 1"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "SIGSEGV"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "SIGKILL"),
    ],
    ids=["os._exit", "segfault", "sigkill"],
)
def test_dying_kernel_is_detected_quickly_and_restarted(
    fresh_session: MakeSession, read_notebook: ReadNotebook, code: str, how: str
) -> None:
    s = fresh_session(save_state=False)  # nothing to come back from: the state is lost
    s.execute("lost = 1")
    started = time.monotonic()
    r = s.execute(f"print('going', flush=True)\nimport time; time.sleep(0.2)\n{code}", timeout=60)
    assert time.monotonic() - started < 5
    assert r.status == "died"
    assert r.state_lost
    assert r.stdout == "going\n"
    assert r.error is not None
    assert how in r.error.evalue
    with pytest.raises(KernelDiedError) as info:
        r.raise_for_error()
    assert info.value.execution is r

    assert s.is_alive
    gone = s.execute("lost")
    assert gone.error is not None
    assert gone.error.ename == "NameError"
    assert s.execute("2 * 21").text == "42"

    assert s.notebook_path is not None
    nb = read_notebook(s.notebook_path)
    died = cell_of(nb, r)
    assert died.metadata.jupyter_exec.status == "died"
    assert died.metadata.jupyter_exec.state_lost is True
    assert any(o.output_type == "error" and how in o.evalue for o in died.outputs)
    assert "restarted" in cell_of(nb, gone).metadata.jupyter_exec.kernel


def test_restart_loses_state_and_the_next_cell_notes_it(
    fresh_session: MakeSession, read_notebook: ReadNotebook
) -> None:
    s = fresh_session()
    s.execute("value = 1")
    s.restart()
    assert s.is_alive
    r = s.execute("value")
    assert r.error is not None
    assert r.error.ename == "NameError"
    assert s.notebook_path is not None
    nb = read_notebook(s.notebook_path)
    assert "restart" in cell_of(nb, r).metadata.jupyter_exec.kernel
    assert "kernel" not in nb.cells[0].metadata.jupyter_exec
    assert r.execution_count == 1  # a fresh kernel counts from 1 again


def test_interrupt_from_another_thread_stops_a_long_cell(fresh_session: MakeSession) -> None:
    s = fresh_session()
    s.execute("kept = 'yes'")
    timer = threading.Timer(0.5, s.interrupt)
    timer.start()
    started = time.monotonic()
    r = s.execute("import time; time.sleep(30)", timeout=60)
    timer.join()
    assert time.monotonic() - started < 5
    assert r.status == "error"
    assert r.error is not None
    assert r.error.ename == "KeyboardInterrupt"
    assert not r.state_lost
    assert s.execute("kept").text == "'yes'"


# -- lifecycle and options ------------------------------------------------------------------


def test_execute_after_close_raises(fresh_session: MakeSession) -> None:
    s = fresh_session()
    s.close()
    assert not s.is_alive
    with pytest.raises(SessionClosedError):
        s.execute("1")
    s.close()  # idempotent


def test_work_dir_none_creates_a_kept_temporary_dir(read_notebook: ReadNotebook) -> None:
    s = Session(work_dir=None, timeout=60)
    try:
        work = s.work_dir
        assert work.is_dir()
        assert s.execute("import os; os.getcwd()").text == repr(str(work))
    finally:
        s.close()
    try:
        assert work.is_dir()  # kept after the session
        assert s.notebook_path is not None
        assert s.notebook_path.parent == work
        read_notebook(s.notebook_path)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_notebook_false_records_nothing(fresh_session: MakeSession, work_dir: Path) -> None:
    s = fresh_session(notebook=False)
    r = s.execute("print(1)")
    assert r.ok
    assert s.notebook_path is None
    assert list(work_dir.glob("*.ipynb")) == []


def test_notebook_at_a_given_path(
    fresh_session: MakeSession, tmp_path: Path, read_notebook: ReadNotebook
) -> None:
    path = tmp_path / "records" / "mine.ipynb"
    path.parent.mkdir()
    s = fresh_session(notebook=path)
    s.execute("1")
    assert s.notebook_path == path
    assert len(read_notebook(path).cells) == 1


def test_existing_notebook_needs_overwrite(
    fresh_session: MakeSession, work_dir: Path, read_notebook: ReadNotebook
) -> None:
    work_dir.mkdir()
    existing = work_dir / "taken.ipynb"
    existing.write_text("precious")
    with pytest.raises(NotebookError, match="overwrite=True"):
        Session(work_dir=work_dir, name="taken")
    assert existing.read_text() == "precious"
    s = fresh_session(name="taken", overwrite=True)
    s.execute("1")
    assert len(read_notebook(existing).cells) == 1


def test_unknown_kernel_name_fails_to_start(tmp_path: Path) -> None:
    with pytest.raises(KernelStartError, match="no-such-kernel"):
        Session(work_dir=tmp_path / "w", kernel_name="no-such-kernel")


def test_code_must_be_a_string(session: Session) -> None:
    with pytest.raises(TypeError):
        session.execute(b"1")  # type: ignore[arg-type]


def test_failed_notebook_save_raises_with_the_execution_attached(
    fresh_session: MakeSession, tmp_path: Path
) -> None:
    folder = tmp_path / "records"
    folder.mkdir()
    s = fresh_session(notebook=folder / "n.ipynb")
    s.execute("before = 1")
    shutil.rmtree(folder)
    with pytest.raises(NotebookError, match="No such file or directory") as info:
        s.execute("print('ran anyway')")
    execution = info.value.execution  # type: ignore[attr-defined]
    assert execution.stdout == "ran anyway\n"
    # The session itself is fine: code runs, state is there.
    folder.mkdir()
    assert s.execute("before + 1").text == "2"


def test_python_without_ipykernel_fails_with_the_fix(tmp_path: Path) -> None:
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    with pytest.raises(KernelStartError) as info:
        Session(work_dir=tmp_path / "w", python=venv)
    assert "-m pip install ipykernel" in str(info.value)
    assert "ipykernel" in str(info.value)


def test_python_that_is_not_there(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="no-such-python"):
        Session(work_dir=tmp_path / "w", python=tmp_path / "no-such-python")


def test_python_executable_runs_the_kernel(fresh_session: MakeSession) -> None:
    s = fresh_session(python=sys.executable)
    shown = s.execute("import sys; sys.executable").text
    assert shown is not None
    assert Path(ast.literal_eval(shown)).resolve() == Path(sys.executable).resolve()


# -- AsyncSession ---------------------------------------------------------------------------


async def test_async_session(work_dir: Path, read_notebook: ReadNotebook) -> None:
    async with AsyncSession(work_dir=work_dir, timeout=60) as s:
        await s.execute("a = 20")
        r = await s.execute("a + 22")
        assert r.text == "42"
        assert await s.check_alive()
        assert s.kernel_id
        notebook = s.notebook_path
    assert notebook is not None
    assert len(read_notebook(notebook).cells) == 2
    with pytest.raises(SessionClosedError):
        await s.execute("1")


async def test_concurrent_executes_run_in_order_not_interleaved(work_dir: Path) -> None:
    events: list[str] = []

    def record(event: dict[str, Any]) -> None:
        if event["output_type"] == "stream":
            events.append(event["text"])

    async with AsyncSession(work_dir=work_dir, timeout=60) as s:
        first, second = await asyncio.gather(
            s.execute(
                "import time\norder = []\nfor i in range(3):\n"
                "    print('first', i, flush=True)\n    time.sleep(0.1)\norder.append(1)",
                on_output=record,
            ),
            s.execute("print('second'); order.append(2)", on_output=record),
        )
        assert first.stdout == "first 0\nfirst 1\nfirst 2\n"
        assert second.stdout == "second\n"
        assert second.ok, second.error
        assert (await s.execute("order")).text == "[1, 2]"
    assert first.execution_count is not None
    assert second.execution_count == first.execution_count + 1
    assert (first.cell_index, second.cell_index) == (0, 1)
    assert "".join(events) == "first 0\nfirst 1\nfirst 2\nsecond\n"


async def test_async_on_output_callback(work_dir: Path) -> None:
    seen: list[str] = []

    async def collect(event: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        if not (seen and seen[-1] == "stream" == event["output_type"]):  # chunks of one stream
            seen.append(event["output_type"])

    async with AsyncSession(work_dir=work_dir, timeout=60) as s:
        r = await s.execute("print('x'); display(1); 2", on_output=collect)
    assert seen == ["stream", "display_data", "execute_result"]
    assert r.text == "2"


async def test_async_interrupt_from_another_task(work_dir: Path) -> None:
    async with AsyncSession(work_dir=work_dir, timeout=60) as s:
        await s.execute("kept = 3")

        async def interrupt_soon() -> None:
            await asyncio.sleep(0.5)
            await s.interrupt()

        started = time.monotonic()
        task = asyncio.create_task(interrupt_soon())
        r = await s.execute("import time; time.sleep(30)")
        await task
        assert time.monotonic() - started < 5
        assert r.error is not None
        assert r.error.ename == "KeyboardInterrupt"
        assert (await s.execute("kept")).text == "3"


async def test_async_timeout(work_dir: Path) -> None:
    async with AsyncSession(work_dir=work_dir, timeout=60) as s:
        started = time.monotonic()
        r = await s.execute("import time; time.sleep(60)", timeout=1)
        assert time.monotonic() - started < 3
        assert r.status == "timeout"
        assert (await s.execute("'next'")).text == "'next'"


# -- a crash of the host process --------------------------------------------------------------

CRASHER = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from jupyter_exec import Session

    work, how = sys.argv[1], sys.argv[2]
    s = Session(work_dir=work, name="crash", timeout=60)
    s.execute("a = 1")
    pid = s.execute("import os; os.getpid()").text
    with open(os.path.join(work, ".kernel-pid"), "w") as f:
        f.write(pid)
    s.execute("print(a + 1)")

    def die():
        time.sleep(1.0)
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)

    threading.Thread(target=die, daemon=True).start()
    s.execute("import time; time.sleep(30)")
    """
)


@pytest.mark.parametrize("how", ["sigkill", "os._exit"])
def test_host_crash_mid_cell_leaves_a_valid_notebook_with_every_completed_cell(
    tmp_path: Path, read_notebook: ReadNotebook, how: str
) -> None:
    work = tmp_path / "work"
    script = tmp_path / "crasher.py"
    script.write_text(CRASHER)
    log = tmp_path / "crasher.log"
    # Output to a file, not a pipe: the orphaned kernel inherits it and would keep a pipe open.
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, str(script), str(work), how], stdout=out, stderr=out, timeout=120
        )
    pid_file = work / ".kernel-pid"
    try:
        assert proc.returncode == (-signal.SIGKILL if how == "sigkill" else 3), log.read_text()
        nb = read_notebook(work / "crash.ipynb")
        assert [c.source for c in nb.cells] == [
            "a = 1",
            "import os; os.getpid()",
            "print(a + 1)",
        ]
        assert nb.cells[2].outputs[0].text == "2\n"
        # What may be left beside it is the hidden spare: a complete, valid earlier version
        # (never a torn file, never ahead of the notebook).
        for spare in work.glob(".*.jx-tmp"):
            assert spare.name == ".crash.ipynb.jx-tmp"
            assert len(read_notebook(spare).cells) <= len(nb.cells)
    finally:
        # The orphaned kernel was started by our child: stop it.
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


async def test_cancelling_a_running_execute_interrupts_the_cell(work_dir: Path) -> None:
    """A caller that gives up (task cancelled) must not leave the kernel busy behind it."""
    async with AsyncSession(work_dir=work_dir, notebook=False, timeout=60) as session:
        await session.execute("x = 41")
        task = asyncio.create_task(session.execute("import time; time.sleep(30)"))
        await asyncio.sleep(1.0)  # the cell is running in the kernel
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        started = time.monotonic()
        execution = await session.execute("x + 1")
        assert execution.text == "42"  # state kept: interrupted, not restarted
        assert time.monotonic() - started < 5  # did not wait out the sleep
