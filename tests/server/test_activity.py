"""KernelActivity's account of running code, from scripted IOPub messages (no kernel)."""

from __future__ import annotations

from typing import Any

from jupyter_exec.server.activity import KernelActivity


def status(state: str, parent_type: str | None, parent_id: str = "", **parent: Any) -> Any:
    parent_header = {"msg_type": parent_type, "msg_id": parent_id, **parent} if parent_type else {}
    return {
        "header": {"msg_type": "status"},
        "parent_header": parent_header,
        "content": {"execution_state": state},
    }


def output(parent_id: str) -> Any:
    return {
        "header": {"msg_type": "stream"},
        "parent_header": {"msg_type": "execute_request", "msg_id": parent_id},
        "content": {"name": "stdout", "text": "x"},
    }


def test_a_cell_is_running_from_its_busy_to_its_idle() -> None:
    activity = KernelActivity(kernel=None)
    assert not activity.busy
    assert activity.last_activity is None
    activity.observe(status("busy", "execute_request", "a"))
    assert activity.busy
    activity.observe(output("a"))
    activity.observe(status("idle", "execute_request", "a"))
    assert not activity.busy
    assert activity.last_activity is not None


def test_other_requests_status_does_not_end_a_running_cell() -> None:
    """A usage, kernel_info or subshell request answered meanwhile says nothing about the cell."""
    activity = KernelActivity(kernel=None)
    activity.observe(status("busy", "execute_request", "cell"))
    for kind in ("usage_request", "kernel_info_request", "create_subshell_request", "comm_info"):
        activity.observe(status("busy", kind, f"{kind}-1"))
        activity.observe(status("idle", kind, f"{kind}-1"))
        assert activity.busy, kind
    activity.observe(status("idle", "execute_request", "another cell's idle"))
    assert activity.busy


def test_a_lost_idle_is_made_good_by_the_next_cell_on_the_same_shell() -> None:
    activity = KernelActivity(kernel=None)
    activity.observe(status("busy", "execute_request", "a"))  # its idle never arrives
    activity.observe(status("busy", "execute_request", "b"))
    activity.observe(status("idle", "execute_request", "b"))
    assert not activity.busy


def test_cells_on_subshells_run_side_by_side() -> None:
    activity = KernelActivity(kernel=None)
    activity.observe(status("busy", "execute_request", "main"))
    activity.observe(status("busy", "execute_request", "side", subshell_id="s1"))
    activity.observe(status("idle", "execute_request", "side", subshell_id="s1"))
    assert activity.busy  # the main shell's cell still runs
    activity.observe(status("idle", "execute_request", "main"))
    assert not activity.busy


def test_a_restarted_kernel_runs_nothing() -> None:
    activity = KernelActivity(kernel=None)
    activity.observe(status("busy", "execute_request", "a"))
    activity.observe(status("restarting", None))
    assert not activity.busy
    activity.observe(status("busy", "execute_request", "b"))
    activity.observe(status("starting", None))
    assert not activity.busy


def test_a_kernel_without_iopub_is_not_watched() -> None:
    activity = KernelActivity(kernel=object())
    assert activity.start() is False
    assert not activity.busy
    activity.close()


def message(kind: str, parent_id: str, session: str, **content: Any) -> Any:
    return {
        "header": {"msg_type": kind},
        "parent_header": {
            "msg_type": "execute_request",
            "msg_id": parent_id,
            "session": session,
            "username": "ada",
        },
        "content": content,
    }


def test_a_persons_runs_are_reported_when_they_end_and_the_agents_are_not() -> None:
    from jupyter_exec.engine.runorder import PersonRun

    activity = KernelActivity(kernel=None)
    runs: list[PersonRun] = []
    activity.watch_runs("agent-client", runs.append)
    for msg_id, session, code, fails in [
        ("a1", "agent-client", "x = 1", False),
        ("p1", "lab-client", "y = x + 1", False),
        ("p2", "lab-client", "1 / 0", True),
    ]:
        activity.observe(status("busy", "execute_request", msg_id, session=session))
        activity.observe(message("execute_input", msg_id, session, code=code, execution_count=7))
        if fails:
            activity.observe(message("error", msg_id, session, ename="ZeroDivisionError"))
        assert runs == ([PersonRun("y = x + 1", 7, True, "ada")] if msg_id == "p2" else [])
        activity.observe(status("idle", "execute_request", msg_id, session=session))
    assert runs == [PersonRun("y = x + 1", 7, True, "ada"), PersonRun("1 / 0", 7, False, "ada")]
    assert not activity.busy
    # A request the kernel showed no code for (silent) is no run of anyone's.
    activity.observe(status("busy", "execute_request", "p3", session="lab-client"))
    activity.observe(status("idle", "execute_request", "p3", session="lab-client"))
    assert len(runs) == 2
