"""The engine's message logic against a scripted kernel: recording, display updates,
timeouts, deaths, resume and close, where a real kernel would be slow or racy.

Real kernels stay for everything end to end (test_session.py and the rest).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from fake_kernel import (
    FakeKernelManager,
    Hang,
    Reply,
    Say,
    display,
    error,
    scripted,
    started,
    stream,
    update,
)

from jupyter_exec import AsyncSession, Execution, SessionClosedError, StorageError
from jupyter_exec.engine.kernel import _launch_or_undo

ReadNotebook = Callable[[Path], nbformat.NotebookNode]

pytestmark = pytest.mark.timeout(60)


def texts(cell: Any) -> list[Any]:
    return [o.get("data", {}).get("text/plain", o.get("text")) for o in cell["outputs"]]


async def test_outputs_are_recorded_in_order(work_dir: Path, read_notebook: ReadNotebook) -> None:
    km = scripted(
        {
            "go": [
                stream("a"),
                stream("b\n"),
                stream("oops\n", "stderr"),
                display("shown"),
                Say(
                    "execute_result",
                    {"data": {"text/plain": "42"}, "metadata": {}, "execution_count": 1},
                ),
            ]
        }
    )
    s = await started(km, work_dir)
    r = await s.execute("go")
    await s.close()
    assert (r.status, r.stdout, r.stderr, r.text) == ("ok", "ab\n", "oops\n", "42")
    assert r.execution_count == 1
    assert s.notebook_path is not None
    cell = read_notebook(s.notebook_path).cells[0]
    assert texts(cell) == ["ab\n", "oops\n", "shown", "42"]
    assert cell.metadata["jupyter_exec"]["status"] == "ok"
    assert km.interrupts == km.restarts == 0


@pytest.mark.parametrize(
    "chunks",
    [["one\ntwo\n"], ["one", "\n", "two\n"], ["o", "ne\nt", "wo", "\n"]],
    ids=["whole", "split-at-newline", "split-anywhere"],
)
async def test_how_a_stream_is_chunked_changes_nothing(
    work_dir: Path, read_notebook: ReadNotebook, chunks: list[str]
) -> None:
    s = await started(scripted({"go": [stream(c) for c in chunks]}), work_dir)
    r = await s.execute("go")
    await s.close()
    assert r.stdout == "one\ntwo\n"
    assert s.notebook_path is not None
    assert texts(read_notebook(s.notebook_path).cells[0]) == ["one\ntwo\n"]


async def test_display_updates_reach_earlier_cells_and_their_files(
    work_dir: Path, read_notebook: ReadNotebook
) -> None:
    km = scripted(
        {
            "show": [display("v1", "x", html="<b>v1</b>")],
            "other": [stream("unrelated\n")],
            "again": [display("v2", "x", html="<b>v2</b>"), update("v3", "x", html="<b>v3</b>")],
            "later": [update("v4", "x", html="<b>v4</b>")],
        }
    )
    s = await started(km, work_dir)
    first = await s.execute("show")
    await s.execute("other")
    third = await s.execute("again")
    await s.execute("later")
    await s.close()
    assert s.notebook_path is not None
    nb = read_notebook(s.notebook_path)
    assert [texts(c) for c in nb.cells] == [["v4"], ["unrelated\n"], ["v4"], []]
    assert (s.files_dir / "cell-001-1.html").read_text() == "<b>v4</b>"
    assert (s.files_dir / "cell-003-1.html").read_text() == "<b>v4</b>"
    # What each caller got stays what its cell showed when it ended.
    assert first.results[0].text == "v1"
    assert first.outputs[0]["data"]["text/plain"] == "v1"
    assert third.results[0].text == "v3"


async def test_an_update_shown_before_a_new_display_of_the_same_id(work_dir: Path) -> None:
    """Jupyter's order: an update reaches only what is shown *so far*."""
    km = scripted(
        {
            "show": [display("old", "x")],
            "mixed": [update("updated", "x"), display("new", "x")],
        }
    )
    s = await started(km, work_dir)
    await s.execute("show")
    mixed = await s.execute("mixed")
    await s.close()
    assert s.notebook_path is not None
    nb = nbformat.read(s.notebook_path, as_version=4)
    assert texts(nb.cells[0]) == ["updated"]
    assert mixed.results[0].text == "new"


async def test_an_error_reply_without_an_error_output_still_carries_an_error(
    work_dir: Path,
) -> None:
    reply = Reply({"status": "error", "ename": "UsageError", "evalue": "no such magic"})
    s = await started(scripted({"%nope": [stream("UsageError\n", "stderr"), reply]}), work_dir)
    r = await s.execute("%nope")
    plain = await s.execute("%silent-error")
    await s.close()
    assert r.status == "error"
    assert r.error is not None
    assert (r.error.ename, r.error.evalue) == ("UsageError", "no such magic")
    assert plain.ok


async def test_code_errors_are_data(work_dir: Path) -> None:
    s = await started(scripted({"1/0": error("ZeroDivisionError", "division by zero")}), work_dir)
    r = await s.execute("1/0")
    await s.close()
    assert r.status == "error"
    assert r.error is not None
    assert r.error.ename == "ZeroDivisionError"


async def test_a_timeout_interrupts_and_keeps_the_state(work_dir: Path) -> None:
    km = scripted({"slow": [stream("started\n"), Hang(interruptible=True)]})
    s = await started(km, work_dir, interrupt_grace=5)
    r = await s.execute("slow", timeout=0.3)
    after = await s.execute("next")
    await s.close()
    assert r.status == "timeout"
    assert not r.state_lost
    assert r.stdout == "started\n"
    assert r.error is not None
    assert r.error.ename == "ExecutionTimeout"
    assert "state is kept" in r.error.evalue
    assert (km.interrupts, km.restarts) == (1, 0)
    assert after.ok


async def test_an_interrupt_the_kernel_lost_is_sent_again_within_the_grace(work_dir: Path) -> None:
    """IRkernel loses an interrupt that lands in its own code (three in three on a loaded
    machine, in Docker): the runner interrupts again while the cell goes on, and the state
    is kept instead of restarted away."""
    km = scripted({"slow": [stream("started\n"), Hang(interruptible=True, loses=1)]})
    s = await started(km, work_dir, interrupt_grace=30)
    r = await s.execute("slow", timeout=0.3)
    after = await s.execute("next")
    await s.close()
    assert (r.status, r.state_lost) == ("timeout", False)
    assert (km.interrupts, km.restarts) == (2, 0)
    assert after.ok


async def test_a_cell_that_ignores_the_interrupt_gets_a_restart(
    work_dir: Path, read_notebook: ReadNotebook
) -> None:
    km = scripted({"stuck": [Hang(interruptible=False)]})
    s = await started(km, work_dir, interrupt_grace=0.2)
    r = await s.execute("stuck", timeout=0.2)
    after = await s.execute("next")
    await s.close()
    assert (r.status, r.state_lost) == ("timeout", True)
    assert (km.interrupts, km.restarts) == (1, 1)
    assert s.notebook_path is not None
    nb = read_notebook(s.notebook_path)
    assert nb.cells[0].metadata["jupyter_exec"]["state_lost"] is True
    assert "restarted after a timeout" in nb.cells[1].metadata["jupyter_exec"]["kernel"]
    assert after.ok


async def test_a_kernel_that_dies_is_reported_and_restarted(work_dir: Path) -> None:
    km = scripted({"crash": [stream("last words\n"), Hang(interruptible=False)]})
    s = await started(km, work_dir)
    task = asyncio.create_task(s.execute("crash"))
    while not km.executed:
        await asyncio.sleep(0.01)
    km.alive = False
    r = await task
    await s.close()
    assert (r.status, r.state_lost) == ("died", True)
    assert r.stdout == "last words\n"
    assert r.error is not None
    assert r.error.ename == "KernelDied"
    assert km.restarts == 1


async def test_close_while_a_cell_waits_records_it(
    work_dir: Path, read_notebook: ReadNotebook
) -> None:
    km = scripted({"wait": [stream("so far\n"), Hang()]})
    s = await started(km, work_dir)
    task = asyncio.create_task(s.execute("wait"))
    while not km.executed:
        await asyncio.sleep(0.01)
    await s.close()
    with pytest.raises(SessionClosedError) as info:
        await task
    execution = info.value.execution
    assert isinstance(execution, Execution)
    assert (execution.status, execution.stdout) == ("cancelled", "so far\n")
    assert s.notebook_path is not None
    cell = read_notebook(s.notebook_path).cells[0]
    assert cell.metadata["jupyter_exec"]["status"] == "cancelled"
    assert texts(cell)[0] == "so far\n"


async def test_a_spill_that_cannot_be_written_keeps_the_cell(work_dir: Path) -> None:
    km = scripted({"flood": [stream("x" * 5000 + "\n")], "small": [stream("ok\n")]})
    s = await started(km, work_dir, max_output_chars=1000)
    blocker = work_dir / "fake_files"
    blocker.write_text("in the way")
    with pytest.raises(StorageError) as info:
        await s.execute("flood")
    execution = info.value.execution
    assert execution is not None
    assert execution.truncated
    assert execution.spilled == ()
    assert execution.cell_index == 0
    blocker.unlink()
    again = await s.execute("flood")
    assert [p.name for p in again.spilled] == ["cell-002-stdout.txt"]
    assert (await s.execute("small")).ok
    await s.close()


async def test_resume_reruns_the_recorded_code_and_numbers_on(
    work_dir: Path, read_notebook: ReadNotebook
) -> None:
    km = scripted({"a = 1": [], "b = 2": [stream("b\n")]})
    s = await started(km, work_dir)
    await s.execute("a = 1")
    await s.execute("b = 2")
    await s.close()
    assert s.notebook_path is not None

    again = FakeKernelManager(lambda code: [])
    resumed = await AsyncSession.resume(s.notebook_path, kernel_manager=again).start()
    new = await resumed.execute("c = 3")
    await resumed.close()
    assert again.executed == ["a = 1", "b = 2", "c = 3"]
    assert [e.code for e in resumed.resumed] == ["a = 1", "b = 2"]
    assert new.cell_index == 2
    nb = read_notebook(s.notebook_path)
    assert [c.source for c in nb.cells] == ["a = 1", "b = 2", "c = 3"]
    assert nb.cells[2].metadata["jupyter_exec"]["kernel"].startswith("resumed")


async def test_close_from_the_cells_own_callback_does_not_wait_for_itself(
    work_dir: Path, read_notebook: ReadNotebook
) -> None:
    km = scripted({"wait": [stream("so far\n"), Hang()]})
    s = await started(km, work_dir)

    async def close_now(event: dict[str, Any]) -> None:
        await s.close()

    started_at = asyncio.get_running_loop().time()
    with pytest.raises(SessionClosedError) as info:
        await s.execute("wait", on_output=close_now)
    assert asyncio.get_running_loop().time() - started_at < 5  # not the close's 10 s wait
    assert info.value.execution is not None
    assert info.value.execution.status == "cancelled"
    assert s.notebook_path is not None
    assert read_notebook(s.notebook_path).cells[0].metadata["jupyter_exec"]["status"] == "cancelled"
    assert [p.name for p in work_dir.iterdir() if p.name.startswith(".")] == []  # no spare left


async def test_a_start_cancelled_after_the_launch_stops_the_launched_process() -> None:
    """A cancel landing between the kernel's launch and the manager's return leaves no process."""

    class SlowManager:
        def __init__(self) -> None:
            self.process: subprocess.Popen[bytes] | None = None
            self.launched = asyncio.Event()

        async def start_kernel(self, **kwargs: object) -> None:
            self.process = subprocess.Popen(["sleep", "120"])
            self.launched.set()
            await asyncio.sleep(0.5)  # the manager's own bookkeeping after the launch

        async def shutdown_kernel(self, now: bool = False) -> None:
            assert self.process is not None
            self.process.kill()
            self.process.wait()

    km = SlowManager()
    task = asyncio.ensure_future(_launch_or_undo(km))  # type: ignore[arg-type]
    await km.launched.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert km.process is not None
    assert km.process.poll() is not None  # stopped, not left to run


async def test_a_lost_kernel_info_request_is_sent_again_at_start(work_dir: Path) -> None:
    """A request lost on the way (one sent while the connection is being made) is asked
    again, not waited for until the start timeout (an attach once waited 60 s)."""
    km = scripted({"x": [Reply()]})
    km.loses_kernel_info = 2
    s = await started(km, work_dir)
    try:
        assert km.kernel_info_requests == 3
        assert (await s.execute("x")).status == "ok"
    finally:
        await s.close()
