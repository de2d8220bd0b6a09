"""``jupyter-exec run --restore``: a run that starts from a checkpoint, in real processes.

One ``run`` leaves checkpoints behind (automatic ones, with ``--checkpoint-every``);
the next starts from one, by name or by folder. A damaged checkpoint, or one from
another environment, stops the run before any of its file runs, with one line and
exit status 2; ``--force-restore`` loads the foreign one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec import Session
from jupyter_exec.boundary.naming import checkpoints_folder
from jupyter_exec.cli.exits import EXIT_OK, EXIT_USAGE
from tests.checkpoint_helpers import key_env
from tests.checkpoint_helpers import resign as signed_resign
from tests.cli_helpers import run_cli
from tests.conftest import read_valid_notebook

pytestmark = pytest.mark.timeout(300)

SIDE_EFFECT = "open('ran.txt', 'w').write('the file ran')\n"


def cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``jupyter-exec ARGV`` as a real process, in ``cwd``."""
    return run_cli(*argv, cwd=cwd)


def resign(folder: Path, **environment: Any) -> None:
    """Say in a checkpoint's manifest that it was taken elsewhere, signed again as this host
    would (so only the environment is wrong, not the checksum or the MAC)."""
    signed_resign(folder, lambda body: body["environment"].update(environment))


def state_entries(notebook: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = read_valid_notebook(notebook).metadata["jupyter_exec"]["state"]
    return entries


def test_a_run_starts_from_the_checkpoint_an_earlier_run_left(tmp_path: Path) -> None:
    """The first run checkpoints automatically (every cell, with --checkpoint-every tiny);
    the second, another file and so another session, restores it by name, then runs."""
    (tmp_path / "load.py").write_text(
        "rows = list(range(10))\n# %%\ntotal = sum(rows)\ngen = (r for r in rows)\n"
    )
    (tmp_path / "report.py").write_text("print('total', total, 'rows', len(rows))\n" + SIDE_EFFECT)
    first = cli("run", "load.py", "--work-dir", "out", "--checkpoint-every", "0.001", cwd=tmp_path)
    assert first.returncode == EXIT_OK, first.stderr
    autos = sorted((tmp_path / "out" / checkpoints_folder("load")).glob("auto-*"))
    assert len(autos) == 1, autos  # only the latest automatic checkpoint is kept
    name = autos[0].name

    second = cli("run", "report.py", "--work-dir", "out", "--restore", name, cwd=tmp_path)
    assert second.returncode == EXIT_OK, second.stderr
    assert "total 45 rows 10" in second.stdout
    assert f"restored checkpoint {name!r}" in second.stderr
    assert "not stored then: gen" in second.stderr
    restores = state_entries(tmp_path / "out" / "report.ipynb")
    assert [(e["action"], e["name"], e["session"]) for e in restores] == [("restore", name, "load")]
    assert {"rows", "total"} <= set(restores[0]["names"])
    assert "gen" in restores[0]["skipped"]

    folder = f"out/{checkpoints_folder('load')}/{name}"
    by_folder = cli("run", "report.py", "--name", "again", "--restore", folder, cwd=tmp_path)
    assert by_folder.returncode == EXIT_OK, by_folder.stderr
    assert "total 45 rows 10" in by_folder.stdout


def test_a_damaged_checkpoint_stops_the_run_before_its_file_runs(tmp_path: Path) -> None:
    work = tmp_path / "out"
    with Session(work_dir=work, name="base", checkpoint_every=0, timeout=60) as session:
        session.execute("rows = list(range(1000))").raise_for_error()
        made = session.checkpoint("loaded")
    assert made.path is not None
    data = next(made.path.glob("*.pkl"))
    data.write_bytes(data.read_bytes()[:-1])  # truncated
    (tmp_path / "job.py").write_text(SIDE_EFFECT)

    refused = cli("run", "job.py", "--work-dir", "out", "--restore", "loaded", cwd=tmp_path)
    assert refused.returncode == EXIT_USAGE
    assert not (work / "ran.txt").exists()  # none of the file ran
    assert read_valid_notebook(work / "job.ipynb").cells == []  # valid, and no cell ran
    error_lines = [line for line in refused.stderr.splitlines() if "error" in line]
    assert len(error_lines) == 1, refused.stderr
    assert error_lines[0].startswith("jupyter-exec: error: ")
    assert "Traceback" not in refused.stderr

    missing = cli("run", "job.py", "--work-dir", "out", "--restore", "nothing", cwd=tmp_path)
    assert missing.returncode == EXIT_USAGE
    assert "no checkpoint of that name" in missing.stderr
    alone = cli("run", "job.py", "--force-restore", cwd=tmp_path)
    assert alone.returncode == EXIT_USAGE
    assert "--force-restore goes with --restore" in alone.stderr
    assert not (work / "ran.txt").exists()


def test_a_foreign_checkpoint_is_refused_then_loaded_with_force(tmp_path: Path) -> None:
    with Session(work_dir=tmp_path / "there", name="away", checkpoint_every=0) as session:
        session.execute("rows = [1, 2, 3]").raise_for_error()
        made = session.checkpoint("loaded")
    assert made.path is not None
    copied = tmp_path / "copied" / "loaded"
    shutil.copytree(made.path, copied)
    resign(copied, python="3.9.18")
    (tmp_path / "job.py").write_text("print('rows', rows)\n" + SIDE_EFFECT)
    work = ["--work-dir", "here"]

    refused = cli("run", "job.py", *work, "--restore", "copied/loaded", cwd=tmp_path)
    assert refused.returncode == EXIT_USAGE
    assert "Python 3.9.18 in the checkpoint" in refused.stderr
    assert "force" in refused.stderr  # the message says how to load it anyway
    assert not (tmp_path / "here" / "ran.txt").exists()

    forced = cli(
        "run", "job.py", *work, "--restore", "copied/loaded", "--force-restore", cwd=tmp_path
    )
    assert forced.returncode == EXIT_OK, forced.stderr
    assert "rows [1, 2, 3]" in forced.stdout
    assert (tmp_path / "here" / "ran.txt").read_text() == "the file ran"


def test_checkpoints_are_a_hidden_folder_no_cell_reports(tmp_path: Path) -> None:
    """The checkpoints folder is the session's machinery: hidden from listings, and never
    among the files a cell made."""
    with Session(work_dir=tmp_path, name="main", checkpoint_every=0.001) as session:
        first = session.execute("rows = list(range(5))")
        made = session.checkpoint("mine")
        second = session.execute("more = 1")
    assert made.path == tmp_path / ".main_checkpoints" / "mine"
    assert not first.files
    assert not second.files
    visible = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    assert visible == ["main.ipynb"]


def test_help_teaches_restore_and_the_state_flags(tmp_path: Path) -> None:
    shown = cli("run", "--help", cwd=tmp_path)
    assert shown.returncode == 0
    for text in ("--restore CHECKPOINT", "--force-restore", "--checkpoint-every S",
                 "--undo-steps N", "0: off; default 60", "--restore loaded"):  # fmt: skip
        assert text in shown.stdout, text
    for command in ("mcp", "e2b"):
        helped = cli(command, "--help", cwd=tmp_path).stdout
        assert "--checkpoint-every S" in helped, command
        assert "--undo-steps N" in helped, command
    bad = cli("run", "x.py", "--checkpoint-every", "-1", cwd=tmp_path)
    assert bad.returncode == EXIT_USAGE


async def test_mcp_sessions_take_the_flag_and_list_files_leaves_checkpoints_out(
    tmp_path: Path,
) -> None:
    """``jupyter-exec mcp --checkpoint-every``: every session checkpoints at that pace, and
    the model's listing of the work dir shows its files, not the checkpoints folder."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "jupyter_exec",
            "mcp",
            "--work-dir",
            str(tmp_path),
            "--timeout",
            "60",
            "--checkpoint-every",
            "0.001",
        ],
        env=key_env(),  # the SDK passes a bare environment: the test run's key, not the user's
    )
    async with stdio_client(params) as streams, ClientSession(*streams) as client:
        await client.initialize()
        ran = await client.call_tool(
            "execute_code", {"code": "rows = [1, 2]\n" + SIDE_EFFECT, "session": "m"}
        )
        assert not getattr(ran, "is_error", getattr(ran, "isError", False)), ran
        listed = await client.call_tool("list_checkpoints", {"session": "m"})
        assert "auto-1" in "\n".join(c.text for c in listed.content if c.type == "text")
        files = await client.call_tool("list_files", {"session": "m"})
        shown = "\n".join(c.text for c in files.content if c.type == "text")
    assert "ran.txt" in shown
    assert "m.ipynb" in shown
    assert "checkpoints" not in shown
    assert (tmp_path / "m" / checkpoints_folder("m") / "auto-1" / "manifest.json").is_file()


def test_a_name_is_looked_up_in_the_work_dir_own_session_first(tmp_path: Path) -> None:
    """Only folders are found here (whether one is whole is the restore's to check)."""
    from jupyter_exec.cli.restore import find_checkpoint
    from jupyter_exec.exceptions import InvalidArgument

    for session in ("job", "one", "two"):
        (tmp_path / checkpoints_folder(session) / "shared").mkdir(parents=True)
    (tmp_path / checkpoints_folder("one") / "only-one").mkdir()
    own = find_checkpoint("shared", tmp_path, "job")
    assert own == tmp_path / ".job_checkpoints" / "shared"
    assert (
        find_checkpoint("only-one", tmp_path, "job") == tmp_path / ".one_checkpoints" / "only-one"
    )
    with pytest.raises(InvalidArgument, match="give one of these folders"):
        find_checkpoint("shared", tmp_path, "other")
    with pytest.raises(InvalidArgument, match="no checkpoint of that name"):
        find_checkpoint("absent", tmp_path, "job")
    with pytest.raises(InvalidArgument, match="no such checkpoint folder"):
        find_checkpoint(str(tmp_path / "nowhere" / "x"), tmp_path, "job")
    assert find_checkpoint(str(own), None, "job") == own


def test_e2b_sandboxes_take_the_flag_and_list_the_hidden_folder_as_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``jupyter-exec e2b --checkpoint-every``: a sandbox's kernel checkpoints at that pace;
    ``files.list`` shows the folder with its dot, as an E2B sandbox lists ``.bashrc``."""
    import os
    import re
    import signal
    import time

    from e2b_code_interpreter import Sandbox

    root = tmp_path / "sandboxes"
    command = [sys.executable, "-m", "jupyter_exec", "e2b", "--port", "0", "--envd-port", "0",
               "--root-dir", str(root), "--checkpoint-every", "0.001"]  # fmt: skip
    env = {**os.environ, "E2B_DEBUG": "true"}
    with subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) as server:
        try:
            assert server.stderr is not None
            port, deadline = None, time.monotonic() + 120
            while port is None and time.monotonic() < deadline:
                line = server.stderr.readline()
                if not line:
                    break
                found = re.search(r"ports \[(\d+)\]", line)
                port = int(found.group(1)) if found else None
            assert port is not None
            monkeypatch.setenv("E2B_DEBUG", "true")
            monkeypatch.setenv("E2B_SANDBOX_URL", f"http://127.0.0.1:{port}")
            sandbox = Sandbox.create()
            assert sandbox.run_code("rows = [1, 2]\nlen(rows)").text == "2"
            listed = {e.name for e in sandbox.files.list("/home/user")}
        finally:
            server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 128 + signal.SIGTERM
    hidden = checkpoints_folder("debug_sandbox_id")
    assert hidden in listed
    assert hidden.startswith(".")
    assert (root / "debug_sandbox_id" / hidden / "auto-1" / "manifest.json").is_file()
