"""run_code and code contexts through the real e2b-code-interpreter SDK, in its debug mode."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from e2b import SandboxException, TimeoutException
from e2b.connection_config import ConnectionConfig
from e2b_code_interpreter import AsyncSandbox, Sandbox
from e2b_code_interpreter.constants import JUPYTER_PORT
from e2b_server_helpers import Running

from jupyter_exec.cli import build_parser
from jupyter_exec.e2b import CODE_PORT, ENVD_PORT, E2BConfig

MIME_CODE = r"""
import base64, io
from IPython.display import HTML, JSON, SVG, Image, Latex, Markdown, display
from PIL import Image as PILImage
buf = io.BytesIO(); PILImage.new("RGB", (4, 4), "red").save(buf, "PNG")
display(Image(data=buf.getvalue(), format="png"))
buf = io.BytesIO(); PILImage.new("RGB", (4, 4), "blue").save(buf, "JPEG")
display(Image(data=buf.getvalue(), format="jpeg"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>'))
display(HTML("<b>bold</b>"))
display(Markdown("# title"))
display(Latex(r"$x^2$"))
display(JSON({"a": [1, 2]}))
"done"
"""


def test_default_ports_are_the_sdk_debug_ports() -> None:
    assert (JUPYTER_PORT, ConnectionConfig.envd_port) == (CODE_PORT, ENVD_PORT)
    assert E2BConfig(root_dir=Path(".")).ports == (JUPYTER_PORT, ConnectionConfig.envd_port)
    args = build_parser().parse_args(["e2b"])
    assert (args.port, args.envd_port) == (JUPYTER_PORT, ConnectionConfig.envd_port)


def test_create_and_state_across_calls(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    assert sandbox.sandbox_id == "debug_sandbox_id"
    first = sandbox.run_code("state_a = 41")
    second = sandbox.run_code("state_a + 1")
    assert second.text == "42"
    assert first.error is None
    assert second.error is None
    assert first.execution_count is not None
    assert second.execution_count == first.execution_count + 1
    notebook = debug_env.root / "debug_sandbox_id" / "debug_sandbox_id.ipynb"
    assert "state_a = 41" in notebook.read_text()  # every call is recorded


def test_callbacks_stream_while_the_code_runs(debug_env: Running, tmp_path: Path) -> None:
    """The code waits for a file that only the on_stdout callback creates: buffering fails it."""
    flag = tmp_path / "seen"
    seen: dict[str, list[object]] = {"stdout": [], "stderr": [], "result": [], "error": []}

    def on_stdout(message: object) -> None:
        seen["stdout"].append(message)
        if "first" in str(message):
            flag.touch()

    code = f"""
import sys, time, pathlib
print("first", flush=True)
deadline = time.monotonic() + 30
while not pathlib.Path({str(flag)!r}).exists() and time.monotonic() < deadline:
    time.sleep(0.01)
print("flag seen" if pathlib.Path({str(flag)!r}).exists() else "flag missing")
print("to stderr", file=sys.stderr)
from IPython.display import HTML, display
display(HTML("<i>shown</i>"))
raise ValueError("bad value")
"""
    execution = Sandbox.create().run_code(
        code,
        on_stdout=on_stdout,
        on_stderr=seen["stderr"].append,
        on_result=seen["result"].append,
        on_error=seen["error"].append,
    )
    stdout = "".join(str(m) for m in seen["stdout"])
    assert "first" in stdout
    assert "flag seen" in stdout
    assert "".join(str(m) for m in seen["stderr"]) == "to stderr\n"
    assert [r.html for r in seen["result"]] == ["<i>shown</i>"]
    assert len(seen["error"]) == 1
    assert execution.error is not None
    assert (execution.error.name, execution.error.value) == ("ValueError", "bad value")
    assert "raise ValueError" in execution.error.traceback
    assert "\x1b[" not in execution.error.traceback
    assert "".join(execution.logs.stdout) == stdout


def test_results_by_mime(debug_env: Running) -> None:
    execution = Sandbox.create().run_code(MIME_CODE)
    assert execution.error is None, execution.error
    results = execution.results
    assert [r.is_main_result for r in results] == [False] * 7 + [True]
    png, jpeg, svg, html, markdown, latex, json_, main = results
    assert png.png is not None
    assert png.png.startswith("iVBORw0KGgo")
    assert jpeg.jpeg is not None
    assert jpeg.jpeg.startswith("/9j/")
    assert svg.svg is not None
    assert "<svg" in svg.svg
    assert html.html == "<b>bold</b>"
    assert markdown.markdown == "# title"
    assert latex.latex == "$x^2$"
    assert json_.json == {"a": [1, 2]}
    assert main.text == "done"  # a string result loses its quotes, as with E2B
    assert execution.text == "done"


def test_plot_is_a_png_result(debug_env: Running) -> None:
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"
    execution = Sandbox.create().run_code(code)
    assert any(r.png for r in execution.results), execution


def test_timeout_interrupts_and_keeps_state(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    sandbox.run_code("kept = 'yes'")
    with pytest.raises(TimeoutException):
        sandbox.run_code("import time; time.sleep(120)", timeout=2)
    started = time.monotonic()
    execution = sandbox.run_code("kept", timeout=60)
    assert execution.text == "yes"
    assert time.monotonic() - started < 50  # not queued behind the 120 s sleep


def test_contexts(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    context = sandbox.create_code_context()
    assert context.language == "python"
    assert context.cwd == "/home/user"
    listed = sandbox.list_code_contexts()
    assert listed[-1].id == context.id
    assert "default" in [c.id for c in listed]
    sandbox.run_code("only_here = 1", context=context)
    assert sandbox.run_code("only_here", context=context).text == "1"
    assert sandbox.run_code("only_here").error is not None  # the default context is another kernel
    sandbox.restart_code_context(context.id)
    after = sandbox.run_code("only_here", context=context)
    assert after.error is not None
    assert (after.error.name, after.error.value) == ("NameError", "name 'only_here' is not defined")
    sandbox.remove_code_context(context.id)
    assert context.id not in [c.id for c in sandbox.list_code_contexts()]


def test_context_cwd_is_inside_the_work_dir(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    context = sandbox.create_code_context(cwd="/home/user/sub", language="python")
    assert context.cwd == "/home/user/sub"
    execution = sandbox.run_code("import os; os.getcwd()", context=context)
    assert execution.text is not None
    assert execution.text.endswith("/sub")
    with pytest.raises(SandboxException, match="outside the sandbox"):
        sandbox.create_code_context(cwd="/etc")
    sandbox.remove_code_context(context)


@pytest.mark.parametrize("language", ["cobol", "kotlin", "sh", "ir"])
def test_languages_no_sandbox_runs_are_refused_clearly(debug_env: Running, language: str) -> None:
    # R, JavaScript, TypeScript, bash and Java are served: tests/e2b/test_e2b_code_languages.py.
    sandbox = Sandbox.create()
    with pytest.raises(SandboxException, match=f"does not run '{language}'"):
        sandbox.run_code("1", language=language)
    with pytest.raises(SandboxException, match="it runs bash, java, javascript"):
        sandbox.create_code_context(language=language)
    with pytest.raises(SandboxException, match=r"commands\.run"):  # says what to use instead
        sandbox.run_code("1", language=language)
    made = [c for c in sandbox.list_code_contexts() if not c.id.startswith("default")]
    assert made == []  # none was made


async def test_async_sdk_with_async_callbacks(debug_env: Running) -> None:
    sandbox = await AsyncSandbox.create()
    lines: list[str] = []

    async def on_stdout(message: object) -> None:
        lines.append(str(message))

    execution = await sandbox.run_code("print('async hello'); 6 * 7", on_stdout=on_stdout)
    assert execution.text == "42"
    assert "".join(lines) == "async hello\n"


def test_env_vars_for_one_call(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    with_env = sandbox.run_code(
        "import os; os.getenv('E2B_TEST_FOO')", envs={"E2B_TEST_FOO": "bar"}
    )
    after = sandbox.run_code("import os; os.getenv('E2B_TEST_FOO', 'default')")
    assert with_env.text == "bar"
    assert after.text == "default"
