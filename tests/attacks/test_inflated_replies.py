"""Inflated answers, tried as the attacker: a Docker kernel answers the host's
``user_expressions`` with what costs the host most to read.

The kernel replaces IPython's ``user_expressions`` so that every answer the host asks for
(the names a cell changed, the generation's commit, the environment report, a checkpoint
call, the user's names) is ~8 MB of ``[[],[],...]`` (a Python repr that ``literal_eval``
turned into 3.7 GB and 20 s of a blocked event loop), or the same as a quoted str, or a
str of JSON nested past any parser, and adds keys the host never asked for.

The defence (:mod:`jupyter_exec.boundary.replies`): only the asked key is read, its raw
text is bounded before anything is decoded, only one quoted str of ASCII is decoded (in
linear time), then JSON with bounded containers. Each test checks that the host's memory
grows by less than 64 MB plus what the kernel sent, that the event loop kept ticking, that
the session still answers, and that nothing the attacker said was taken (no generation
signed, no changed names noted, no environment recorded).

The message around an answer is bounded too (:mod:`jupyter_exec.engine.receiver`): an
output made of more JSON arrays and objects than any output holds (each costs the host ~80
bytes parsed, 33 times its text) becomes a note, never parsed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest

from jupyter_exec import CheckpointError
from jupyter_exec.engine.receiver import MAX_CONTAINERS
from jupyter_exec.inkernel.state import CHANGED_EXPRESSION
from jupyter_exec.state.generations import signed_on_disk
from jupyter_exec.state.kernel_calls import ask, user_names
from tests.docker.conftest import (  # noqa: F401  (fixtures, used by name)
    docker_client,
    kernel_image,
    no_container_left_behind,
    work,
)
from tests.generation_helpers import docker_session, flush, in_kernel, value

DEADLINE = 120.0
SIZE = 8 << 20
"""The attack's size per answer: 8 MB, as in the report."""
HEADROOM = 64 << 20
"""What the host may grow by beyond three times the bytes of the largest reply (a message
is held three times while it is received: its bytes, their UTF-8 decoding, the parsed
str; bounded by the message size limit, not by this reader)."""
MAX_STALL = 1.5
"""Seconds the host's event loop may go without running another task (it was 20 s)."""

SHAPES = {
    "tuple": "repr((0,) * (N // 3))",
    "quoted": "repr(__import__('json').dumps('a' * N))",
    "brackets": "'[' + '[],' * (N // 3) + '[]]'",
    "deep": "repr('[' * (N // 2) + ']' * (N // 2))",
}
"""The answer's text/plain, as kernel code (``N``: its size): a tuple's repr (what
``literal_eval`` inflated most), a str of JSON (what an answer looks like, only larger),
a list's repr and a str of JSON nested too deep (both so full of containers that the
receiver takes the whole reply for none)."""
READ_BY_THE_RECEIVER = frozenset({"brackets", "deep"})


def inflate(shape: str) -> str:
    """Kernel code: from now on every answer is ``shape``, plus two keys nobody asked."""
    return f"""
N = {SIZE}
__import__('builtins')._jx_sent = []
_inflated = {SHAPES[shape]}
def _answers(expressions, _text=_inflated):
    keys = list(expressions) + ['jupyter_exec_unasked', 'r2']
    __import__('builtins')._jx_sent.append(len(keys) * len(_text))
    return {{k: {{'status': 'ok', 'data': {{'text/plain': _text}}, 'metadata': {{}}}}
            for k in keys}}
get_ipython().user_expressions = _answers
del N, _inflated, _answers
"""


HONEST = (
    "get_ipython().user_expressions = type(get_ipython()).user_expressions.__get__(get_ipython())"
)


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


@contextmanager
def peak_growth() -> Iterator[list[int]]:
    """The process's peak resident memory above where it was, in bytes (set on exit)."""
    before = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from now
    found: list[int] = []
    yield found
    found.append((_status_kb("VmHWM") - before) * 1024)


@asynccontextmanager
async def ticking() -> AsyncIterator[list[float]]:
    """The longest the event loop went without running a task meanwhile, in seconds."""
    stalls: list[float] = [0.0]
    stop = asyncio.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            stalls[0] = max(stalls[0], now - last)
            last = now

    task = asyncio.ensure_future(tick())
    try:
        yield stalls
    finally:
        stop.set()
        await task


@pytest.mark.docker
@pytest.mark.parametrize("shape", list(SHAPES))
async def test_inflated_answers_cost_the_host_nothing_and_are_not_taken(
    shape: str,
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
) -> None:
    session = await docker_session(work, f"inflated-{shape}", kernel_image, DEADLINE)
    try:
        kernel = session._kernel
        assert kernel is not None
        durable = session._state.durable
        await session.execute("x = 1")
        await session.checkpoint("before")  # from now on each cell says what it changed
        await session.execute("y = 2")
        signed = [g.number for g in await flush(session)]
        assert signed
        on_disk = [g.number for g in signed_on_disk(session.work_dir, session.name)]
        changes = list(durable.changes)
        notebook = session.notebook_path
        assert notebook is not None
        environment = json.loads(notebook.read_text())["metadata"]["jupyter_exec"]["environment"]
        assert environment.get("interpreter")  # the honest report was recorded

        await kernel.run_silent(inflate(shape), time.monotonic() + DEADLINE)
        with peak_growth() as growth:
            async with ticking() as stalls:
                attacked = await session.execute("import json\nz = 3\nprint('still here')")
                with pytest.raises(CheckpointError, match="could not"):
                    await ask(kernel, "", CHANGED_EXPRESSION, DEADLINE)
                assert await user_names(kernel) == ()
        assert stalls[0] < MAX_STALL, f"the event loop stalled for {stalls[0]:.1f} s"
        assert attacked.stdout == "still here\n"
        if shape in READ_BY_THE_RECEIVER:  # its reply was a note: the cell's status unknown
            assert attacked.error is not None
        else:
            assert attacked.error is None

        # Nothing the kernel said was taken: no generation signed, no names noted, the
        # environment (a new module imported) not recorded.
        generations = session._state.durable.generations
        assert [g.number for g in generations.signed] == signed
        assert [g.number for g in signed_on_disk(session.work_dir, session.name)] == on_disk
        assert durable.changes == changes
        recorded = json.loads(notebook.read_text())["metadata"]["jupyter_exec"]["environment"]
        assert recorded == environment

        # The kernel back to honest answers: the session goes on as before.
        await in_kernel(session, HONEST)
        sent = await value(session, "max(__import__('builtins')._jx_sent)")
        assert sent >= 3 * SIZE  # the cell's reply: its asked keys and two more, 8 MB each
        grown = growth[0]
        assert grown < HEADROOM + 3 * sent, f"grew {grown >> 20} MB for {sent >> 20} MB sent"
        await session.execute("w = 4")
        assert await value(session, "(x, y, z, w)") == (1, 2, 3, 4)
        assert set(await user_names(kernel)) >= {"x", "y", "z", "w"}
        assert [g.number for g in await flush(session)][: len(signed)] == signed
    finally:
        await session.close()


@pytest.mark.docker
async def test_a_message_made_of_containers_is_never_parsed(
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
) -> None:
    session = await docker_session(work, "structured", kernel_image, DEADLINE)
    try:
        kernel = session._kernel
        assert kernel is not None
        await session.execute("x = 1")
        signed = [g.number for g in await flush(session)]
        count = MAX_CONTAINERS + 200_000  # 3.6 MB of "[],", past the receiver's count
        with peak_growth() as growth:
            async with ticking() as stalls:
                shown = await session.execute(
                    f"from IPython.display import display\n"
                    f"display({{'application/json': [[] for _ in range({count})]}}, raw=True)\n"
                    "print('after')"
                )
                answered = await session.execute("z = 3")
        assert stalls[0] < MAX_STALL, f"the event loop stalled for {stalls[0]:.1f} s"
        assert growth[0] < HEADROOM + 3 * 3 * count, f"the host grew by {growth[0] >> 20} MB"
        assert shown.stdout == "after\n"
        (note,) = [r.text or "" for r in shown.results]
        assert "output removed" in note
        assert "JSON arrays and objects" in note
        assert answered.error is None
        assert len(session._state.durable.generations.signed) >= len(signed)
        await session.execute("w = 4")
        assert await value(session, "(x, z, w)") == (1, 3, 4)
    finally:
        await session.close()
