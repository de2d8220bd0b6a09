"""Run inside a venv with AG2 1.x: drive SandboxCodeTool on JupyterCodeEnvironment, print JSON.

Usage: python ag2x_drive.py WORK_DIR. The model is AG2's scripted TestConfig, so
the agent loop, the tool schema and the tool call path are AG2's own.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from ag2 import Agent
from ag2.events import ToolCallEvent, ToolResultEvent
from ag2.testing import TestConfig
from ag2.tools import SandboxCodeTool
from ag2.tools.code import CodeEnvironment, CodeRunResult

from jupyter_exec.integrations.ag2_tools import JupyterCodeEnvironment


def call(code: str, language: str) -> ToolCallEvent:
    return ToolCallEvent(
        name="run_code", arguments=json.dumps({"code": code, "language": language})
    )


async def main(work_dir: str) -> dict[str, object]:
    env = JupyterCodeEnvironment(work_dir, timeout=3, name="ag2x")
    report: dict[str, object] = {"is_code_environment": isinstance(env, CodeEnvironment)}
    async with env:
        tool = SandboxCodeTool(env)
        agent = Agent(
            "analyst",
            config=TestConfig(
                call("total = sum(range(10))\nprint('set', total)", "python"),
                call("echo from bash; ls", "bash"),
                call("print(total * 2)", "python"),
                call("1/0", "python"),
                "done",
            ),
            tools=[tool],
        )
        reply = await agent.ask("compute")
        events = await reply.history.get_events()
        report["reply"] = reply.body
        report["tool_results"] = [
            "".join(str(getattr(part, "content", "")) for part in e.result.parts)
            for e in events
            if isinstance(e, ToolResultEvent)
        ]
        direct = await env.run("print(total + 1)", "python")
        report["direct"] = [type(direct) is CodeRunResult, direct.output, direct.exit_code]
        started = time.monotonic()
        runaway = await env.run("while True: pass", "python")
        report["runaway"] = [runaway.exit_code, time.monotonic() - started]
        after = await env.run("print(total)", "python")
        report["after_runaway"] = [after.output, after.exit_code]
        failed = await env.run("exit 3", "bash")
        report["bash_failure"] = [failed.output, failed.exit_code]
        other = await env.run("console.log(1)", "javascript")
        report["javascript"] = [other.output, other.exit_code]
        report["languages"] = list(tool.environment.supported_languages)
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
