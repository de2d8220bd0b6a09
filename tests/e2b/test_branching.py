"""The SDK's ``fork``, snapshots and lifecycle against a local ``jupyter-exec e2b`` server:
the checks of branching_checks.py, and what only a local server shows (a kernel of another
language refused with its reason; a sandbox that does not resume on use; a timeout without
``on_timeout`` still kills)."""

from __future__ import annotations

from pathlib import Path

import pytest
from branching_checks import (
    forks_carry_files_and_state,
    forks_work_in_their_own_folder,
    snapshots_start_sandboxes,
    timeout_pauses_and_use_resumes,
)
from e2b import SandboxException, SandboxNotFoundException
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import Running

from jupyter_exec.e2b.languages import installed, language_named
from tests.fork_barrier import SIBLINGS_BARRIER


def test_fork_gives_sandboxes_with_the_files_and_state(api_env: Running) -> None:
    forks_carry_files_and_state(api_env)


def test_a_fork_works_in_its_own_folder(api_env: Running) -> None:
    forks_work_in_their_own_folder(api_env)


def test_the_forks_of_one_request_start_at_once(api_env: Running, tmp_path: Path) -> None:
    """Each fork, forked and not yet serving, waits until all four siblings exist: forks
    made one after another (each waiting for the one before to answer) never all meet."""
    parent = Sandbox.create()
    made: list[Sandbox] = []
    try:
        assert parent.run_code(SIBLINGS_BARRIER.format(folder=str(tmp_path), count=4)).error is None
        forks = Sandbox.fork(parent.sandbox_id, count=4)
        made = [f for f in forks if isinstance(f, Sandbox)]
        assert len(made) == 4, forks
        seen = [f.run_code("siblings").text for f in made]
        pids = sorted(p.name for p in tmp_path.iterdir())
        assert len(pids) == 4
        assert seen == [repr(pids)] * 4  # every fork was alive while all the others were
        assert parent.run_code("'siblings' in globals()").text == "False"
    finally:
        for sandbox in (parent, *made):
            sandbox.kill()


def test_snapshots_start_sandboxes_with_memory_or_files(api_env: Running) -> None:
    snapshots_start_sandboxes(api_env)


def test_on_timeout_pause_pauses_and_a_call_resumes(api_env: Running) -> None:
    timeout_pauses_and_use_resumes(api_env)


def test_without_auto_resume_a_paused_sandbox_waits_for_connect(api_env: Running) -> None:
    sandbox = Sandbox.create(lifecycle={"on_timeout": "pause", "auto_resume": False})
    try:
        sandbox.run_code("z = 3")
        sandbox.set_timeout(0)
        assert sandbox.sandbox_id in api_env.call(api_env.server.sandboxes.reap())
        with pytest.raises(SandboxException, match="connect to it first"):
            sandbox.run_code("z")
        back = Sandbox.connect(sandbox.sandbox_id)
        assert back.run_code("z").text == "3"
    finally:
        sandbox.kill()


def test_a_timeout_without_a_lifecycle_still_kills(api_env: Running) -> None:
    sandbox = Sandbox.create()
    sandbox.set_timeout(0)
    assert sandbox.sandbox_id in api_env.call(api_env.server.sandboxes.reap())
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sandbox.sandbox_id)


def test_a_snapshot_that_is_not_there_is_not_found(api_env: Running) -> None:
    with pytest.raises(SandboxException, match=r"404|not found"):
        Sandbox.create("snap-0000000000000000")
    assert Sandbox.delete_snapshot("snap-0000000000000000") is False


def test_another_languages_memory_is_refused_saying_why_and_its_files_kept(
    api_env: Running,
) -> None:
    language = language_named("javascript")
    if not installed(language, "local"):
        pytest.skip("no JavaScript kernel installed here")
    sandbox = Sandbox.create()
    try:
        sandbox.run_code("x = 1")
        sandbox.files.write("kept.txt", "files")
        context = sandbox.create_code_context(language="js")
        assert sandbox.run_code("1 + 1", context=context).text == "2"
        for call in (lambda: Sandbox.fork(sandbox.sandbox_id, count=1),
                     sandbox.create_snapshot):  # fmt: skip
            with pytest.raises(SandboxException) as refused:
                call()
            assert "409" in str(refused.value)
            assert "cannot be carried" in str(refused.value)
            assert "javascript" in str(refused.value)
        files_only = sandbox.create_snapshot(mode="filesystem")  # the files alone: taken
        copy = Sandbox.create(files_only.snapshot_id)
        try:
            assert copy.files.read("kept.txt") == "files"
        finally:
            copy.kill()
        assert sandbox.run_code("x").text == "1"  # the source ran on
    finally:
        sandbox.kill()
