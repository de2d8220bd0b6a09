"""The per-cell state (``save_state``), tried as the attacker: a Docker kernel writes into its
state folder (it is in the work dir it shares with the host) so that a session on the host
unpickles its code, loads something the host never signed, or reads through a link or a FIFO.

The host's defence (:mod:`jupyter_exec.state.generations`): a generation is loaded only
with this host's MAC over {session, generation, manifest sha256, cells, origin}, signed
from what the kernel said on its own channel and stamped with the origin the host knows
(a Docker kernel's state says "docker"); the manifest's sha256 is checked on the host (read
without following a link, never from a FIFO), and the budget; every object's sha256 in the
kernel on the bytes it unpickles. A Docker kernel's state is never loaded by a kernel on
the host without ``trust_origin=True``. Each test checks our ``CheckpointError`` and that
the attacker's command never ran.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from jupyter_exec import AsyncSession, CheckpointError
from jupyter_exec.state.generations import (
    Generation,
    read_manifest,
    signed_on_disk,
    state_folder,
)
from tests.docker.conftest import (  # noqa: F401  (fixtures, used by name)
    docker_client,
    kernel_image,
    no_container_left_behind,
    work,
)
from tests.generation_helpers import (
    PAYLOAD,
    docker_session,
    flush,
    in_kernel,
    load,
    planted_generation,
    value,
)

DEADLINE = 120.0


def forge(number: int, cells: int, report: bool) -> str:
    """Code for the attacking kernel: generation ``number`` rewritten so that its one name
    unpickles to ``touch pwned``; with ``report``, told to the host on its own channel (the
    next cell's answer) as if its writer had written it."""
    return (
        planted_generation(number, cells)
        + f"""if {report!r}:
    g.done.append([{number}, hashlib.sha256(data).hexdigest(), {cells}])
"""
    )


@pytest.mark.docker
async def test_docker_kernel_forged_generation_is_refused_by_a_local_kernel(
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
) -> None:
    attacker = await docker_session(work, "attacker", kernel_image, DEADLINE)
    try:
        await attacker.execute("x = 1")
        await attacker.execute("y = 2")
        [*_, newest] = await flush(attacker)
        assert newest.origin["backend"] == "docker"
        # The kernel's own generation, rewritten and reported: the host signs it, as a
        # Docker kernel's (which it is).
        await in_kernel(attacker, forge(newest.number, newest.cells, report=True))
        await attacker.execute("z = 3")
        forged = next(g for g in await flush(attacker) if g.number == newest.number)
        assert forged.sha256 != newest.sha256
        assert forged.origin["backend"] == "docker"
        notebook = attacker.notebook_path
    finally:
        await attacker.close()
    assert notebook is not None

    victim = await AsyncSession(work_dir=work, name="victim", timeout=DEADLINE).start()
    try:
        kernel = victim._kernel
        assert kernel is not None
        await victim.execute("x = 'mine'")
        with pytest.raises(CheckpointError, match="written by a Docker kernel"):
            await load(victim, forged)
        assert await value(victim, "x") == "mine"
    finally:
        await victim.close()
    # A local session resuming the Docker session's notebook: its state is refused (the
    # cells run again, in the local kernel, from its own code, never the Docker pickle).
    async with AsyncSession.resume(notebook, timeout=DEADLINE) as resumed:
        assert await value(resumed, "(x, y, z)") == (1, 2, 3)
        nb = json.loads(notebook.read_text())
        assert "state_generation" not in nb["metadata"]["jupyter_exec"]["resumed"][-1]
    assert not (work / "pwned").exists()


@pytest.mark.docker
async def test_docker_kernel_planted_signature_manifest_link_and_fifo_are_refused(
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
) -> None:
    session = await docker_session(work, "planted", kernel_image, DEADLINE)
    try:
        kernel = session._kernel
        assert kernel is not None
        await session.execute("x = 41")
        await session.execute("x += 1")
        [*_, newest] = await flush(session)
        folder = work / state_folder("planted")
        # A signature file the kernel made up (no key): never listed, never loaded. The
        # host made signed/ (the kernel cannot write in it); the kernel puts its own there.
        await in_kernel(
            session,
            forge(90, 1, report=False)
            + """
os.rename(os.path.join(root, 'signed'), os.path.join(root, 'signed.old'))
os.mkdir(os.path.join(root, 'signed'))
with open(os.path.join(root, 'signed', '90.json'), 'w') as f:
    json.dump({'kind': 'generation', 'session': 'planted', 'generation': 90,
               'sha256': hashlib.sha256(data).hexdigest(), 'cells': 1,
               'origin': {'backend': 'local'}, 'mac': '0' * 64}, f)
""",
        )
        assert (folder / "signed" / "90.json").is_file()
        assert 90 not in [g.number for g in signed_on_disk(work, "planted")]

        # The signed manifest swapped after signing: its sha256 differs.
        await in_kernel(session, forge(newest.number, newest.cells, report=False))
        with pytest.raises(CheckpointError, match="not the manifest the host signed"):
            await load(session, newest)
        assert await value(session, "x") == 42
    finally:
        await session.close()
    assert not (work / "pwned").exists()


@pytest.mark.docker
async def test_docker_kernel_swapped_or_linked_object_and_fifo_manifest_are_refused(
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
) -> None:
    session = await docker_session(work, "swapped", kernel_image, DEADLINE)
    try:
        kernel = session._kernel
        assert kernel is not None
        await session.execute("x = 'kept'")
        await session.execute("y = 1")
        [*_, newest] = await flush(session)
        manifest = read_manifest(work, newest, 0)
        [[obj, _sha256, _size]] = manifest["names"]["x"]["chunks"]
        swap = f"""
import os
path = os.path.join(sys.modules['_jupyter_exec_generations']._root(), 'objects', {obj!r})
"""
        # The object swapped after signing for the attacker's pickle: refused unread.
        await in_kernel(
            session,
            "import sys\n" + swap + f"open(path + '.n', 'wb').write({PAYLOAD})\n"
            "os.replace(path + '.n', path)",
        )
        with pytest.raises(CheckpointError, match="not loaded"):
            await load(session, newest)
        # Or for bytes of the same size, one changed: the hash refuses it.
        await in_kernel(
            session,
            "import sys\n" + swap + "os.unlink(path)\nimport pickle\n"
            "data = bytearray(pickle.dumps('kept', protocol=5))\ndata[-2] ^= 1\n"
            "open(path, 'wb').write(data)",
        )
        with pytest.raises(CheckpointError, match="does not match its hash"):
            await load(session, newest)
        # A link in its place (to a file of the same size): never followed.
        await in_kernel(
            session,
            "import sys\n" + swap + "os.unlink(path)\nos.symlink('/etc/hostname', path)",
        )
        with pytest.raises(CheckpointError, match="not loaded"):
            await load(session, newest)
        # A FIFO for the manifest: refused on the host without blocking on it.
        fifo = f"""
import os, sys
root = sys.modules['_jupyter_exec_generations']._root()
os.unlink(os.path.join(root, 'gen-{newest.number}.json'))
os.mkfifo(os.path.join(root, 'gen-{newest.number}.json'))
"""
        await in_kernel(session, fifo)
        started = time.monotonic()
        with pytest.raises(CheckpointError, match="cannot be read"):
            await load(session, newest)
        assert time.monotonic() - started < 10
        assert await value(session, "(x, y)") == ("kept", 1)
    finally:
        await session.close()
    assert not (work / "pwned").exists()


@pytest.mark.docker
async def test_docker_kernel_growing_its_state_past_the_budget_is_refused(
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
) -> None:
    session = await docker_session(work, "grown", kernel_image, DEADLINE, state_budget_mb=1)
    try:
        kernel = session._kernel
        assert kernel is not None
        await session.execute("x = 1")
        [*_, newest] = await flush(session)
        # The kernel reports a generation naming a 4 GB object (a sparse file): signed as
        # its own, refused by the budget before anything is read.
        grow = f"""
import sys, os, json, hashlib
g = sys.modules['_jupyter_exec_generations']
root = g._root()
h = 'f' * 64
with open(os.path.join(root, 'objects', h), 'wb') as f:
    f.truncate(4 << 30)
m = {{'format': g.FORMAT, 'version': 1, 'generation': {newest.number}, 'cells': 1,
     'created': 0, 'skipped': {{}}, 'environment': {{}},
     'names': {{'x': {{'kind': 'pickle', 'hash': h, 'size': 4 << 30, 'parts': [4 << 30],
                      'type': 'bytes'}}}}}}
data = json.dumps(m).encode()
with open(os.path.join(root, 'gen-{newest.number}.json'), 'wb') as f:
    f.write(data)
g.done.append([{newest.number}, hashlib.sha256(data).hexdigest(), 1])
"""
        await in_kernel(session, grow)
        await session.execute("y = 2")
        grown = next(g for g in await flush(session) if g.number == newest.number)
        with pytest.raises(CheckpointError, match="past the session's state budget"):
            await load(session, grown)
        assert await value(session, "(x, y)") == (1, 2)
    finally:
        await session.close()


def test_a_generation_signed_for_another_session_or_number_is_refused(tmp_path: Path) -> None:
    """A signature file copied under another number or into another session's folder."""
    from jupyter_exec.state.generations import write_signature

    made = Generation("one", 3, "a" * 64, 2, {"backend": "local"})
    (tmp_path / state_folder("one")).mkdir()  # (its kernel made it)
    write_signature(tmp_path, made)
    assert [g.number for g in signed_on_disk(tmp_path, "one")] == [3]
    signed = tmp_path / state_folder("one") / "signed"
    os.rename(signed / "3.json", signed / "7.json")
    assert signed_on_disk(tmp_path, "one") == []
    other = tmp_path / state_folder("two") / "signed"
    other.mkdir(parents=True)
    (other / "3.json").write_bytes((signed / "7.json").read_bytes())
    assert signed_on_disk(tmp_path, "two") == []


async def test_a_key_the_kernel_could_read_signs_no_state_and_is_never_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's key set to a path inside the work dir (the kernel reads it there): no
    generation is signed, none is loaded, and no key is made where the kernel could read it."""
    from jupyter_exec.boundary import trust as checkpoint_trust

    work_dir = tmp_path / "work"
    inside = work_dir / ".key"
    monkeypatch.setenv(checkpoint_trust.KEY_ENV, str(inside))
    async with AsyncSession(work_dir=work_dir, name="keyed", timeout=DEADLINE) as session:
        await session.execute("a = 1")
        await session.execute("b = 2")
        generations = session._state.durable.generations
        assert generations.signed == []
        assert generations.unavailable is not None
        assert "lies inside" in generations.unavailable
    assert not inside.exists()
    assert signed_on_disk(work_dir, "keyed") == []


@pytest.mark.docker
async def test_docker_kernel_swapped_chunk_and_forged_chunk_list_are_refused(
    kernel_image: str,  # noqa: F811
    work: Path,  # noqa: F811
) -> None:
    """Objects are stored as chunks: the attacker swaps the chunk holding an array's pickle
    stream for its own pickle (padded to the same size), then rewrites its generation so
    that a chunk's name climbs out of the objects folder, and reports it as written."""
    session = await docker_session(work, "chunks", kernel_image, DEADLINE)
    try:
        await session.execute("import numpy as np\nbig = np.arange(1_500_000)")  # 4 chunks
        await session.execute("y = 1")
        [*_, newest] = await flush(session)
        chunks = read_manifest(work, newest, 0)["names"]["big"]["chunks"]
        assert len(chunks) == 4
        [address, _sha256, size] = chunks[0]
        await in_kernel(
            session,
            f"""
import os, sys
path = os.path.join(sys.modules['_jupyter_exec_generations']._root(), 'objects', {address!r})
payload = {PAYLOAD}
os.unlink(path)
open(path, 'wb').write(payload + b'.' * ({size} - len(payload)))
""",
        )
        with pytest.raises(CheckpointError, match="does not match its hash"):
            await load(session, newest)
        assert await value(session, "(int(big.sum()), y)") == (1124999250000, 1)

        forged_list = f"""
import sys, os, json, hashlib
g = sys.modules['_jupyter_exec_generations']
root = g._root()
payload = {PAYLOAD}
m = json.loads(open(os.path.join(root, 'gen-{newest.file_number}.json'), 'rb').read())
m['names']['big']['chunks'][0][0] = '../../pwned-chunk'
with open(os.path.join(root, '..', 'pwned-chunk'), 'wb') as f:
    f.write(payload)
data = json.dumps(m).encode()
with open(os.path.join(root, 'gen-{newest.number}.json'), 'wb') as f:
    f.write(data)
g.done.append([{newest.number}, hashlib.sha256(data).hexdigest(), {newest.cells}])
"""
        await in_kernel(session, forged_list)
        await session.execute("z = 3")  # its answer carries the forged report: signed
        forged = next(g for g in await flush(session) if g.number == newest.number)
        assert forged.sha256 != newest.sha256
        with pytest.raises(CheckpointError, match="chunks of 'big' are not valid"):
            await load(session, forged)
        assert await value(session, "(int(big.sum()), y, z)") == (1124999250000, 1, 3)
    finally:
        await session.close()
    assert not (work / "pwned").exists()
