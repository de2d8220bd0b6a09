"""The agent adapters on the Docker backend: Deep Agents' standard tests, smolagents, LangChain."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_work_dir

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

pytest.importorskip("deepagents")
standard = pytest.importorskip("langchain_tests.integration_tests")

from jupyter_exec.integrations.deepagents import JupyterSandbox  # noqa: E402
from jupyter_exec.integrations.langchain import JupyterSessions, python_tool  # noqa: E402
from jupyter_exec.integrations.smolagents import JupyterExecutor  # noqa: E402


def _docker(kernel_image: str) -> dict[str, Any]:
    return {"environment": "docker", "docker": {"image": kernel_image}}


@pytest.mark.filterwarnings("ignore:Class-scoped fixtures defined as instance methods")
class TestJupyterSandboxOnDocker(standard.SandboxIntegrationTests):
    """Deep Agents' provider tests in the container (its /tmp is the container's own)."""

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(
        cls, kernel_image: str, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[JupyterSandbox]:
        work = make_work_dir(tmp_path_factory.mktemp("deepagents-docker"))
        with JupyterSandbox(work, timeout=60, name="standard", **_docker(kernel_image)) as box:
            yield box


def _expected_to_differ(name: str, why: str) -> Any:
    inherited = getattr(standard.SandboxIntegrationTests, name)

    @functools.wraps(inherited)
    def test(self: Any, *args: Any, **kwargs: Any) -> None:
        inherited(self, *args, **kwargs)

    return pytest.mark.xfail(reason=why, strict=True, raises=AssertionError)(test)


_WHY = "deepagents 0.7's BaseSandbox (write overwrites; glob returns absolute paths)"
for _name in (
    "test_write_existing_file_fails",
    "test_glob",
    "test_glob_basic_pattern",
    "test_glob_with_directories",
    "test_glob_hidden_files_explicitly",
    "test_glob_with_character_class",
    "test_glob_with_question_mark",
):
    setattr(TestJupyterSandboxOnDocker, _name, _expected_to_differ(_name, _WHY))


def test_smolagents_executor_in_a_container(kernel_image: str, tmp_path: Path) -> None:
    smolagents = pytest.importorskip("smolagents")
    work = make_work_dir(tmp_path)
    with JupyterExecutor(work_dir=work, timeout=30, name="smol", **_docker(kernel_image)) as ex:
        ex.send_tools({"final_answer": smolagents.FinalAnswerTool()})
        first = ex("import os\nwhere = os.getcwd()\nprint(where)")
        assert first.logs.strip() == "/work"
        with pytest.raises(smolagents.utils.AgentError, match="ZeroDivisionError"):
            ex("1/0")
        done = ex("final_answer(where + '!')")
        assert done.is_final_answer
        assert done.output == "/work!"


def test_langchain_tool_in_a_container(kernel_image: str, tmp_path: Path) -> None:
    work = make_work_dir(tmp_path)
    with JupyterSessions(work, per_thread=False, name="lc", **_docker(kernel_image)) as sessions:
        tool = python_tool(sessions)
        assert tool.invoke({"code": "n = 6\nimport getpass; getpass.getuser()"}) != ""
        assert tool.invoke({"code": "print(n * 7)"}).strip() == "42"
