"""Run inside a venv with AG2 1.x: an agent's shell tool and code tool on one session, print JSON.

Usage: python ag2x_sandbox_drive.py WORK_DIR. The model is AG2's scripted
TestConfig; SandboxShellTool runs on JupyterSandbox, SandboxCodeTool on the
JupyterCodeEnvironment whose session the sandbox shares.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import PurePosixPath

from ag2 import Agent
from ag2.events import ToolCallEvent, ToolResultEvent
from ag2.testing import TestConfig
from ag2.tools import SandboxCodeTool, SandboxShellTool
from ag2.tools.sandbox import SandboxFactory
from ag2.tools.sandbox.adapter import CodeAdapter
from ag2.tools.sandbox.base import ExecResult, Sandbox

from jupyter_exec.integrations.ag2_sandbox import JupyterSandbox
from jupyter_exec.integrations.ag2_tools import JupyterCodeEnvironment


def call(name: str, **arguments: str) -> ToolCallEvent:
    return ToolCallEvent(name=name, arguments=json.dumps(arguments))


async def main(work_dir: str) -> dict[str, object]:
    code = JupyterCodeEnvironment(work_dir, timeout=3, name="ag2sb")
    shell = JupyterSandbox(share=code, timeout=3)
    report: dict[str, object] = {
        "is_sandbox": isinstance(shell, Sandbox),
        "is_factory": isinstance(shell, SandboxFactory),
    }
    async with code:
        agent = Agent(
            "worker",
            config=TestConfig(
                call(
                    "run_shell_command", command="echo 'x,y' > data.csv && echo '1,2' >> data.csv"
                ),
                call("run_code", code="rows = open('data.csv').read().split()", language="python"),
                call("run_shell_command", command="ls && exit 5"),
                call("run_code", code="print(len(rows))", language="python"),
                "done",
            ),
            tools=[SandboxShellTool(shell), SandboxCodeTool(code)],
        )
        reply = await agent.ask("work")
        events = await reply.history.get_events()
        report["reply"] = reply.body
        report["tool_results"] = [
            "".join(str(getattr(part, "content", "")) for part in e.result.parts)
            for e in events
            if isinstance(e, ToolResultEvent)
        ]
        direct = await shell.exec(["printf", "%s|", "a b", "$HOME"], env={"GREETING": "hi"})
        report["argv"] = [type(direct) is ExecResult, direct.output, direct.exit_code]
        with_env = await shell.exec(["sh", "-c", "echo $GREETING"], env={"GREETING": "hi"})
        report["env"] = with_env.output
        started = time.monotonic()
        slow = await shell.exec(["sleep", "30"], timeout=1)
        report["timeout"] = [slow.exit_code, time.monotonic() - started]
        await shell.put_file(PurePosixPath("sub/put.txt"), b"put content")
        report["put"] = (await shell.exec(["cat", "sub/put.txt"])).output
        await shell.remove_file(PurePosixPath("sub/put.txt"))
        await shell.remove_file(PurePosixPath("sub/put.txt"))  # already gone: no error
        report["removed"] = (await shell.exec(["ls", "sub"])).output
        try:
            await shell.put_file(PurePosixPath("/etc/evil"), b"")
            report["absolute"] = "accepted"
        except ValueError as exc:
            report["absolute"] = f"refused: {exc}"
        # AG2's own CodeAdapter over the sandbox: file-mode languages via put_file + exec.
        adapter = CodeAdapter(shell, languages=("python", "bash"))
        ran = await adapter.run("print(6 * 7)", "python")
        report["code_adapter"] = [ran.output, ran.exit_code]
        report["workdir"] = [str(shell.workdir), str(shell.host_workdir)]
        report["notebook"] = str((await code.session()).notebook_path)
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
