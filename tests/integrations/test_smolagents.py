"""The smolagents executor, driven by a real ``CodeAgent`` with a scripted model (no network)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

smolagents = pytest.importorskip("smolagents")
from PIL import Image  # noqa: E402
from smolagents import CodeAgent, tool  # noqa: E402
from smolagents.models import ChatMessage, MessageRole, Model  # noqa: E402
from smolagents.remote_executors import RemotePythonExecutor  # noqa: E402

from jupyter_exec.integrations.smolagents import JupyterExecutor, _missing_modules  # noqa: E402

pytestmark = pytest.mark.timeout(180)


class ScriptedModel(Model):
    """A smolagents ``Model`` that answers with canned actions and keeps what it was shown."""

    def __init__(self, actions: list[str]) -> None:
        super().__init__(model_id="scripted")
        self.actions = list(actions)
        self.seen: list[list[Any]] = []

    def generate(self, messages: list[Any], **kwargs: Any) -> ChatMessage:
        self.seen.append(list(messages))
        code = self.actions.pop(0)
        return ChatMessage(
            role=MessageRole.ASSISTANT, content=f"Thought: next step.\n<code>\n{code}\n</code>"
        )

    def last_prompt_text(self) -> str:
        """Every text part of the messages of the latest call, joined."""
        return "\n".join(_texts(self.seen[-1]))

    def last_prompt_images(self) -> list[Any]:
        return [
            part["image"]
            for message in self.seen[-1]
            if isinstance(message.content, list)
            for part in message.content
            if part.get("type") == "image"
        ]


def _texts(messages: list[Any]) -> Iterator[str]:
    for message in messages:
        content = message.content
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            yield from (part["text"] for part in content if part.get("type") == "text")


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[JupyterExecutor]:
    """An executor whose actions may take as long as a loaded machine needs (a plot's first
    import of matplotlib took past 3 s beside a full suite); the timeout test sets its own."""
    with JupyterExecutor(work_dir=tmp_path, timeout=120, name="agent") as ex:
        yield ex


def _agent(model: Model, executor: JupyterExecutor, tools: list[Any] | None = None) -> CodeAgent:
    return CodeAgent(
        tools=tools or [],
        model=model,
        executor=executor,
        step_callbacks=[executor.show_images],
        max_steps=4,
        verbosity_level=-1,
    )


def _notebook_sources(executor: JupyterExecutor) -> list[str]:
    path = executor.session.notebook_path
    assert path is not None
    cells = json.loads(path.read_text())["cells"]
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]


def test_is_a_remote_python_executor(executor: JupyterExecutor) -> None:
    assert isinstance(executor, RemotePythonExecutor)
    assert executor.session.is_alive


def test_state_persists_across_steps_and_final_answer_ends_the_run(
    executor: JupyterExecutor,
) -> None:
    model = ScriptedModel(
        [
            "import math\nradius = 2\nprint('radius set')",
            "area = round(math.pi * radius ** 2, 3)\nprint(f'area is {area}')\nfinal_answer(area)",
        ]
    )
    answer = _agent(model, executor).run("What is the area of a circle of radius 2?")
    assert answer == pytest.approx(12.566)
    assert "radius set" in model.last_prompt_text()  # step 1's output reached step 2
    # Every step is a cell of the session's notebook, final answer included.
    sources = _notebook_sources(executor)
    assert any("radius = 2" in s for s in sources)
    assert any("final_answer(area)" in s for s in sources)
    assert any("final_answer = " in s for s in sources)  # the tools, sent as source


def test_tools_are_sent_to_the_kernel(executor: JupyterExecutor) -> None:
    @tool
    def shout(text: str) -> str:
        """Upper-case a text.

        Args:
            text: what to shout
        """
        return text.upper() + "!"

    model = ScriptedModel(["final_answer(shout('hello'))"])
    assert _agent(model, executor, [shout]).run("Shout hello") == "HELLO!"


def test_a_plot_reaches_the_model(executor: JupyterExecutor) -> None:
    model = ScriptedModel(
        [
            "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()",
            "final_answer('plotted')",
        ]
    )
    assert _agent(model, executor).run("Plot the squares") == "plotted"
    images = model.last_prompt_images()
    assert len(images) == 1
    assert isinstance(images[0], Image.Image)
    assert images[0].width > 100
    text = model.last_prompt_text()
    assert "[image/png saved to agent_files/" in text  # the text names the saved file too
    saved = text.split("[image/png saved to ", 1)[1].split("]", 1)[0]
    assert (executor.work_dir / saved).is_file()


def test_an_image_value_comes_back_as_a_pil_image(executor: JupyterExecutor) -> None:
    out = executor("from PIL import Image\nImage.new('RGB', (8, 6), 'red')")
    assert isinstance(out.output, Image.Image)
    assert out.output.size == (8, 6)
    assert not out.is_final_answer
    plain = executor("x = 6 * 7\nx")
    assert plain.output == "42"


def test_an_error_is_shown_to_the_model(executor: JupyterExecutor) -> None:
    model = ScriptedModel(
        [
            "print('before the error')\nvalues = [1, 2]\nvalues[5]",
            "final_answer(len(values))",
        ]
    )
    assert _agent(model, executor).run("Index the list") == 2
    text = model.last_prompt_text()
    assert "before the error" in text  # output printed before the error is kept
    assert "IndexError: list index out of range" in text
    assert "values[5]" in text  # the model's own line, in a short traceback
    assert "\x1b[" not in text


def test_a_timeout_interrupts_the_action_and_keeps_the_state(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            "import time\ntotal = 10\nwhile True:\n    time.sleep(0.05)",
            "final_answer(total + 1)",
        ]
    )
    with JupyterExecutor(work_dir=tmp_path, timeout=3, name="agent") as executor:
        assert _agent(model, executor).run("Wait forever") == 11
    text = model.last_prompt_text()
    assert "Timeout" in text
    assert "time.sleep(0.05)" in text  # where it was stopped


def test_final_answer_keeps_what_was_printed_before_it(executor: JupyterExecutor) -> None:
    executor.send_tools({"final_answer": smolagents.FinalAnswerTool()})
    out = executor("print('working')\nfinal_answer({'a': 1})")
    assert out.is_final_answer
    assert out.output == {"a": 1}
    assert out.logs.strip() == "working"
    assert "FinalAnswerException" not in out.logs


def test_missing_additional_imports_are_installed_quietly(tmp_path: Path) -> None:
    # Importable modules are not installed again (nothing runs pip here: no network needed).
    with JupyterExecutor(["json", "math.*", "*"], work_dir=tmp_path, name="imports") as ex:
        assert ex.installed_packages == ["json", "math.*", "*"]
        assert _notebook_sources(ex) == []  # the probe ran as a process, not a cell


def test_a_requirement_named_by_its_distribution_is_not_installed_again(tmp_path: Path) -> None:
    """smolagents asks for ``pillow`` (the distribution) where the module is ``PIL``: installed
    here, so no ``%pip install`` cell runs (pip's own no-op took past a 3 s action timeout
    on a loaded machine and failed every agent run that had a tool)."""
    with JupyterExecutor(work_dir=tmp_path, timeout=3, name="dists") as ex:
        assert ex.install_packages(["pillow", "PIL"]) == ["pillow", "PIL"]
        assert _notebook_sources(ex) == []
        assert _missing_modules(ex.session, ["pillow", "PIL", "no_such_module_x1"]) == [
            "no_such_module_x1"
        ]
