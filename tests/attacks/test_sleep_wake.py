"""Sleep and wake, tried as the attacker: a kernel that, while awake, plants a generation and
a signature of its own in its state folder, or rewrites the signed one, so that the kernel
started on wake unpickles its payload; and a wake racing a close or a delete, to leave a
kernel running that nothing owns.

The defence: a wake loads only the generation this host signed from the kernel's own reply
(kept in memory: a signature file read back from the folder is never the source), checked
again on the host (the manifest's sha256) and in the kernel (each object's); one refused is
said on the woken Execution and the recorded cells run again instead. A close waits for a
wake under way and ends whatever kernel it started.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import time
from pathlib import Path

import psutil

from jupyter_exec import AsyncSession, Execution, SessionClosedError
from jupyter_exec.manager import AsyncSessionManager
from jupyter_exec.state.generations import read_manifest, state_folder
from tests.generation_helpers import flush, in_kernel, planted_generation

DEADLINE = 60.0


def plant(number: int, cells: int, signature: bool) -> str:
    """Code for the attacking kernel: manifest ``gen-<number>.json`` whose one name ``x``
    unpickles to ``touch pwned``; with ``signature``, a signature file for it made up
    without the host's key (the kernel never has it)."""
    forged = f"""
g_session = os.path.basename(root).removeprefix('.').removesuffix('_state')
with open(os.path.join(root, 'signed', '{number}.json'), 'w') as f:
    json.dump({{'kind': 'generation', 'session': g_session, 'generation': {number},
               'manifest': {number}, 'sha256': hashlib.sha256(data).hexdigest(),
               'cells': {cells}, 'origin': {{'backend': 'local'}}, 'mac': '0' * 64}}, f)
"""
    return planted_generation(number, cells) + (forged if signature else "")


async def test_a_generation_and_signature_planted_while_awake_are_not_loaded_on_wake(
    tmp_path: Path,
) -> None:
    async with AsyncSession(work_dir=tmp_path, name="planter", timeout=DEADLINE) as session:
        await session.execute("x = 41")
        await session.execute("x += 1")
        [*_, newest] = await flush(session)
        await in_kernel(session, plant(newest.number + 50, newest.cells + 5, signature=True))
        folder = tmp_path / state_folder("planter")
        assert (folder / "signed" / f"{newest.number + 50}.json").is_file()
        await session.sleep()
        woken = await session.execute("x")
        assert woken.text == "42"  # its own signed state, not the planted one
        assert woken.recovered is not None
        assert woken.recovered.source.startswith(f"generation {newest.number} ")
    assert not (tmp_path / "pwned").exists()


async def test_the_signed_generation_rewritten_while_awake_is_refused_on_wake(
    tmp_path: Path,
) -> None:
    async with AsyncSession(work_dir=tmp_path, name="rewriter", timeout=DEADLINE) as session:
        await session.execute("x = 41")
        await session.execute("x += 1")
        [*_, newest] = await flush(session)
        # The manifest the host signed, rewritten in place (no signature can follow it).
        await in_kernel(session, plant(newest.file_number, newest.cells, signature=False))
        await session.sleep()
        woken = await session.execute("x")
        assert woken.text == "42"  # the recorded cells ran again, from the notebook's code
        assert woken.recovered is not None
        assert "refused" in woken.recovered.source
        assert "not the manifest the host signed" in woken.recovered.source
    assert not (tmp_path / "pwned").exists()


class _Touch:
    """Unpickled in a kernel working in ``<tmp>/work``, runs ``touch <tmp>/pwned`` (a short
    pickle: it fits in the array's pickle-stream chunk)."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch ../pwned",))


async def test_a_chunk_swapped_while_asleep_is_refused_on_wake(tmp_path: Path) -> None:
    """A wake of a local session checks its chunks against their xxh3-128 names (bound by
    the signed manifest): a chunk swapped in the folder while the session sleeps, for a
    pickle of the same size that runs a command, is refused before anything is unpickled."""
    work = tmp_path / "work"
    pwned = tmp_path / "pwned"
    async with AsyncSession(work_dir=work, name="swapped", timeout=DEADLINE) as session:
        await session.execute("import numpy as np\nbig = np.arange(1_500_000)")
        await session.sleep()
        made = session._state.durable.generations.newest()
        assert made is not None
        [first, *_] = read_manifest(work, made, 0)["names"]["big"]["chunks"]
        payload = pickle.dumps(_Touch())
        assert len(payload) <= first[2]
        chunk = work / state_folder("swapped") / "objects" / first[0]
        chunk.unlink()
        chunk.write_bytes(payload + b"." * (first[2] - len(payload)))
        woken = await session.execute("int(big.sum())")
        assert woken.text == "1124999250000"  # the recorded cells ran again instead
        assert woken.recovered is not None
        assert "refused" in woken.recovered.source
        assert "does not match its hash" in woken.recovered.source
    assert not pwned.exists()


def _kernels() -> set[int]:
    """The ipykernel processes this test process started (children at any depth)."""
    me = psutil.Process()
    found = set()
    for child in me.children(recursive=True):
        try:
            if "ipykernel" in " ".join(child.cmdline()) and child.status() != "zombie":
                found.add(child.pid)
        except psutil.Error:
            continue
    return found


async def _gone(pids: set[int]) -> bool:
    end = time.monotonic() + DEADLINE
    while pids & _kernels():
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_a_wake_racing_a_close_leaves_no_kernel(tmp_path: Path) -> None:
    before = _kernels()
    session = await AsyncSession(work_dir=tmp_path, name="race", timeout=DEADLINE).start()
    await session.execute("x = 1")
    await session.sleep()
    waking = asyncio.create_task(session.execute("x"))
    end = time.monotonic() + DEADLINE
    while session._waking is None and not waking.done():  # the wake under way, then close
        assert time.monotonic() < end
        await asyncio.sleep(0)
    await session.close()
    try:
        woken = await waking
    except SessionClosedError:
        pass  # the close won
    else:
        assert woken.text == "1"  # the wake won; the close then ended its kernel
    assert session.closed
    assert session.kernel_id is None
    assert await _gone(_kernels() - before), "a woken kernel outlived the close"


async def test_a_wake_racing_a_delete_in_the_manager_leaves_no_kernel(tmp_path: Path) -> None:
    before = _kernels()
    async with AsyncSessionManager(
        root_dir=str(tmp_path), session_defaults={"timeout": DEADLINE}
    ) as manager:
        session = await manager.session("raced")
        await manager.execute("raced", "x = 1")
        await session.sleep()
        calls = await asyncio.gather(
            manager.execute("raced", "x"), manager.close_session("raced"), return_exceptions=True
        )
        woken, closed = calls
        assert closed is None
        if not isinstance(woken, SessionClosedError):  # else the delete won
            assert isinstance(woken, Execution), woken
            assert woken.text == "1"  # the wake won; the delete then ended its kernel
        assert "raced" not in manager
        assert session.closed
        assert await _gone(_kernels() - before), "a woken kernel outlived the delete"
