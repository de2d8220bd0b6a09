"""A sandbox whose kernel runs in the hardened Docker container, through the real SDK.

Its commands run in the same container, beside the kernel, and stream as they
print: the tests below hold a command on a gate file that only an output
callback creates, so a server that sent output only at the end would never
let it finish (the SDK's timeout would fail the test instead).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2b import CommandExitException, SandboxException, TimeoutException
from e2b.sandbox.commands.command_handle import PtySize
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import API_KEY, Running, run_server

from jupyter_exec.e2b import E2BConfig
from tests.conftest import docker_engine

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def docker_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    docker_engine().close()
    root = tmp_path_factory.mktemp("e2b-docker")
    config = E2BConfig(root_dir=root, ports=(0,), debug=True, api_key=API_KEY,
                       session_options={"backend": "docker"})  # fmt: skip
    yield from run_server(config)


@pytest.fixture
def sandbox(docker_server: Running, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", docker_server.url)
    return Sandbox.create()


def gate(docker_server: Running, name: str) -> Path:
    """A file in the sandbox's work dir (the container sees it at once: a bind mount)."""
    path = Path(docker_server.root, "debug_sandbox_id", name)
    path.unlink(missing_ok=True)
    return path


def wait_on(name: str) -> str:
    return f"while [ ! -e {name} ]; do sleep 0.05; done"


def test_run_code_in_the_container(docker_server: Running, sandbox: Sandbox) -> None:
    sandbox.files.write("input.txt", "from the host")
    execution = sandbox.run_code("open('input.txt').read()")
    assert execution.text == "from the host"
    user = sandbox.run_code("import os; os.getuid()")
    assert user.text != "0"  # not root inside the container
    sandbox.run_code("open('output.txt', 'w').write('from the kernel')")
    assert sandbox.files.read("output.txt") == "from the kernel"
    sandbox.files.make_dir("sub")
    result = sandbox.commands.run("id -u; pwd; echo $GREETING", cwd="/home/user/sub",
                                  envs={"GREETING": "hi there"})  # fmt: skip
    uid, cwd, greeting = result.stdout.splitlines()
    assert uid != "0"
    assert cwd == "/home/user/sub"  # the work dir is where E2B's is
    assert sandbox.run_code("import os; os.getcwd()").text == "/home/user"
    assert "".join(sandbox.run_code("!pwd").logs.stdout).strip() == "/home/user"
    plotted = sandbox.run_code(  # the in-kernel formats are mounted into the container
        "import matplotlib.pyplot as plt\nplt.pie([1, 3], labels=['a', 'b']); plt.show()"
    )
    chart = plotted.results[0].chart
    assert chart is not None
    assert [(p.label, p.angle) for p in chart.elements] == [("a", 90), ("b", 270)]
    assert greeting == "hi there"
    with pytest.raises(CommandExitException) as failed:
        sandbox.commands.run("echo partial; exit 3")
    assert failed.value.exit_code == 3
    assert Path(docker_server.root, "debug_sandbox_id", "debug_sandbox_id.ipynb").exists()


def test_command_output_streams_while_it_runs(docker_server: Running, sandbox: Sandbox) -> None:
    opened = gate(docker_server, "gate-live")
    seen: list[tuple[str, str]] = []
    opened_at: list[int] = []

    def on_stdout(text: str) -> None:
        seen.append(("stdout", text))
        if not opened_at and "first\n" in "".join(t for k, t in seen if k == "stdout"):
            opened_at.append(len(seen))
            opened.touch()  # the command waits for this: its first line came before its end

    result = sandbox.commands.run(
        f"echo first; {wait_on(opened.name)}; echo second >&2; echo third",
        on_stdout=on_stdout,
        on_stderr=lambda text: seen.append(("stderr", text)),
        timeout=60,
    )
    assert opened_at  # the gate was opened from a callback...
    later = seen[opened_at[0] :]  # ...and everything after the gate came after it
    assert "".join(t for k, t in later if k == "stderr") == "second\n"
    assert "".join(t for k, t in later if k == "stdout") == "third\n"
    assert (result.stdout, result.stderr, result.exit_code) == ("first\nthird\n", "second\n", 0)


def test_background_commands_stdin_wait_connect_kill(
    docker_server: Running, sandbox: Sandbox
) -> None:
    commands = sandbox.commands
    opened = gate(docker_server, "gate-background")
    handle = commands.run(f"echo ready; {wait_on(opened.name)}; echo done", background=True)
    assert handle.pid in [p.pid for p in commands.list()]
    follower = commands.connect(handle.pid)

    printed: list[str] = []

    def on_stdout(text: str) -> None:
        printed.append(text)
        if "ready\n" in "".join(printed):
            opened.touch()

    assert handle.wait(on_stdout=on_stdout).stdout == "ready\ndone\n"
    assert "done\n" in follower.wait().stdout  # it joined late: it sees what came after
    reader = commands.run("read line; echo got $line", background=True, stdin=True)
    commands.send_stdin(reader.pid, "ping\n")
    assert reader.wait().stdout == "got ping\n"
    sleeper = commands.run("sleep 300", background=True)
    assert sleeper.kill()
    with pytest.raises(CommandExitException) as killed:
        sleeper.wait()
    assert killed.value.exit_code == -1  # ended by a signal, as envd says it
    assert sleeper.pid not in [p.pid for p in commands.list()]


def test_command_timeout_kills_it_in_the_container(sandbox: Sandbox) -> None:
    commands = sandbox.commands
    with pytest.raises(TimeoutException):
        commands.run("sleep 301 & sleep 302; wait", timeout=3)
    look = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"
    deadline = time.monotonic() + 30
    while "sleep 30" in commands.run(look).stdout and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "sleep 30" not in commands.run(look).stdout  # both, children too, are gone


@pytest.mark.languages
def test_r_bash_and_deno_run_in_containers_sharing_the_sandboxs_home(sandbox: Sandbox) -> None:
    # The languages image (jupyter-exec/kernel:languages): one container per kernel, one /home/user.
    sandbox.run_code("x <- 21", language="r")
    said = sandbox.run_code("cat(x * 2, getwd()); writeLines('from R', 'r.txt')", language="r")
    assert "".join(said.logs.stdout) == "42 /home/user"
    shell = sandbox.run_code("cat r.txt; pwd", language="bash", envs={"WHO": "me"})
    assert "".join(shell.logs.stdout) == "from R\n/home/user\n"
    sandbox.run_code("Deno.writeTextFileSync('js.txt', Deno.cwd())", language="js")
    assert sandbox.files.read("js.txt") == "/home/user"
    languages = {c.language for c in sandbox.list_code_contexts()}
    assert {"python", "r", "bash", "javascript"} <= languages


def test_metrics_are_the_containers(docker_server: Running, sandbox: Sandbox) -> None:
    def sample() -> dict[str, int]:
        answer = httpx.get(f"{docker_server.url}/sandboxes/debug_sandbox_id/metrics",
                           headers={"X-API-KEY": API_KEY}, timeout=120)  # fmt: skip
        assert answer.status_code == 200, answer.text
        return answer.json()[-1]  # type: ignore[no-any-return]

    before = sample()
    sandbox.run_code("held = bytearray(200 << 20); held[::4096] = b'x' * len(held[::4096])")
    after = sample()
    assert after["memUsed"] >= before["memUsed"] + (150 << 20)
    assert after["memTotal"] >= after["memUsed"]
    assert 0 <= after["cpuUsedPct"] <= 100
    sandbox.run_code("del held")


def test_a_watch_sees_what_the_containers_commands_write(sandbox: Sandbox) -> None:
    sandbox.commands.run("mkdir -p docker-watched")  # the container's own folder
    handle = sandbox.files.watch_dir("docker-watched")
    sandbox.commands.run("echo hi > docker-watched/from-container.txt")
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while "from-container.txt" not in seen:
        assert time.monotonic() < deadline, seen
        seen += [e.name for e in handle.get_new_events()]
        time.sleep(0.05)
    handle.stop()


def test_a_terminal_is_refused_saying_why(sandbox: Sandbox) -> None:
    with pytest.raises(SandboxException, match="not served"):
        sandbox.pty.create(PtySize(cols=80, rows=24))
    assert sandbox.run_code("1 + 1").text == "2"  # the sandbox runs on
