"""The wake's read-ahead, tried as the attacker: a kernel that shares the work dir (a Docker
kernel's state folder is in it) swaps the chunk files of its signed generation for a link
to a host file and a FIFO, so that the host, asking the OS to read them ahead while the new
kernel starts, follows the link or hangs on the FIFO. The host opens neither (no link
followed, regular files only), the link's target is untouched, and the wake refuses the
swapped state as before (the kernel's load checks every chunk) and runs the cells again."""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_exec import AsyncSession
from jupyter_exec.state.generations import read_manifest, state_folder
from jupyter_exec.state.reload import read_ahead

DEADLINE = 60.0


async def test_a_link_and_a_fifo_among_the_chunks_are_never_opened(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_bytes(b"the host's own file")
    before = secret.stat()
    work = tmp_path / "work"
    async with AsyncSession(work_dir=work, name="swap", timeout=DEADLINE) as session:
        code = "import numpy as np\nbig = np.arange(1_500_000)"  # 4 chunks
        (await session.execute(code)).raise_for_error()
        await session.sleep()
        generations = session._state.durable.generations
        made = generations.newest()
        assert made is not None
        chunks = read_manifest(work, made, generations.budget)["names"]["big"]["chunks"]
        objects = work / state_folder("swap") / "objects"
        (objects / chunks[0][0]).unlink()
        (objects / chunks[0][0]).symlink_to(secret)
        (objects / chunks[1][0]).unlink()
        os.mkfifo(objects / chunks[1][0])
        assert read_ahead(work, made, generations.budget) == len(chunks) - 2
        woken = await session.execute("int(big.sum())")
        assert woken.recovered is not None
        assert "refused" in woken.recovered.source  # the swapped state never loaded:
        assert "run again" in woken.recovered.source  # the recorded cells made it again
        assert woken.text == "1124999250000"
    assert secret.read_bytes() == b"the host's own file"
    assert secret.stat().st_mtime_ns == before.st_mtime_ns
