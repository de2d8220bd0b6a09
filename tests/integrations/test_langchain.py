"""The LangChain tool, driven by a real LangChain agent (``create_agent``) with a scripted model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")
agents = pytest.importorskip("langchain.agents")
from langchain_core.language_models.fake_chat_models import (  # noqa: E402
    FakeMessagesListChatModel,
)
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatResult  # noqa: E402
from langchain_core.tools import BaseTool  # noqa: E402

from jupyter_exec.integrations.langchain import JupyterSessions, python_tool  # noqa: E402
from tests.language_kernels import language_kernels  # noqa: E402, F401

pytestmark = pytest.mark.timeout(180)


class ScriptedChatModel(FakeMessagesListChatModel):
    """Canned AI messages (tool calls, then a reply); keeps every prompt it was given."""

    seen: list[list[BaseMessage]] = []

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def _calls(*codes: str, reply: str = "done") -> ScriptedChatModel:
    steps: list[BaseMessage] = [
        AIMessage(content="", tool_calls=[{"name": "python", "args": {"code": c}, "id": f"c{i}"}])
        for i, c in enumerate(codes)
    ]
    return ScriptedChatModel(responses=[*steps, AIMessage(content=reply)], seen=[])


def _tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def _text(message: ToolMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text")


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[JupyterSessions]:
    """Sessions whose cells may take as long as a loaded machine needs (a plot's first import
    of matplotlib took past 3 s beside a full suite); the timeout test sets its own."""
    with JupyterSessions(tmp_path, timeout=120, name="agent") as s:
        yield s


def _run(model: ScriptedChatModel, tool: BaseTool, thread: str = "t1") -> dict[str, Any]:
    agent = agents.create_agent(model, tools=[tool])
    state: dict[str, Any] = agent.invoke(
        {"messages": [{"role": "user", "content": "go"}]}, {"configurable": {"thread_id": thread}}
    )
    return state


CIRCLE = ("import math\nr = 3", "print(round(math.pi * r ** 2, 2))")


def test_state_is_kept_across_calls_and_recorded(sessions: JupyterSessions, tmp_path: Path) -> None:
    tool = python_tool(sessions)
    model = _calls(*CIRCLE)
    state = _run(model, tool)
    replies = _tool_messages(state)
    assert [m.status for m in replies] == ["success", "success"]
    assert _text(replies[1]).strip() == "28.27"
    assert state["messages"][-1].content == "done"
    # What the model was shown: its second call saw the first result, its last the second.
    assert any(isinstance(m, ToolMessage) for m in model.seen[1])
    assert "28.27" in str(model.seen[-1][-1].content)
    # The thread's session is recorded as a notebook, one cell per call, in its own folder.
    session = sessions.session("t1")
    assert session.work_dir == (tmp_path / "t1").resolve()
    notebook = session.notebook_path
    assert notebook is not None
    cells = json.loads(notebook.read_text())["cells"]
    assert ["".join(c["source"]) for c in cells] == list(CIRCLE)


def test_each_thread_has_its_own_state(sessions: JupyterSessions) -> None:
    tool = python_tool(sessions)
    _run(_calls("secret = 41"), tool, thread="alice")
    state = _run(_calls("print(secret + 1)"), tool, thread="bob")
    [reply] = _tool_messages(state)
    assert reply.status == "error"
    assert "NameError: name 'secret' is not defined" in _text(reply)
    state = _run(_calls("print(secret + 1)"), tool, thread="alice")
    assert _text(_tool_messages(state)[0]).strip() == "42"
    assert sorted(sessions.thread_ids) == ["alice", "bob"]


def test_one_session_for_every_thread_when_asked(tmp_path: Path) -> None:
    with JupyterSessions(tmp_path, per_thread=False, name="one") as shared:
        tool = python_tool(shared)
        _run(_calls("n = 5"), tool, thread="a")
        state = _run(_calls("print(n * 2)"), tool, thread="b")
        assert _text(_tool_messages(state)[0]).strip() == "10"
        assert shared.session().work_dir == tmp_path.resolve()


def test_a_plot_is_reported_to_the_model(sessions: JupyterSessions) -> None:
    code = "import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.show()"
    model = _calls(code)
    state = _run(model, python_tool(sessions))
    [reply] = _tool_messages(state)
    assert reply.status == "success"
    assert isinstance(reply.content, list)
    images = [p for p in reply.content if isinstance(p, dict) and p.get("type") == "image"]
    assert len(images) == 1
    assert images[0]["mime_type"] == "image/png"
    assert images[0]["base64"].startswith("iVBOR")  # a PNG, base64
    text = _text(reply)
    assert "[image/png saved to agent_files/" in text
    saved = text.split("saved to ", 1)[1].split("]", 1)[0]
    assert (sessions.session("t1").work_dir / saved).is_file()
    assert model.seen[-1][-1].content == reply.content  # the model was shown text and image


def test_images_can_be_left_to_the_text(sessions: JupyterSessions) -> None:
    tool = python_tool(sessions, images=False)
    answer = tool.invoke({"code": "import matplotlib.pyplot as plt\nplt.plot([1])\nplt.show()"})
    assert isinstance(answer, str)
    assert answer.startswith("[image/png saved to agent_files/")


def test_calls_outside_a_thread_share_a_session_no_thread_can_reach(
    sessions: JupyterSessions, tmp_path: Path
) -> None:
    tool = python_tool(sessions)
    tool.invoke({"code": "owner = 'nobody'"})
    assert tool.invoke({"code": "print(owner)"}).strip() == "nobody"
    state = _run(_calls("print(owner)"), tool, thread="_shared")
    assert "NameError" in _text(_tool_messages(state)[0])
    assert sessions.session().work_dir == (tmp_path / "_shared").resolve()
    assert sessions.session("_shared").work_dir.name.startswith("shared-")
    assert sessions.thread_ids == [None, "_shared"]


def test_an_error_is_readable_by_the_model(sessions: JupyterSessions) -> None:
    model = _calls("print('loading')\nrows = {'a': 1}\nrows['b']", "print(rows['a'])")
    state = _run(model, python_tool(sessions))
    failed, fixed = _tool_messages(state)
    assert failed.status == "error"
    text = _text(failed)
    assert "loading" in text
    assert "KeyError: 'b'" in text
    assert "rows['b']" in text
    assert "\x1b[" not in text
    assert fixed.status == "success"
    assert _text(fixed).strip() == "1"
    assert "KeyError" in str(model.seen[1][-1].content)  # the model was shown the error


def test_a_timeout_interrupts_the_code_and_keeps_the_state(tmp_path: Path) -> None:
    model = _calls("import time\nkept = 'yes'\nwhile True:\n    time.sleep(0.05)", "print(kept)")
    with JupyterSessions(tmp_path, timeout=3, name="agent") as sessions:
        state = _run(model, python_tool(sessions))
    stopped, after = _tool_messages(state)
    assert stopped.status == "error"
    assert "Timeout" in _text(stopped)
    assert "time.sleep(0.05)" in _text(stopped)
    assert _text(after).strip() == "yes"


def test_the_tool_works_from_an_asyncio_agent(sessions: JupyterSessions) -> None:
    async def main() -> dict[str, Any]:
        agent = agents.create_agent(
            _calls("v = 2", "print(v ** 10)"), tools=[python_tool(sessions)]
        )
        state: dict[str, Any] = await agent.ainvoke(
            {"messages": [{"role": "user", "content": "go"}]},
            {"configurable": {"thread_id": "async"}},
        )
        await sessions.aclose()
        return state

    state = asyncio.run(main())
    assert _text(_tool_messages(state)[1]).strip() == "1024"
    assert sessions.thread_ids == []


@pytest.mark.usefixtures("language_kernels")
@pytest.mark.filterwarnings("ignore:Passing unrecognized arguments:DeprecationWarning")
def test_a_call_in_r_runs_in_the_threads_own_r_kernel(tmp_path: Path) -> None:
    with JupyterSessions(tmp_path, timeout=120, name="agent") as sessions:
        tool = python_tool(sessions)
        steps: list[BaseMessage] = [
            AIMessage(
                content="",
                tool_calls=[{"name": "python", "args": args, "id": f"c{i}"}],
            )
            for i, args in enumerate(
                [
                    {"code": "v <- c(1, 2, 3)", "language": "r"},
                    {"code": "v = 'python'"},
                    {"code": "cat(sum(v) * 7)", "language": "r"},
                    {"code": "print(v)"},
                ]
            )
        ]
        model = ScriptedChatModel(responses=[*steps, AIMessage(content="done")], seen=[])
        replies = _tool_messages(_run(model, tool))
        assert [m.status for m in replies] == ["success"] * 4
        assert _text(replies[2]).strip() == "42"  # R kept v; Python's v is its own
        assert _text(replies[3]).strip() == "python"
        other = _run(
            ScriptedChatModel(
                responses=[
                    AIMessage(
                        content="",
                        tool_calls=[
                            {
                                "name": "python",
                                "args": {"code": "cat(exists('v'))", "language": "r"},
                                "id": "o",
                            }
                        ],
                    ),
                    AIMessage(content="done"),
                ],
                seen=[],
            ),
            tool,
            thread="t2",
        )
        assert _text(_tool_messages(other)[0]).strip() == "FALSE"  # each thread its own R kernel
