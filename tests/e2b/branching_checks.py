"""What fork, snapshots and the pause lifecycle must do, through the real SDK: checks shared
by the local (test_branching.py) and Docker (test_branching_docker.py) servers."""

from __future__ import annotations

from e2b import Sandbox as BaseSandbox
from e2b import SandboxState
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import Running


def forks_carry_files_and_state(running: Running) -> None:
    """Each fork: the parent's variables and files, its own id, token and work dir; the
    parent and the forks go on apart."""
    parent = Sandbox.create()
    made: list[Sandbox] = []
    try:
        parent.run_code("x = 41\ndata = list(range(1000))")
        parent.files.write("kept.txt", "from the parent")
        forks = Sandbox.fork(parent.sandbox_id, count=2)
        made = [f for f in forks if isinstance(f, Sandbox)]
        assert len(made) == 2, forks
        ids = {parent.sandbox_id, *(f.sandbox_id for f in made)}
        assert len(ids) == 3
        tokens = {running.server.sandboxes.get(i).token for i in ids}
        assert len(tokens) == 3
        assert None not in tokens
        for k, fork in enumerate(made):
            assert fork.run_code("x + 1").text == "42"
            assert fork.run_code("sum(data)").text == str(sum(range(1000)))
            assert fork.files.read("kept.txt") == "from the parent"
            fork.run_code(f"x = {k}")
            fork.files.write("kept.txt", f"fork {k}")
        assert parent.run_code("x").text == "41"  # the parent goes on, untouched
        assert parent.files.read("kept.txt") == "from the parent"
        assert [f.run_code("x").text for f in made] == ["0", "1"]
        assert [f.files.read("kept.txt") for f in made] == ["fork 0", "fork 1"]
    finally:
        for sandbox in (parent, *made):
            sandbox.kill()


def snapshots_start_sandboxes(running: Running) -> None:
    """A memory snapshot starts sandboxes with its state and files, a filesystem-only one
    with the files alone; both are listed for their sandbox, and deleted once."""
    source = Sandbox.create()
    made: list[Sandbox] = []
    try:
        source.run_code("x = 7")
        source.files.write("notes/a.txt", "snapshotted")
        full = source.create_snapshot(name="with-memory")
        files_only = source.create_snapshot(mode="filesystem")
        source.run_code("x = 8")  # after the snapshot: not in it
        source.files.write("notes/a.txt", "changed")

        listed = Sandbox.list_snapshots(sandbox_id=source.sandbox_id).next_items()
        assert {s.snapshot_id for s in listed} == {full.snapshot_id, files_only.snapshot_id}
        assert full.names == ["with-memory:default"]

        made.append(Sandbox.create(full.snapshot_id))
        assert made[-1].run_code("x").text == "7"
        assert made[-1].files.read("notes/a.txt") == "snapshotted"
        made.append(Sandbox.create(files_only.snapshot_id))
        assert made[-1].run_code("'x' in globals()").text == "False"
        assert made[-1].files.read("notes/a.txt") == "snapshotted"
        assert source.run_code("x").text == "8"  # the source ran on

        assert Sandbox.delete_snapshot(full.snapshot_id) is True
        assert Sandbox.delete_snapshot(full.snapshot_id) is False  # gone
        left = Sandbox.list_snapshots(sandbox_id=source.sandbox_id).next_items()
        assert [s.snapshot_id for s in left] == [files_only.snapshot_id]
        assert Sandbox.delete_snapshot(files_only.snapshot_id) is True
    finally:
        for sandbox in (source, *made):
            sandbox.kill()


def timeout_pauses_and_use_resumes(running: Running) -> None:
    """``on_timeout: pause``: at its timeout the sandbox is paused, its state saved, and a
    later call resumes it with its variables and files."""
    sandbox = Sandbox.create(lifecycle={"on_timeout": "pause", "auto_resume": True})
    try:
        sandbox.run_code("y = 5")
        sandbox.files.write("kept.txt", "still here")
        info = Sandbox.get_info(sandbox.sandbox_id)
        assert info.lifecycle == {"on_timeout": "pause", "auto_resume": True}
        sandbox.set_timeout(0)  # its timeout is now; the reaper's next round ends it
        ended = running.call(running.server.sandboxes.reap())
        assert sandbox.sandbox_id in ended
        assert Sandbox.get_info(sandbox.sandbox_id).state is SandboxState.PAUSED
        assert sandbox.run_code("y * 2").text == "10"  # resumed by its use
        assert sandbox.files.read("kept.txt") == "still here"
        assert Sandbox.get_info(sandbox.sandbox_id).state is SandboxState.RUNNING
    finally:
        BaseSandbox.kill(sandbox.sandbox_id)


def forks_work_in_their_own_folder(running: Running) -> None:
    """A fork's code works in its own work dir: relative paths and imports are the fork's,
    never its parent's (a local fork's kernel was its parent's, in the parent's folder)."""
    parent = Sandbox.create()
    made: list[Sandbox] = []
    try:
        parent.files.write("mod_here.py", "WHO = 'parent'")
        parent.run_code("import os")
        (fork,) = Sandbox.fork(parent.sandbox_id, count=1)
        assert isinstance(fork, Sandbox)
        made.append(fork)
        fork.files.write("mod_here.py", "WHO = 'fork'")
        fork.run_code("open('written.txt', 'w').write('by the fork')")
        assert fork.run_code("import mod_here; mod_here.WHO").text == "fork"
        assert fork.run_code("os.path.exists('written.txt')").text == "True"
        assert parent.run_code("os.path.exists('written.txt')").text == "False"
        assert fork.files.read("written.txt") == "by the fork"
        assert not parent.files.exists("written.txt")
        assert parent.run_code("import mod_here; mod_here.WHO").text == "parent"
        assert fork.pause() is True  # a fork sleeps and wakes as any sandbox, in its folder
        back = Sandbox.connect(fork.sandbox_id)
        assert back.run_code("os.path.exists('written.txt')").text == "True"
        assert back.run_code("open('written.txt').read()").text == "by the fork"
    finally:
        for sandbox in (parent, *made):
            sandbox.kill()
