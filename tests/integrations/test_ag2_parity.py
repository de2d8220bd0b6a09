"""AG2's own executor test cases, run against our AG2 executors.

AG2 0.x tests its ``EmbeddedIPythonCodeExecutor`` / ``JupyterCodeExecutor`` in
``test/coding/test_embedded_ipython_code_executor.py``. Each case below is one
of those, restated for :class:`SessionCodeExecutor` (written here, not
copied): the same blocks, the same checks, with our wording where AG2 checks
its own sentences ("Image data saved to ..." is "[image/png saved to ...]"
here). Cases that test AG2's factory by its string name are left out: that
name belongs to AG2's executor. After them, the behaviours a user switching
from AG2 relies on: HTML and DataFrames saved and named, indented fences,
files of other languages saved, the short ``# name.py`` form, a kernelspec
chosen by name. Last, ``test/coding/test_commandline_code_executor.py``'s cases
against :class:`SessionCommandLineExecutor` (each block its own process); its
command sanitiser and Docker ``container_create_kwargs`` cases test AG2's own
API and are left out.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

coding = pytest.importorskip("autogen.coding.base")
from autogen import ConversableAgent  # noqa: E402
from autogen.coding.base import CodeBlock, CodeExecutor  # noqa: E402
from autogen.coding.factory import CodeExecutorFactory  # noqa: E402

from jupyter_exec.integrations.ag2 import (  # noqa: E402
    SessionCodeExecutor,
    SessionCommandLineExecutor,
)

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionCodeExecutor]:
    """One executor (one kernel) for the cases that only run blocks and read what they gave:
    each defines what it reads and names its own files, so none depends on another's state."""
    with SessionCodeExecutor(tmp_path_factory.mktemp("ag2-shared"), timeout=60) as made:
        yield made


@pytest.fixture
def fresh_executor(tmp_path: Path) -> Iterator[SessionCodeExecutor]:
    """An executor of this test's own, for a case that restarts the kernel or needs its
    kernel started inside the test (after the test's own environment is set)."""
    with SessionCodeExecutor(tmp_path, timeout=60) as made:
        yield made


def run(executor: SessionCodeExecutor, code: str, language: str = "python") -> Any:
    return executor.execute_code_blocks([CodeBlock(code=code, language=language)])


# -- AG2's cases ---------------------------------------------------------------------------


def test_is_code_executor(executor: SessionCodeExecutor) -> None:
    assert isinstance(executor, CodeExecutor)


def test_create(executor: SessionCodeExecutor) -> None:
    config = {"executor": executor}
    assert CodeExecutorFactory.create(config) is executor


def test_init(tmp_path: Path) -> None:
    made = SessionCodeExecutor(timeout=10, kernel_name="python3", output_dir=tmp_path)
    assert made.timeout == 10
    assert made.kernel_name == "python3"
    assert made.work_dir == tmp_path
    made.close()
    with pytest.raises(ValueError, match=r"Output directory .* does not exist"):
        SessionCodeExecutor(timeout=111, kernel_name="python3", output_dir="/invalid/directory")
    with pytest.raises(ValueError, match=r"Kernel .* is not installed"):
        SessionCodeExecutor(timeout=111, kernel_name="invalid_kernel_name", output_dir=tmp_path)


def test_execute_code_single_code_block(executor: SessionCodeExecutor) -> None:
    result = run(executor, "import sys\nprint('hello world!')")
    assert result.exit_code == 0
    assert "hello world!" in result.output


def test_execute_code_multiple_code_blocks(executor: SessionCodeExecutor) -> None:
    blocks = [
        CodeBlock(code="import sys\na = 123 + 123\n", language="python"),
        CodeBlock(code="print(a)", language="python"),
    ]
    result = executor.execute_code_blocks(blocks)
    assert result.exit_code == 0
    assert "246" in result.output
    blocks = [
        CodeBlock(code="\ndef test_function(a, b):\n    return a + b\n", language="python"),
        CodeBlock(code="test_function(431, 423)", language="python"),
    ]
    result = executor.execute_code_blocks(blocks)
    assert result.exit_code == 0
    assert "854" in result.output


def test_execute_code_bash_script(executor: SessionCodeExecutor) -> None:
    result = run(executor, '!echo "hello world!"', "bash")
    assert result.exit_code == 0, result.output
    assert "hello world!" in result.output


def test_timeout(tmp_path: Path) -> None:
    with SessionCodeExecutor(tmp_path, timeout=1) as made:
        result = run(made, "import time; time.sleep(10); print('hello world!')")
        assert result.exit_code
        assert "Timeout" in result.output


def test_silent_pip_install(
    fresh_executor: SessionCodeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel starts at the first block, after these: `!pip` inherits them from it.
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # no network here: nothing may be fetched
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    result = run(fresh_executor, "!pip install matplotlib numpy")
    assert result.exit_code == 0
    assert result.output.strip() in ("", "(no output)")
    missing = f"matplotlib_{uuid.uuid4().hex}"
    result = run(fresh_executor, f"!pip install {missing}")
    assert result.exit_code == 0
    assert "ERROR: " in result.output


def test_restart(fresh_executor: SessionCodeExecutor) -> None:
    result = run(fresh_executor, "x = 123")
    assert result.exit_code == 0
    assert result.output.strip() in ("", "(no output)")
    fresh_executor.restart()
    result = run(fresh_executor, "print(x)")
    assert result.exit_code
    assert "NameError" in result.output


def test_save_image(executor: SessionCodeExecutor) -> None:
    result = run(
        executor,
        "import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n"
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3, 4])\nplt.show()",
    )
    assert result.exit_code == 0, result.output
    saved = Path(result.output_files[0])
    assert saved.is_file()
    assert saved.suffix == ".png"
    assert f"Image data saved to {result.output_files[0]}" in result.output  # AG2's own check


def test_rich_output_names_files_relative_to_the_work_dir(tmp_path: Path) -> None:
    with SessionCodeExecutor(tmp_path, timeout=60, rich_output=True) as made:
        result = run(made, "from IPython.display import HTML\nHTML('<h1>Hello</h1>')")
        saved = Path(result.output_files[0])
        relative = saved.relative_to(made.work_dir.resolve()).as_posix()
        assert f"[text/html saved to {relative}]" in result.output
        assert "IPython.core.display.HTML object" not in result.output
        assert run(made, "x = 1").output == "(no output)"


def test_timeout_preserves_kernel_state(tmp_path: Path) -> None:
    with SessionCodeExecutor(tmp_path, timeout=1) as made:
        assert run(made, "x = 123").exit_code == 0
        result = run(made, "import time; time.sleep(10)")
        assert result.exit_code != 0
        assert "Timeout" in result.output
        result = run(made, "print(x)")
        assert result.exit_code == 0
        assert "123" in result.output


def test_save_html(executor: SessionCodeExecutor) -> None:
    result = run(executor, "from IPython.display import HTML\nHTML('<h1>Hello, world!</h1>')")
    assert result.exit_code == 0
    saved = Path(result.output_files[0])
    assert saved.is_file()
    assert "<h1>Hello, world!</h1>" in saved.read_text()
    assert f"HTML data saved to {result.output_files[0]}" in result.output  # AG2's own check


def test_conversable_agent_code_execution(executor: SessionCodeExecutor) -> None:
    agent = ConversableAgent(
        "user_proxy", llm_config=False, code_execution_config={"executor": executor}
    )
    message = (
        "\nRun this code:\n```python\ndef test_function(a, b):\n    return a * b\n```\n"
        "And then this:\n```python\nprint(test_function(123, 4))\n```\n"
    )
    reply = agent.generate_reply(
        [{"role": "user", "content": message}],
        sender=ConversableAgent("user", llm_config=False, code_execution_config=False),
    )
    assert "492" in str(reply)


# -- what a user switching from AG2 relies on -------------------------------------------------


def test_dataframe_is_shown_as_text_and_saved_as_html(executor: SessionCodeExecutor) -> None:
    result = run(executor, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    assert result.exit_code == 0
    html = [Path(p) for p in result.output_files if p.endswith(".html")]
    assert html
    assert html[0].is_file()
    assert "<table" in html[0].read_text()
    assert "a  b" in result.output
    assert f"HTML data saved to {html[0]}" in result.output


def test_indented_fences_are_extracted_and_run(executor: SessionCodeExecutor) -> None:
    message = (
        "Steps:\n\n1. Compute:\n\n"
        "   ```python\n   for i in range(2):\n       print('row', i)\n   ```\n"
    )
    blocks = executor.code_extractor.extract_code_blocks(message)
    assert len(blocks) == 1
    result = executor.execute_code_blocks(blocks)
    assert result.exit_code == 0, result.output
    assert "row 1" in result.output


@pytest.mark.parametrize(
    ("language", "code", "name"),
    [
        ("html", "<!-- filename: index.html -->\n<h1>hi</h1>\n", "index.html"),
        ("css", "/* filename: style.css */\nh1 { color: red; }\n", "style.css"),
        ("javascript", "// filename: app.js\nconsole.log(1);\n", "app.js"),
    ],
)
def test_blocks_of_other_languages_are_saved(
    executor: SessionCodeExecutor, language: str, code: str, name: str
) -> None:
    result = run(executor, code, language)
    assert result.exit_code == 0, result.output
    saved = executor.work_dir / name
    assert saved.read_text() == code
    if language != "javascript":  # a JavaScript block also runs, where Deno's kernel is installed
        assert name in result.output


def test_short_filename_form(executor: SessionCodeExecutor) -> None:
    result = run(executor, "# test.py\nVALUE = 7\nprint(VALUE * 6)")
    assert "42" in result.output
    assert (executor.work_dir / "test.py").read_text().startswith("# test.py")


def test_kernel_name_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec_dir = tmp_path / "jupyter" / "kernels" / "marked"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Marked",
        "language": "python",
        "env": {"JX_MARK": "from-the-kernelspec"},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    work = tmp_path / "work"
    work.mkdir()
    with SessionCodeExecutor(work, kernel_name="marked") as made:
        result = run(made, "import os; print(os.environ.get('JX_MARK'))")
        assert "from-the-kernelspec" in result.output


def test_missing_work_dir_is_refused_not_made(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        SessionCodeExecutor(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()


# -- AG2's command-line executor cases, against the stateless mode ---------------------------

NOTHING_RUNS = {"python": False, "bash": False, "javascript": False, "html": False, "css": False}


@pytest.fixture(scope="module")
def cli_executor(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SessionCommandLineExecutor]:
    """One command-line executor for the cases that run blocks and read their own results
    (its restart is a warning and no action: the cases cannot disturb each other)."""
    with SessionCommandLineExecutor(tmp_path_factory.mktemp("ag2-cli"), timeout=60) as made:
        yield made


@pytest.mark.parametrize("language", ["python", "bash", "html", "javascript"])
def test_execution_policy_enforcement(tmp_path: Path, language: str) -> None:
    with SessionCommandLineExecutor(tmp_path, execution_policies=NOTHING_RUNS) as made:
        code = "print('Hello, world!')" if language == "python" else "echo 'Hello, world!'"
        result = run(made, code, language)
        assert "Hello, world!" not in result.output
        assert result.code_file is not None
        assert Path(result.code_file).read_text().startswith(code)


def test_commandline_is_code_executor_and_created_as_given(
    cli_executor: SessionCommandLineExecutor,
) -> None:
    assert isinstance(cli_executor, CodeExecutor)
    config = {"executor": cli_executor}
    assert CodeExecutorFactory.create(config) is cli_executor  # type: ignore[arg-type]


def test_commandline_executor_init(tmp_path: Path) -> None:
    made = SessionCommandLineExecutor(tmp_path, timeout=10)
    assert made.timeout == 10
    assert made.work_dir == tmp_path
    made.close()
    # As AG2's: a missing folder is made, one whose parent is missing is a FileNotFoundError.
    SessionCommandLineExecutor(tmp_path / "new", timeout=1).close()
    assert (tmp_path / "new").is_dir()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        SessionCommandLineExecutor(timeout=111, work_dir=tmp_path / "missing" / "leaf")
    assert not (tmp_path / "missing").exists()


def test_work_dir_and_attributes_are_kept_as_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    made = SessionCodeExecutor(timeout=10, kernel_name="python3", output_dir=".")
    assert (made._timeout, made._kernel_name, made._output_dir) == (10, "python3", Path())
    assert made.output_dir == "."
    made.close()
    cli = SessionCommandLineExecutor(timeout=10, work_dir=".")
    assert str(cli.work_dir) == "."
    cli.close()


@pytest.mark.parametrize("variant", ["python", "Python", "py"])
def test_commandline_executor_execute_code(
    cli_executor: SessionCommandLineExecutor, variant: str
) -> None:
    result = run(cli_executor, "import sys; print('hello world!')", variant)
    assert result.exit_code == 0, result.output
    assert "hello world!" in result.output
    assert result.code_file is not None
    result = cli_executor.execute_code_blocks(
        [
            CodeBlock(code="import sys; print('hello world!')", language=variant),
            CodeBlock(code="a = 100 + 100; print(a)", language=variant),
        ]
    )
    assert result.exit_code == 0
    assert "hello world!" in result.output
    assert "200" in result.output
    result = run(cli_executor, "echo 'hello world!'", "bash")
    assert result.exit_code == 0
    assert "hello world!" in result.output
    lines = ["import sys", "print('hello world!')", "a = 100 + 100", "print(a)"]
    result = run(cli_executor, "\n".join(lines), variant)
    assert result.exit_code == 0
    assert "200" in result.output
    assert Path(result.code_file).read_text().splitlines() == lines


SAVED = [
    ("python", "# filename: test.py\nimport sys; print('hello world!')", "test.py", True),
    ("python", "# test.py\nimport sys; print('hello world!')", "test.py", True),
    ("javascript", "// filename: test.js\nconsole.log('hello world!')", "test.js", False),
    ("javascript", "// test.js\nconsole.log('hello world!')", "test.js", False),
    ("css", "/* filename: test.css */\nh1 { color: red; }", "test.css", False),
    ("css", "/* test.css */\nh1 { color: red; }", "test.css", False),
    ("html", "<!-- filename: test.html -->\n<h1>hello world!</h1>", "test.html", False),
    ("html", "<!-- test.html -->\n<h1>hello world!</h1>", "test.html", False),
]


@pytest.mark.parametrize("save_only", [False, True], ids=["run", "save-only"])
def test_commandline_executor_save_files(tmp_path: Path, save_only: bool) -> None:
    policies = NOTHING_RUNS if save_only else None
    with SessionCommandLineExecutor(tmp_path, execution_policies=policies) as made:
        for language, code, name, runs in SAVED:
            result = run(made, code, language)
            assert result.exit_code == 0, result.output
            assert result.code_file is not None
            assert Path(result.code_file).name == name
            assert ("hello world!" in result.output) == (runs and not save_only)


def test_commandline_executor_timeout(tmp_path: Path) -> None:
    with SessionCommandLineExecutor(tmp_path, timeout=1) as made:
        result = run(made, "import time; time.sleep(10); print('hello world!')")
        assert result.exit_code == 124
        assert "Timeout" in result.output
        assert "hello world!" not in result.output


def test_commandline_executor_restart_warns(cli_executor: SessionCommandLineExecutor) -> None:
    with pytest.warns(UserWarning, match=r".*No action is taken."):
        cli_executor.restart()


def test_commandline_policy_override(tmp_path: Path) -> None:
    made = SessionCommandLineExecutor(
        tmp_path, execution_policies={"python": False, "javascript": True}
    )
    assert made.execution_policies["python"] is False
    assert made.execution_policies["javascript"] is True
    assert made.execution_policies["sh"] is True
    made.close()


def test_commandline_executor_conversable_agent(cli_executor: SessionCommandLineExecutor) -> None:
    agent = ConversableAgent(
        "user_proxy", code_execution_config={"executor": cli_executor}, llm_config=False
    )
    assert agent.code_executor is cli_executor
    message = '\n    Example:\n    ```python\n    print("hello extract code")\n    ```\n    '
    reply = agent.generate_reply(
        [{"role": "user", "content": message}],
        sender=ConversableAgent("user", llm_config=False, code_execution_config=False),
    )
    assert "hello extract code" in str(reply)


def test_commandline_runs_are_recorded_in_the_notebook(
    cli_executor: SessionCommandLineExecutor,
) -> None:
    run(cli_executor, "# filename: hello.py\nprint('recorded')")
    notebook = cli_executor.session.notebook_path
    assert notebook is not None
    cells = json.loads(notebook.read_text())["cells"]
    assert "".join(cells[-1]["source"]) == "!python hello.py"
    assert "recorded" in "".join(cells[-1]["outputs"][0]["text"])


def test_lone_surrogate_in_code_is_refused_with_a_reason(executor: SessionCodeExecutor) -> None:
    result = run(executor, "x = '\ud800'\nprint('ran')")
    assert result.exit_code == 1
    assert "lone surrogate U+D800" in result.output
    assert "ran" not in result.output.replace("not run", "")
    assert "42" in run(executor, "print(6 * 7)").output  # the session goes on


@pytest.mark.docker
def test_commandline_executor_in_the_hardened_container(tmp_path: Path) -> None:
    """AG2's Docker command-line case: blocks run as processes in the session's container."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no Docker engine: {exc}")
    with SessionCommandLineExecutor(tmp_path, environment="docker", timeout=60) as made:
        result = run(made, "echo $HOME; id -u", "sh")
        assert result.exit_code == 0, result.output
        assert "65532" in result.output  # the container's unprivileged user, not ours
        with pytest.warns(UserWarning, match="No action is taken"):
            made.restart()
        result = run(made, "# filename: probe.py\nimport os\nprint(os.getcwd())")
        assert result.exit_code == 0, result.output
        assert "/work" in result.output
        assert (tmp_path / "probe.py").is_file()
