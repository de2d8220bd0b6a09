"""The ``jupyter-exec`` command line: every subcommand, its exit statuses, its stops, its inputs.

Commands that start kernels run as real subprocesses (``python -m jupyter_exec``)
where the process matters: exit statuses, signals, what is left behind.
Everything else goes through :func:`jupyter_exec.cli.main` in-process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest

from jupyter_exec.cli import build_parser, main
from jupyter_exec.cli.exits import (
    EXIT_FAILED,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_TROUBLE,
    EXIT_USAGE,
    exit_status,
)
from jupyter_exec.exceptions import (
    CheckpointError,
    DockerUnavailable,
    ExecutionTimeout,
    InvalidArgument,
    KernelStartError,
    NotebookError,
)
from tests.cli_helpers import run_cli
from tests.conftest import read_valid_notebook
from tests.ports import free_port

pytestmark = pytest.mark.timeout(240)

COMMANDS = ["run", "demo", "replay", "mcp", "e2b", "image", "kernels", "reap", "gateway"]
DEADLINE = 60.0


def cli(*argv: str, cwd: Path | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``jupyter-exec ARGV`` as a real process."""
    return run_cli(*argv, cwd=cwd, **kwargs)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# -- the parser ---------------------------------------------------------------------------


def test_build_parser_has_every_command_and_help_that_teaches() -> None:
    parser = build_parser()
    text = parser.format_help()
    for name in COMMANDS:
        assert name in text
    assert "examples:" in text
    assert "exit status:" in text


@pytest.mark.parametrize(
    "command",
    [
        ["run"],
        ["demo"],
        ["replay"],
        ["mcp"],
        ["e2b"],
        ["image", "build"],
        ["kernels", "install"],
        ["reap"],
        ["gateway"],
    ],
)
def test_each_command_help_has_examples(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([*command, "--help"])
    assert stopped.value.code == 0
    assert "examples:" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["run", "demo", "replay", "mcp"])
def test_timeout_and_environment_are_the_same_everywhere(command: str) -> None:
    """--timeout and --env are declared once: every kernel-starting command has both."""
    sub = build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    options = {s for action in sub._actions for s in action.option_strings}
    assert {"--timeout", "--env", "--python", "--backend", "--package"} <= options
    positional = {"run": ["x.py"], "replay": ["x.ipynb"]}.get(command, [])
    assert sub.parse_args([*positional, "--timeout", "0"]).timeout == 0
    with pytest.raises(SystemExit):
        sub.parse_args([*positional, "--timeout", "-1"])


def test_every_session_option_a_command_line_can_say_is_a_run_flag() -> None:
    """run's flags come from SessionOptions: an option added there is a flag at once."""
    from jupyter_exec.cli.options import flag_for
    from jupyter_exec.options import option_fields

    sub = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    options = {s for action in sub._actions for s in action.option_strings}
    said = {flag_for(f.name) for f in option_fields() if f.cli}
    assert "--remote-host" in said  # (--host is a server's own listening address)
    assert said - {"--overwrite"} <= options
    parsed = sub.parse_args(["x.py", "--checkpoint-every", "0", "--undo-steps", "3"])
    assert (parsed.checkpoint_every, parsed.undo_steps) == (0, 3)


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_USAGE
    assert "COMMAND" in capsys.readouterr().err


def test_errors_map_to_documented_statuses() -> None:
    assert exit_status(ExecutionTimeout("late")) == EXIT_TIMEOUT == 124
    assert exit_status(InvalidArgument("bad")) == EXIT_USAGE
    assert exit_status(NotebookError("bad")) == EXIT_USAGE
    assert exit_status(KernelStartError("no ipykernel")) == EXIT_TROUBLE
    assert exit_status(DockerUnavailable("no engine")) == EXIT_TROUBLE
    assert exit_status(CheckpointError("damaged", ("numpy 1 in the checkpoint",))) == EXIT_USAGE
    assert exit_status(RuntimeError("a bug")) == EXIT_INTERNAL


def test_library_modules_import_no_argparse() -> None:
    """Only the command-line package parses arguments; the library takes values.

    The Docker watchdog and the cluster launcher are exempt: helper processes jupyter-exec
    starts itself (the launcher on another host, with that host's Python), whose argv only
    jupyter-exec writes; neither is a command a person runs.
    """
    import ast

    internal_programs = {"docker/watchdog.py", "cluster/launcher.py"}

    import jupyter_exec

    root = Path(jupyter_exec.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if relative.parts[0] == "cli" or relative.as_posix() in internal_programs:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if "argparse" in names:
                offenders.append(str(path.relative_to(root)))
    assert offenders == []


# -- run, demo, replay ------------------------------------------------------------------


def test_run_a_script_records_every_cell(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("# %%\nx = 40\nprint('first')\n# %%\nprint(x + 2)\n")
    done = cli("run", str(script), "--work-dir", str(tmp_path / "w"))
    assert done.returncode == EXIT_OK, done.stderr
    assert "first" in done.stdout
    assert "42" in done.stdout
    nb = read_valid_notebook(tmp_path / "w" / "job.ipynb")
    assert [c.source for c in nb.cells] == ["x = 40\nprint('first')\n", "print(x + 2)\n"]


def test_run_statuses_failure_and_timeout(tmp_path: Path) -> None:
    failing = tmp_path / "fail.py"
    failing.write_text("1/0\n")
    done = cli("run", str(failing), "--work-dir", str(tmp_path / "a"))
    assert done.returncode == EXIT_FAILED
    assert "ZeroDivisionError" in done.stderr
    slow = tmp_path / "slow.py"
    slow.write_text("import time\ntime.sleep(60)\n")
    done = cli("run", str(slow), "--timeout", "1", "--work-dir", str(tmp_path / "b"))
    assert done.returncode == EXIT_TIMEOUT, done.stderr


def test_run_markdown_and_keep_going(tmp_path: Path) -> None:
    steps = tmp_path / "steps.md"
    steps.write_text(
        "1. First:\n\n   ```python\n   1/0\n   ```\n\n2. Then:\n\n```bash\necho shell-ran\n```\n"
    )
    done = cli("run", str(steps), "-k", "--work-dir", str(tmp_path / "w"))
    assert done.returncode == EXIT_FAILED
    assert "shell-ran" in done.stdout  # the indented block ran, and -k went on after it


def test_demo_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--work-dir", str(tmp_path), "-q"]) == EXIT_OK
    assert (tmp_path / "fit.png").is_file()
    assert len(read_valid_notebook(tmp_path / "demo.ipynb").cells) == 5


def test_replay_takes_the_environment_flags(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(6 * 7)", execution_count=1)]
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="41\n")]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    done = cli("replay", str(path), "--env", "local", "-q")
    assert done.returncode == EXIT_FAILED  # the record says 41, the replay prints 42
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    nbformat.write(nb, path)
    done = cli("replay", str(path), "--python", sys.executable, "-q")
    assert done.returncode == EXIT_OK, done.stdout + done.stderr


def test_kernels_install_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernels", "install", "--prefix", str(tmp_path)]) == EXIT_OK
    assert (tmp_path / "share/jupyter/kernels/python3-docker/kernel.json").is_file()
    assert main(["kernels", "list"]) == EXIT_OK
    assert "Python 3 (Docker)" in capsys.readouterr().out


def test_image_needs_an_action() -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["image"])
    assert stopped.value.code == EXIT_USAGE


@pytest.fixture
def docker_client() -> Iterator[Any]:
    """A client of the Docker engine (the test is skipped without one, failed in CI)."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no Docker engine: {exc}")
    try:
        yield client
    finally:
        client.close()


@pytest.mark.docker
@pytest.mark.usefixtures("docker_client")
def test_reap_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reap", "--dry-run"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "would remove" in out or "no orphaned kernel containers" in out


def test_docker_module_runs_the_docker_commands_only(capsys: pytest.CaptureFixture[str]) -> None:
    from jupyter_exec.cli import docker_main

    assert docker_main(["kernels", "list"]) == EXIT_OK
    with pytest.raises(SystemExit):
        docker_main(["run", "x.py"])


# -- malformed input ----------------------------------------------------------------------


def _nested(depth: int) -> str:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []})[:-1] + (
        ', "x": ' + "[" * depth + "]" * depth + "}"
    )


def _notebook(source: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    return nbformat.writes(nb)


# (name, file name, content (bytes, str or None for nothing), extra args, status, message)
MALFORMED: list[tuple[str, str, bytes | str | None, list[str], int, str]] = [
    ("missing script", "gone.py", None, [], EXIT_USAGE, "no file at"),
    ("missing notebook", "gone.ipynb", None, [], EXIT_USAGE, "no notebook at"),
    (
        "latin-1 script",
        "l1.py",
        "print('caf\xe9')\n".encode("latin-1"),
        [],
        EXIT_USAGE,
        "byte 0xe9 at offset 10 (line 1, column 11)",
    ),
    (
        "latin-1 markdown",
        "l1.md",
        "```python\n'\xe9'\n```\n".encode("latin-1"),
        [],
        EXIT_USAGE,
        "byte 0xe9",
    ),
    ("utf-16 script", "u16.py", "print(1)\n".encode("utf-16-le"), [], EXIT_USAGE, "NUL byte"),
    ("null byte in code", "nul.py", b"print(1)\x00\n", [], EXIT_USAGE, "NUL byte at offset 8"),
    (
        "unknown coding",
        "enc.py",
        b"# -*- coding: klingon -*-\nprint(1)\n",
        [],
        EXIT_USAGE,
        "coding declaration",
    ),
    ("encoded surrogate", "sur.py", b"x = '\xed\xa0\x80'\n", [], EXIT_USAGE, "byte 0xed"),
    (
        "binary as script",
        "img.py",
        b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe",
        [],
        EXIT_USAGE,
        "NUL byte",
    ),
    ("empty script", "empty.py", "\n\n", [], EXIT_USAGE, "holds no code"),
    (
        "notebook not utf-8",
        "l1.ipynb",
        _notebook("'\xe9'").encode("latin-1"),
        [],
        EXIT_USAGE,
        "byte 0xe9",
    ),
    ("notebook not json", "bad.ipynb", "{not json", [], EXIT_USAGE, "not valid JSON"),
    ("notebook deeply nested", "deep.ipynb", _nested(100_000), [], EXIT_USAGE, "nests"),
    ("notebook nested a bit", "deep2.ipynb", _nested(200), [], EXIT_USAGE, "nests"),
    ("json list", "list.ipynb", "[1, 2]", [], EXIT_USAGE, "not a notebook"),
    ("nbformat 5", "v5.ipynb", '{"nbformat": 5, "cells": []}', [], EXIT_USAGE, "nbformat 5"),
    ("nbformat text", "vx.ipynb", '{"nbformat": "4", "cells": []}', [], EXIT_USAGE, "nbformat"),
    (
        "invalid notebook",
        "inv.ipynb",
        '{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": 7}',
        [],
        EXIT_USAGE,
        "not a valid notebook",
    ),
    (
        "lone surrogate in a cell",
        "lone.ipynb",
        _notebook("x = 1").replace("x = 1", "x = '\\ud800'"),
        [],
        EXIT_USAGE,
        "lone surrogate U+D800",
    ),
    ("folder as file", "folder.py", "DIR", [], EXIT_USAGE, "is a folder"),
    (
        "interpreter not executable",
        "ok.py",
        "print(1)\n",
        ["--python", "NOEXEC"],
        EXIT_USAGE,
        "not executable",
    ),
    (
        "interpreter missing",
        "ok.py",
        "print(1)\n",
        ["--python", "/nowhere/python"],
        EXIT_USAGE,
        "no Python interpreter",
    ),
    (
        "interpreter folder",
        "ok.py",
        "print(1)\n",
        ["--python", "DIRPY"],
        EXIT_USAGE,
        "not a virtual environment",
    ),
    (
        "unknown environment",
        "ok.py",
        "print(1)\n",
        ["--env", "nowhere"],
        EXIT_USAGE,
        "unknown environment",
    ),
    (
        "requirements missing",
        "ok.py",
        "print(1)\n",
        ["--env", "venv", "--requirements", "r.txt"],
        EXIT_USAGE,
        "no such file",
    ),
    (
        "env and python both",
        "ok.py",
        "print(1)\n",
        ["--env", "local", "--python", "python3"],
        EXIT_USAGE,
        "not both",
    ),
]
CLEAN_RUNS: list[tuple[str, str, bytes, int, str]] = [
    (
        "coding declaration honoured",
        "l1.py",
        b"# -*- coding: latin-1 -*-\nprint('caf\xe9'.upper())\n",
        EXIT_OK,
        "CAF\u00c9",
    ),
    ("utf-8 with BOM", "bom.py", b"\xef\xbb\xbfprint('bom ok')\n", EXIT_OK, "bom ok"),
]


@pytest.fixture
def place(tmp_path: Path) -> Callable[[str, bytes | str | None], Path]:
    def make(name: str, content: bytes | str | None) -> Path:
        path = tmp_path / name
        if content == "DIR":
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        elif content is not None:
            path.write_text(content, encoding="utf-8", errors="surrogatepass")
        return path

    return make


def _args(extra: list[str], tmp_path: Path) -> list[str]:
    noexec = tmp_path / "python-noexec"
    noexec.write_text("#!/bin/sh\n")
    noexec.chmod(0o644)
    (tmp_path / "notvenv").mkdir(exist_ok=True)
    table = {"NOEXEC": str(noexec), "DIRPY": str(tmp_path / "notvenv")}
    return [table.get(a, a) for a in extra]


@pytest.mark.parametrize(
    ("name", "file", "content", "extra", "status", "message"),
    MALFORMED,
    ids=[m[0] for m in MALFORMED],
)
def test_malformed_input_is_our_error_never_a_traceback(
    name: str,
    file: str,
    content: bytes | str | None,
    extra: list[str],
    status: int,
    message: str,
    place: Callable[[str, bytes | str | None], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = place(file, content)
    argv = ["run", str(path), *_args(extra, tmp_path), "--work-dir", str(tmp_path / "w")]
    assert main(argv) == status
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert "internal error" not in err
    if file.endswith(".ipynb"):  # replay reads notebooks the same way
        assert main(["replay", str(path), "-q"]) == status
        err = capsys.readouterr().err
        assert message in err
        assert "Traceback" not in err


@pytest.mark.parametrize(
    ("name", "file", "content", "status", "output"), CLEAN_RUNS, ids=[c[0] for c in CLEAN_RUNS]
)
def test_inputs_python_itself_accepts_run(
    name: str, file: str, content: bytes, status: int, output: str, tmp_path: Path
) -> None:
    path = tmp_path / file
    path.write_bytes(content)
    done = cli("run", str(path), "--work-dir", str(tmp_path / "w"))
    assert done.returncode == status, done.stderr
    assert output in done.stdout
    assert "Traceback (most recent call last)" not in done.stderr.split("\n", 1)[0]


# -- stopping: SIGTERM and SIGHUP as Ctrl-C ----------------------------------------------


def _start(*argv: str, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "jupyter_exec", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        **kwargs,
    )


def _stop(process: subprocess.Popen[str], signum: int) -> tuple[int, str]:
    """Send ``signum``, wait for the exit; the exit status and what it printed on stderr."""
    process.send_signal(signum)
    try:  # stdin stays open, as a client that sends a signal keeps its end of the pipe
        process.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        pytest.fail(f"still running {DEADLINE:g} s after signal {signum}:\n{err}")
    _, err = process.communicate()
    return process.returncode, err


def _kernels(process: subprocess.Popen[str]) -> list[psutil.Process]:
    """The kernel processes the command started (its ipykernel children)."""
    children = psutil.Process(process.pid).children(recursive=True)
    return [c for c in children if "ipykernel" in " ".join(c.cmdline())]


def _assert_gone(kernels: list[psutil.Process]) -> None:
    assert kernels, "the command started no kernel to check"
    _, alive = psutil.wait_procs(kernels, timeout=DEADLINE)
    assert not alive, f"kernels left running: {[k.pid for k in alive]}"


def _no_spare(folder: Path) -> None:
    assert not list(folder.rglob("*.jx-tmp")), "the notebook's spare file was left behind"


SLOW_SCRIPT = (
    "# %%\nprint('first cell')\n"
    "# %%\nimport pathlib, time\nprint('second cell', flush=True)\n"
    "pathlib.Path('started').touch()\ntime.sleep(300)\n"
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_run_stops_cleanly_on(signum: int, tmp_path: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text(SLOW_SCRIPT)
    work = tmp_path / "w"
    process = _start("run", str(script), "--work-dir", str(work), "--timeout", "0")
    wait_for(lambda: (work / "started").exists() or process.poll() is not None, "the cell")
    kernels = _kernels(process)
    status, err = _stop(process, signum)
    assert status == 128 + signum, err
    assert "Traceback" not in err
    _assert_gone(kernels)
    nb = read_valid_notebook(work / "slow.ipynb")
    assert len(nb.cells) == 2
    texts = ["".join(o.get("text", "")) for c in nb.cells for o in c.outputs]
    assert "first cell\n" in texts
    assert any("second cell" in t for t in texts)
    _no_spare(work)


def _rpc(process: subprocess.Popen[str], message: dict[str, Any]) -> dict[str, Any] | None:
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(json.dumps(message) + "\n")
    process.stdin.flush()
    if "id" not in message:
        return None
    while True:
        line = process.stdout.readline()
        assert line, "the server closed stdout"
        reply: dict[str, Any] = json.loads(line)
        if reply.get("id") == message["id"]:
            return reply


def _hello(number: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": number,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }


def _call(number: int, code: str, session: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": number,
        "method": "tools/call",
        "params": {"name": "execute_code", "arguments": {"code": code, "session": session}},
    }


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_mcp_stdio_stops_cleanly_on(signum: int, tmp_path: Path) -> None:
    process = _start("mcp", "--work-dir", str(tmp_path), stdin=subprocess.PIPE)
    try:
        _rpc(process, _hello(1))
        _rpc(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        reply = _rpc(process, _call(2, "print('from the agent')", "s"))
        assert reply is not None
        assert "from the agent" in json.dumps(reply["result"])
        kernels = _kernels(process)
        status, err = _stop(process, signum)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert status == 128 + signum, err
    _assert_gone(kernels)
    nb = read_valid_notebook(tmp_path / "s" / "s.ipynb")
    assert [c.source for c in nb.cells] == ["print('from the agent')"]
    _no_spare(tmp_path)


def _mcp_http_stop(
    signum: int,
    tmp_path: Path,
    *extra: str,
    before_stop: Callable[[subprocess.Popen[str]], None] | None = None,
) -> subprocess.Popen[str]:
    """An HTTP MCP server that ran one cell, stopped by ``signum``: checked, and returned."""
    httpx2 = pytest.importorskip("httpx2")
    port = free_port()
    token = "signal-test-token"
    process = _start(
        "mcp",
        "--transport",
        "http",
        "--port",
        str(port),
        "--work-dir",
        str(tmp_path),
        *extra,
        env={"JUPYTER_EXEC_MCP_TOKEN": token},
    )
    url = f"http://127.0.0.1:{port}/mcp"
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
    }

    def listening() -> bool:
        assert process.poll() is None, process.communicate()[1]
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, "the HTTP server", timeout=120)
        with httpx2.Client(timeout=120, headers=headers) as http:
            hello = http.post(url, json=_hello(1))
            assert hello.status_code == 200, hello.text
            session_id = hello.headers.get("mcp-session-id")
            more = {"mcp-session-id": session_id} if session_id else {}
            http.post(
                url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=more
            )
            called = http.post(url, json=_call(2, "print('over http')", "h"), headers=more)
            assert "over http" in called.text
        kernels = _kernels(process)
        if before_stop is not None:
            before_stop(process)
        status, err = _stop(process, signum)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert status == 128 + signum, err
    if not extra:
        _assert_gone(kernels)
    nb = read_valid_notebook(tmp_path / "h" / "h.ipynb")
    assert [c.source for c in nb.cells] == ["print('over http')"]
    _no_spare(tmp_path)
    return process


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_mcp_http_stops_cleanly_on(signum: int, tmp_path: Path) -> None:
    _mcp_http_stop(signum, tmp_path)


@pytest.mark.docker
def test_mcp_http_with_docker_kernels_stops_cleanly_on_sigterm(
    tmp_path: Path, docker_client: Any
) -> None:
    """The case that leaked: a Docker kernel outliving an HTTP MCP server stopped by SIGTERM."""
    client = docker_client
    from jupyter_exec.docker.reap import L_PID, LABEL

    def ours(process: subprocess.Popen[str]) -> list[Any]:
        wanted = {"label": [f"{LABEL}=1", f"{L_PID}={process.pid}"]}
        return list(client.containers.list(ignore_removed=True, all=True, filters=wanted))

    def running(process: subprocess.Popen[str]) -> None:
        every = [
            c.labels.get(L_PID)
            for c in client.containers.list(ignore_removed=True, filters={"label": f"{LABEL}=1"})
        ]
        assert ours(process), f"no kernel container carries pid {process.pid}: {every}"

    process = _mcp_http_stop(signal.SIGTERM, tmp_path, "--backend", "docker", before_stop=running)
    wait_for(lambda: not ours(process), "the kernel container to go")


@pytest.mark.docker
def test_run_in_docker_stops_cleanly_on_sigterm(tmp_path: Path, docker_client: Any) -> None:
    client = docker_client
    from jupyter_exec.docker.reap import L_PID, LABEL

    script = tmp_path / "slow.py"
    script.write_text(SLOW_SCRIPT)
    work = tmp_path / "w"
    work.mkdir()
    process = _start(
        "run", str(script), "--work-dir", str(work), "--backend", "docker", "--timeout", "0"
    )

    def ours() -> list[Any]:
        wanted = {"label": [f"{LABEL}=1", f"{L_PID}={process.pid}"]}
        return list(client.containers.list(ignore_removed=True, all=True, filters=wanted))

    try:
        wait_for(
            lambda: (work / "started").exists() or process.poll() is not None,
            "the cell",
            timeout=120,
        )
        if process.poll() is not None:  # ended before its cell started: say why
            out, early = process.communicate()
            pytest.fail(f"run ended early ({process.returncode}):\n{out}\n{early}")
        assert ours(), "no kernel container carries this process's label"
        status, err = _stop(process, signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert status == 128 + signal.SIGTERM, err
    wait_for(lambda: not ours(), "the kernel container to go")
    nb = read_valid_notebook(work / "slow.ipynb")
    assert len(nb.cells) == 2
    _no_spare(work)


def test_replay_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("print('first cell')"),
        nbformat.v4.new_code_cell(
            "import pathlib, time\npathlib.Path('started').touch()\ntime.sleep(300)"
        ),
    ]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    process = _start("replay", str(path), "--timeout", "0", "-q")
    started = tmp_path / "nb.replayed_work" / "started"  # its own folder, not the notebook's
    wait_for(lambda: started.exists() or process.poll() is not None, "the cell")
    kernels = _kernels(process)
    status, err = _stop(process, signal.SIGTERM)
    assert status == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    _assert_gone(kernels)
    replayed = read_valid_notebook(tmp_path / "nb.replayed.ipynb")
    assert "first cell" in json.dumps(replayed.cells[0].outputs)
    assert "KeyboardInterrupt" in json.dumps(replayed.cells[1].outputs)  # the stopped cell too
    _no_spare(tmp_path)


def test_mcp_stdio_records_the_cell_running_at_sigterm(tmp_path: Path) -> None:
    process = _start("mcp", "--work-dir", str(tmp_path), stdin=subprocess.PIPE)
    try:
        _rpc(process, _hello(1))
        _rpc(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        code = (
            "import pathlib, time\nprint('before the stop', flush=True)\n"
            "pathlib.Path('started').touch()\ntime.sleep(300)"
        )
        assert process.stdin is not None
        process.stdin.write(json.dumps(_call(2, code, "r")) + "\n")
        process.stdin.flush()
        wait_for(lambda: (tmp_path / "r" / "started").exists(), "the cell to start")
        kernels = _kernels(process)
        status, err = _stop(process, signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert status == 128 + signal.SIGTERM, err
    _assert_gone(kernels)
    nb = read_valid_notebook(tmp_path / "r" / "r.ipynb")
    assert [c.source for c in nb.cells] == [code]
    recorded = json.dumps(nb.cells[0].outputs)
    assert "before the stop" in recorded
    assert "KeyboardInterrupt" in recorded
    _no_spare(tmp_path)


def test_run_stopped_while_its_kernel_starts_leaves_no_kernel(tmp_path: Path) -> None:
    """SIGTERM during the kernel's start: the start is undone, nothing outlives the command."""
    marker = tmp_path / "launching"
    slow_python = tmp_path / "slow-python"
    slow_python.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *ipykernel_launcher*) touch {marker}; sleep 120;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    slow_python.chmod(0o755)
    script = tmp_path / "job.py"
    script.write_text("print('never')\n")
    process = _start(
        "run",
        str(script),
        "--python",
        str(slow_python),
        "--work-dir",
        str(tmp_path / "w"),
        "--startup-timeout",
        "200",
    )
    wait_for(lambda: marker.exists() or process.poll() is not None, "the kernel's launch")
    launched = psutil.Process(process.pid).children(recursive=True)
    assert launched, "no kernel process to watch"
    signalled = time.monotonic()
    status, err = _stop(process, signal.SIGTERM)
    assert time.monotonic() - signalled < 30, "the stop waited for the kernel's start"
    assert status == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    _, alive = psutil.wait_procs(launched, timeout=DEADLINE)
    assert not alive, f"left running: {[p.pid for p in alive]}"
