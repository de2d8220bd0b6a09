"""The read-ahead of a wake (``state.reload.read_ahead``): while the new kernel starts, the
OS is asked to bring the signed generation's chunk files into the page cache; what a load
then reads and checks is unchanged."""

from __future__ import annotations

from pathlib import Path

from jupyter_exec import AsyncSession
from jupyter_exec.state.generations import read_manifest, state_folder
from jupyter_exec.state.reload import read_ahead

DEADLINE = 60.0


async def test_read_ahead_names_every_chunk_of_the_signed_generation(tmp_path: Path) -> None:
    async with AsyncSession(work_dir=tmp_path, name="ahead", timeout=DEADLINE) as session:
        code = "import numpy as np\nbig = np.arange(1_500_000)\nsmall = {'a': 1}"
        (await session.execute(code)).raise_for_error()
        await session.sleep()
        generations = session._state.durable.generations
        made = generations.newest()
        assert made is not None
        names = read_manifest(tmp_path, made, generations.budget)["names"]
        chunks = {c[0] for e in names.values() for c in e.get("chunks") or ()}
        assert len(chunks) >= 5  # big: 4 chunks of 4 MB, small: one
        assert read_ahead(tmp_path, made, generations.budget) == len(chunks)
        woken = await session.execute("int(big.sum()), small")
        assert woken.text == "(1124999250000, {'a': 1})"


async def test_read_ahead_of_an_altered_manifest_names_nothing(tmp_path: Path) -> None:
    async with AsyncSession(work_dir=tmp_path, name="altered", timeout=DEADLINE) as session:
        (await session.execute("x = list(range(1000))")).raise_for_error()
        await session.sleep()
        generations = session._state.durable.generations
        made = generations.newest()
        assert made is not None
        manifest = tmp_path / state_folder("altered") / f"gen-{made.file_number}.json"
        manifest.write_bytes(manifest.read_bytes() + b" ")
        assert read_ahead(tmp_path, made, generations.budget) == 0
