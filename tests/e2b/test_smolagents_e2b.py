"""smolagents' own ``executor_type="e2b"``, unchanged, against the E2B server (debug mode)."""

from __future__ import annotations

from typing import Any

import pytest
from e2b_server_helpers import Running

pytest.importorskip("smolagents")
from PIL import Image
from smolagents import CodeAgent
from smolagents.models import ChatMessage, MessageRole, Model

pytestmark = pytest.mark.timeout(180)


class ScriptedModel(Model):
    """Canned code actions; keeps the text of every prompt it was given."""

    def __init__(self, actions: list[str]) -> None:
        super().__init__(model_id="scripted")
        self.actions = list(actions)
        self.prompts: list[str] = []

    def generate(self, messages: list[Any], **kwargs: Any) -> ChatMessage:
        self.prompts.append(
            "\n".join(
                part["text"]
                for m in messages
                if isinstance(m.content, list)
                for part in m.content
                if part.get("type") == "text"
            )
        )
        code = self.actions.pop(0)
        return ChatMessage(
            role=MessageRole.ASSISTANT, content=f"Thought: go.\n<code>\n{code}\n</code>"
        )


def test_code_agent_with_executor_type_e2b_runs_on_the_server(debug_env: Running) -> None:
    model = ScriptedModel(
        [
            "rows = [3, 4]\nprint('rows ready')",
            "rows[9]",
            "from PIL import Image\nImage.new('RGB', (5, 5), 'blue')",
            "final_answer(sum(rows))",
        ]
    )
    with CodeAgent(
        tools=[], model=model, executor_type="e2b", max_steps=5, verbosity_level=-1
    ) as agent:
        assert agent.run("Sum the rows") == 7
        step_outputs = [getattr(s, "action_output", None) for s in agent.memory.steps]
    assert "rows ready" in model.prompts[1]  # state and output across steps
    assert "IndexError" in model.prompts[2]  # the error reached the model
    assert any(isinstance(o, Image.Image) and o.size == (5, 5) for o in step_outputs)
    # The sandbox is a jupyter-exec session: every action is in its notebook.
    notebooks = list(debug_env.root.rglob("*.ipynb"))
    assert any("rows = [3, 4]" in nb.read_text() for nb in notebooks)
