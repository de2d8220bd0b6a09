"""The AG2 0.x executor, driven by a real ``ConversableAgent`` (``ag2<1``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

coding = pytest.importorskip("autogen.coding.base")
from autogen import ConversableAgent  # noqa: E402

from jupyter_exec.integrations.ag2 import SessionCodeExecutor  # noqa: E402
from tests.language_kernels import language_kernels  # noqa: E402, F401

pytestmark = pytest.mark.timeout(180)

SCATTER = """\
Let me plot the data.

```python
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
xs = list(range(20))
ys = [v * v for v in xs]
fig, ax = plt.subplots()
ax.scatter(xs, ys)
fig.savefig("scatter.png")
print(f"plotted {len(xs)} points")
```
"""


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[SessionCodeExecutor]:
    (tmp_path / "work").mkdir()
    # As long as a loaded machine needs (a plot's first matplotlib import can take seconds
    # beside a full suite); the runaway test sets a short timeout of its own.
    with SessionCodeExecutor(tmp_path / "work", timeout=120, name="agent") as ex:
        yield ex


def _agent(executor: SessionCodeExecutor) -> ConversableAgent:
    return ConversableAgent(
        "runner",
        llm_config=False,
        human_input_mode="NEVER",
        code_execution_config={"executor": executor},
    )


def _reply(agent: ConversableAgent, content: Any) -> str:
    reply = agent.generate_reply(messages=[{"role": "user", "content": content}])
    assert isinstance(reply, str)
    return reply


def test_is_an_ag2_code_executor(executor: SessionCodeExecutor) -> None:
    assert isinstance(executor, coding.CodeExecutor)
    blocks = executor.code_extractor.extract_code_blocks(SCATTER)
    assert [type(b) for b in blocks] == [coding.CodeBlock]
    assert blocks[0].language == "python"


def test_agent_plots_then_reuses_state(executor: SessionCodeExecutor) -> None:
    agent = _agent(executor)
    first = _reply(agent, SCATTER)
    assert first.startswith("exitcode: 0 (execution succeeded)")
    assert "plotted 20 points" in first
    assert "Files written (relative to the work dir): scatter.png" in first
    assert (executor.work_dir / "scatter.png").read_bytes().startswith(b"\x89PNG")

    second = _reply(agent, "Now the total:\n```python\nprint(sum(ys))\n```")
    assert second == "exitcode: 0 (execution succeeded)\nCode output: 2470"

    # The conversation is a notebook.
    assert executor.session.notebook_path == executor.work_dir / "agent.ipynb"


def test_result_fields(executor: SessionCodeExecutor) -> None:
    blocks = [
        coding.CodeBlock(
            code="from IPython.display import Image\nimport matplotlib.pyplot as plt\n"
            "plt.plot([1, 2]); plt.show()",
            language="python",
        ),
        coding.CodeBlock(code="echo shell here", language="bash"),
    ]
    result = executor.execute_code_blocks(blocks)
    assert isinstance(result, coding.IPythonCodeResult)
    assert result.exit_code == 0
    assert f"Image data saved to {result.output_files[0]}" in result.output  # AG2's wording
    assert "shell here" in result.output
    assert [Path(p).name for p in result.output_files] == ["cell-001-1.png"]
    assert all(Path(p).is_absolute() and Path(p).is_file() for p in result.output_files)


def test_errors_stop_the_run_and_are_short(executor: SessionCodeExecutor) -> None:
    result = executor.execute_code_blocks(
        [
            coding.CodeBlock(code="print('before')\n{}['missing']", language="python"),
            coding.CodeBlock(code="print('never')", language="python"),
        ]
    )
    assert result.exit_code == 1
    assert result.output.startswith("before\nTraceback (most recent call last):")
    assert "KeyError: 'missing'" in result.output
    assert "1 later code block was not run" in result.output
    assert "never" not in result.output
    assert "\x1b[" not in result.output


def test_runaway_block_returns_promptly_and_next_block_works(tmp_path: Path) -> None:
    with SessionCodeExecutor(tmp_path, timeout=5, name="agent") as executor:
        _runaway_then_next(executor)


def _runaway_then_next(executor: SessionCodeExecutor) -> None:
    agent = _agent(executor)
    _reply(agent, "```python\nkept = 'yes'\n```")
    started = time.monotonic()
    reply = _reply(agent, "```python\nwhile True:\n    pass\n```")
    assert time.monotonic() - started < 15
    assert reply.startswith("exitcode: 124 (execution failed)")
    assert "ExecutionTimeout" in reply
    assert _reply(agent, "```python\nprint(kept)\n```").endswith("Code output: yes")


def test_filename_directive_and_shell(executor: SessionCodeExecutor) -> None:
    agent = _agent(executor)
    reply = _reply(
        agent,
        [
            {
                "type": "text",
                "text": "```python\n# filename: tools/helper.py\nANSWER = 42\n```\n"
                "```sh\ncat tools/helper.py | wc -l\n```",
            }
        ],
    )
    assert reply.startswith("exitcode: 0")
    assert (executor.work_dir / "tools" / "helper.py").is_file()
    assert "tools/helper.py" in reply
    escaped = executor.execute_code_blocks(
        [coding.CodeBlock(code="# filename: ../../evil.py\nx = 1", language="python")]
    )
    assert escaped.exit_code == 1
    assert "outside the work dir" in escaped.output


def test_unrunnable_language(executor: SessionCodeExecutor) -> None:
    saved = executor.execute_code_blocks(
        [coding.CodeBlock(code="# filename: conf.yaml\na: 1\n", language="yaml")]
    )
    assert (saved.exit_code, saved.output) == (0, "[saved conf.yaml]")
    refused = executor.execute_code_blocks([coding.CodeBlock(code="a: 1", language="yaml")])
    assert refused.exit_code == 1
    assert "cannot be run" in refused.output


def test_restart_clears_state(executor: SessionCodeExecutor) -> None:
    executor.execute_code_blocks([coding.CodeBlock(code="gone = 1", language="python")])
    executor.restart()
    result = executor.execute_code_blocks([coding.CodeBlock(code="gone", language="python")])
    assert result.exit_code == 1
    assert "NameError" in result.output


def test_a_network_policy_is_given_with_the_environment(tmp_path: Path) -> None:
    from jupyter_exec import InvalidArgument, NetworkPolicy
    from jupyter_exec.integrations.ag2_sandbox import JupyterSandbox
    from jupyter_exec.integrations.ag2_tools import JupyterCodeEnvironment

    policy = {"allow": ["pypi.org", "files.pythonhosted.org"]}
    executor = SessionCodeExecutor(tmp_path, environment="docker", network=policy)
    assert executor.environment is not None
    assert executor.environment.session_options()["network"] == NetworkPolicy(**policy)
    assert JupyterCodeEnvironment(environment="docker", network=policy).environment.backend == (
        "docker"
    )
    # refused when made, not mid-conversation: a local kernel has the whole network
    for make in (
        lambda: SessionCodeExecutor(tmp_path, network=policy),
        lambda: JupyterCodeEnvironment(environment="venv", network=policy),
        lambda: JupyterSandbox(environment="local", network=policy),
    ):
        with pytest.raises(InvalidArgument, match="enforced only for Docker kernels"):
            make()
    with pytest.raises(InvalidArgument, match="not both"):
        SessionCodeExecutor(tmp_path, kernel_name="python3", network=policy)


# -- blocks fenced in other languages ----------------------------------------------------------


@pytest.mark.usefixtures("language_kernels")
@pytest.mark.filterwarnings("ignore:Passing unrecognized arguments:DeprecationWarning")
def test_r_and_js_blocks_run_in_stateful_kernels_of_their_language(tmp_path: Path) -> None:
    with SessionCodeExecutor(tmp_path, timeout=120, name="poly") as executor:
        message = (
            "```r\nx <- 21\n```\n```python\nx = 'python'\n```\n"
            "```r\ncat(x * 2)\n```\n"
            "```js\nlet n = 4\n```\n"
            "```ts\nDeno.writeTextFileSync('n.txt', String(n * 10))\n```\n"
            "```bash\necho shell\n```\n"
        )
        blocks = executor.code_extractor.extract_code_blocks(message)
        result = executor.execute_code_blocks(blocks)
        assert result.exit_code == 0, result.output
        assert "42" in result.output  # R kept x; Python's x is its own
        assert "shell" in result.output  # shell blocks stay %%bash cells of the Python kernel
        # js and ts share one Deno kernel (read from the file: Deno may send outputs late)
        assert (tmp_path / "n.txt").read_text() == "40"
        check = executor.execute_code_blocks([coding.CodeBlock(code="print(x)", language="python")])
        assert "python" in check.output
        assert sorted(p.name for p in tmp_path.glob("*.ipynb")) == [
            "poly-javascript.ipynb",
            "poly-r.ipynb",
            "poly.ipynb",
        ]
        executor.restart()
        gone = executor.execute_code_blocks(
            [coding.CodeBlock(code="cat(exists('x'))", language="r")]
        )
        assert "FALSE" in gone.output
