"""Files and commands (envd) through the real SDK: confined to the sandbox's work dir."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from e2b import (
    CommandExitException,
    FileNotFoundException,
    InvalidArgumentException,
    SandboxException,
    TimeoutException,
)
from e2b.sandbox.filesystem.filesystem import FileType
from e2b_code_interpreter import AsyncSandbox, Sandbox
from e2b_server_helpers import Running


def test_write_read_list_exists_remove(debug_env: Running) -> None:
    files = Sandbox.create().files
    info = files.write("data/notes.txt", "hello\n")
    assert (info.path, info.name, info.type) == (
        "/home/user/data/notes.txt",
        "notes.txt",
        FileType.FILE,
    )
    assert files.read("/home/user/data/notes.txt") == "hello\n"
    assert bytes(files.read("data/notes.txt", format="bytes")) == b"hello\n"
    entries = files.list("/home/user/data")
    assert [(e.name, e.type, e.size) for e in entries] == [("notes.txt", FileType.FILE, 6)]
    assert files.exists("data/notes.txt")
    assert not files.exists("data/missing.txt")
    assert files.make_dir("data/sub/deeper")
    assert not files.make_dir("data/sub")  # already there
    names = {e.path for e in files.list("data", depth=3)}
    assert names == {
        "/home/user/data/notes.txt",
        "/home/user/data/sub",
        "/home/user/data/sub/deeper",
    }
    files.remove("data")
    assert not files.exists("data")
    with pytest.raises(FileNotFoundException):
        files.read("data/notes.txt")


def test_files_are_the_kernels_files(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    sandbox.files.write("shared.csv", "a,b\n1,2\n")
    assert sandbox.run_code("open('shared.csv').read()").text == "a,b\\n1,2\\n"
    sandbox.run_code("open('from_code.txt', 'w').write('written by code')")
    assert sandbox.files.read("from_code.txt") == "written by code"
    sandbox.files.rename("from_code.txt", "moved/here.txt")
    assert sandbox.files.read("/home/user/moved/here.txt") == "written by code"


def test_write_many_and_binary(debug_env: Running) -> None:
    files = Sandbox.create().files
    payload = bytes(range(256)) * 64
    infos = files.write_files(
        [{"path": "bin/a.bin", "data": payload}, {"path": "bin/b.txt", "data": "b"}]
    )
    assert sorted(i.path for i in infos) == ["/home/user/bin/a.bin", "/home/user/bin/b.txt"]
    assert bytes(files.read("bin/a.bin", format="bytes")) == payload


def test_upload_and_download_urls(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    upload = sandbox.upload_url("urls/up.txt")
    response = httpx.post(upload, files={"file": ("up.txt", b"uploaded")})
    assert response.status_code == 200, response.text
    assert sandbox.files.read("urls/up.txt") == "uploaded"
    download = sandbox.download_url("urls/up.txt")
    assert httpx.get(download).content == b"uploaded"


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../outside.txt", "/home/user/../../etc/passwd", "/home/userx/a"]
)
def test_paths_outside_the_work_dir_are_refused(debug_env: Running, path: str) -> None:
    files = Sandbox.create().files
    with pytest.raises((InvalidArgumentException, SandboxException)):
        files.read(path)
    with pytest.raises((InvalidArgumentException, SandboxException)):
        files.write(path, "x")
    with pytest.raises((InvalidArgumentException, SandboxException)):
        files.list(path)


def test_links_planted_by_code_are_not_followed(
    debug_env: Running, tmp_path_factory: pytest.TempPathFactory
) -> None:
    secret_dir = tmp_path_factory.mktemp("outside")
    secret = secret_dir / "secret.txt"
    secret.write_text("host secret")
    sandbox = Sandbox.create()
    sandbox.run_code(
        f"import os; os.symlink({str(secret)!r}, 'link.txt'); "
        f"os.symlink({str(secret_dir)!r}, 'linkdir')"
    )
    with pytest.raises(SandboxException):
        sandbox.files.read("link.txt")
    with pytest.raises(SandboxException):
        sandbox.files.write("link.txt", "overwritten")
    with pytest.raises(SandboxException):
        sandbox.files.write("linkdir/new.txt", "planted")
    with pytest.raises(SandboxException):
        sandbox.files.list("linkdir")
    info = sandbox.files.get_info("link.txt")
    assert info.type == FileType.SYMLINK
    assert info.symlink_target == str(secret)
    sandbox.files.remove("linkdir")  # the link goes, never what it points at
    assert secret.read_text() == "host secret"
    assert not (secret_dir / "new.txt").exists()
    assert sorted(p.name for p in secret_dir.iterdir()) == ["secret.txt"]


def test_commands_exit_code_and_streams(debug_env: Running) -> None:
    commands = Sandbox.create().commands
    result = commands.run("echo out; echo err >&2")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "out\n", "err\n")
    with pytest.raises(CommandExitException) as failed:
        commands.run("echo partial; exit 3")
    assert failed.value.exit_code == 3
    assert failed.value.stdout == "partial\n"


def test_commands_cwd_envs_and_callbacks(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    sandbox.files.make_dir("cmdcwd")
    seen: list[str] = []
    result = sandbox.commands.run(
        "pwd; echo $GREETING",
        cwd="/home/user/cmdcwd",
        envs={"GREETING": "hi"},
        on_stdout=seen.append,
    )
    lines = result.stdout.splitlines()
    assert lines[0].endswith("/cmdcwd")
    assert lines[1] == "hi"
    assert "".join(seen) == result.stdout


def test_background_commands_wait_list_kill(debug_env: Running) -> None:
    commands = Sandbox.create().commands
    handle = commands.run("read line; echo got $line", background=True, stdin=True)
    assert handle.pid in [p.pid for p in commands.list()]
    commands.send_stdin(handle.pid, "ping\n")
    assert handle.wait().stdout == "got ping\n"
    sleeper = commands.run("sleep 300", background=True)
    assert sleeper.kill()
    with pytest.raises(CommandExitException):
        sleeper.wait()
    assert sleeper.pid not in [p.pid for p in commands.list()]
    assert not commands.kill(sleeper.pid)  # gone: not found


def test_command_timeout_kills_it(debug_env: Running) -> None:
    commands = Sandbox.create().commands
    with pytest.raises(TimeoutException):
        commands.run("sleep 300", timeout=2)
    deadline = time.monotonic() + 30
    while any("sleep 300" in p.args for p in commands.list()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any("sleep 300" in p.args for p in commands.list())


def test_connect_to_a_running_command(
    debug_env: Running, tmp_path_factory: pytest.TempPathFactory
) -> None:
    gate = tmp_path_factory.mktemp("gate") / "go"
    commands = Sandbox.create().commands
    handle = commands.run(
        f"while [ ! -e {gate} ]; do sleep 0.01; done; echo after-connect", background=True
    )
    follower = commands.connect(handle.pid)
    gate.touch()
    assert follower.wait().stdout == "after-connect\n"
    assert handle.wait().stdout == "after-connect\n"


async def test_async_sdk_files_and_commands(debug_env: Running) -> None:
    sandbox = await AsyncSandbox.create()
    await sandbox.files.write("async/a.txt", "async text")
    assert await sandbox.files.read("async/a.txt") == "async text"
    assert [e.name for e in await sandbox.files.list("async")] == ["a.txt"]
    result = await sandbox.commands.run("cat async/a.txt; echo done >&2")
    assert (result.stdout, result.stderr, result.exit_code) == ("async text", "done\n", 0)


def test_a_local_sandboxs_shell_reads_no_profile_of_the_host_user(
    debug_env: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host user's login profile (pyenv's, conda's...) never runs in a sandbox's shell:
    the SDK's ``bash -l`` would run it, and a command killed while it runs leaves its locks."""
    home = tmp_path / "host-home"
    home.mkdir()
    ran = tmp_path / "profile-ran"
    (home / ".profile").write_text(f"touch {ran}\n")
    (home / ".bashrc").write_text(f"touch {ran}\n")
    monkeypatch.setenv("HOME", str(home))
    sandbox = Sandbox.create()
    result = sandbox.commands.run("echo $HOME")
    assert result.stdout.strip() == str(debug_env.root / sandbox.sandbox_id)
    assert not ran.exists()
