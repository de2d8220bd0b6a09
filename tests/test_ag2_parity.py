"""AG2's own Jupyter-executor test cases, run against our AG2 executor.

AG2 0.x tests its ``EmbeddedIPythonCodeExecutor`` / ``JupyterCodeExecutor`` in
``test/coding/test_embedded_ipython_code_executor.py``. Each case below is one
of those, restated for :class:`SessionCodeExecutor` (written here, not
copied): the same blocks, the same checks, with our wording where AG2 checks
its own sentences ("Image data saved to ..." is "[image/png saved to ...]"
here). Cases that test AG2's factory by its string name are left out: that
name belongs to AG2's executor. After them, the behaviours a user switching
from AG2 relies on: HTML and DataFrames saved and named, indented fences,
files of other languages saved, the short ``# name.py`` form, a kernelspec
chosen by name.
"""

from __future__ import annotations

import json
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

from jupyter_exec.integrations.ag2 import SessionCodeExecutor  # noqa: E402

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[SessionCodeExecutor]:
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


def test_silent_pip_install(executor: SessionCodeExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # no network here: nothing may be fetched
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    result = run(executor, "!pip install matplotlib numpy")
    assert result.exit_code == 0
    assert result.output.strip() in ("", "(no output)")
    missing = f"matplotlib_{uuid.uuid4().hex}"
    result = run(executor, f"!pip install {missing}")
    assert result.exit_code == 0
    assert "ERROR: " in result.output


def test_restart(executor: SessionCodeExecutor) -> None:
    result = run(executor, "x = 123")
    assert result.exit_code == 0
    assert result.output.strip() in ("", "(no output)")
    executor.restart()
    result = run(executor, "print(x)")
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
    assert f"saved to {saved.relative_to(executor.work_dir.resolve()).as_posix()}" in (
        result.output
    )


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
    relative = saved.relative_to(executor.work_dir.resolve()).as_posix()
    assert f"[text/html saved to {relative}]" in result.output
    assert "IPython.core.display.HTML object" not in result.output


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
    assert "text/html saved to" in result.output


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
