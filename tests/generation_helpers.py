"""Helpers for the per-cell state tests (``save_state``): real local kernels, killed for real."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from jupyter_exec import AsyncSession
from jupyter_exec.state.generations import Generation, LoadedGeneration, state_folder

DEADLINE = 60.0


def kernel_pid(session: AsyncSession) -> int:
    kernel = session._kernel
    assert kernel is not None
    return int(kernel.km.provisioner.process.pid)  # type: ignore[union-attr]


def process_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


async def kill_kernel(session: AsyncSession) -> None:
    """SIGKILL the session's kernel and wait until it is gone."""
    pid = kernel_pid(session)
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + DEADLINE
    while not process_gone(pid):
        assert time.monotonic() < end, "the killed kernel is still there"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def alone(session: AsyncSession) -> AsyncIterator[None]:
    """The session's kernel channel to this test alone, as a cell has it.

    A silent request waits for its own reply and drops any other; the session's idle signer
    asks the kernel too while no cell runs. A test that talks to the kernel beside it without
    the session's lock can lose its reply to the signer (and wait out its deadline for
    nothing): every helper here takes the lock, as the session's own callers do.
    """
    async with session._lock:
        yield


async def flush(session: AsyncSession) -> list[Generation]:
    """Wait for the kernel's writer, have the host sign what it wrote; the signed ones."""
    kernel = session._kernel
    assert kernel is not None
    generations = session._state.durable.generations
    async with alone(session):
        await generations.flush(session, kernel)
    return list(generations.signed)


async def load(session: AsyncSession, made: Generation) -> LoadedGeneration:
    """Load generation ``made`` into the session's kernel (checked first), the channel alone."""
    kernel = session._kernel
    assert kernel is not None
    async with alone(session):
        return await session._state.durable.generations.load(session, kernel, made)


async def value(session: AsyncSession, expression: str) -> Any:
    """``expression``'s value in the session's kernel (its repr, evaluated here)."""
    import ast

    kernel = session._kernel
    assert kernel is not None
    async with alone(session):
        content = await kernel.run_silent(
            "", time.monotonic() + DEADLINE, expressions={"v": f"repr({expression})"}
        )
    assert content is not None
    found = content["user_expressions"]["v"]
    assert found["status"] == "ok", found
    return ast.literal_eval(ast.literal_eval(found["data"]["text/plain"]))


def state_dir(session: AsyncSession) -> Path:
    return session.work_dir / state_folder(session.name)


async def in_kernel(session: AsyncSession, code: str) -> None:
    """Run ``code`` silently in the kernel, as the kernel itself (nothing recorded)."""
    kernel = session._kernel
    assert kernel is not None
    async with alone(session):
        content = await kernel.run_silent(code, time.monotonic() + DEADLINE)
    assert content is not None
    assert content.get("status") == "ok", content


async def docker_session(
    work_dir: Path, name: str, image: str, timeout: float = 120.0, **options: Any
) -> AsyncSession:
    """A started Docker session on ``image`` with no automatic checkpoints (the per-cell state
    alone), for the tests that kill or attack a Docker kernel's saved state."""
    return await AsyncSession(
        backend="docker",
        work_dir=work_dir,
        name=name,
        docker={"image": image},
        timeout=timeout,
        checkpoint_every=0,
        **options,
    ).start()


PAYLOAD = "b\"cposix\\nsystem\\n(S'touch pwned'\\ntR.\""
"""A pickle that, loaded, runs ``touch pwned`` in the loading kernel's work dir."""


def planted_generation(number: int, cells: int) -> str:
    """Code for an attacking kernel: manifest ``gen-<number>.json`` (after ``cells`` cells) in
    its own state folder, whose one name ``x`` unpickles to ``touch pwned``. It leaves ``g``
    (the in-kernel generations module), ``root`` (the folder) and ``data`` (the manifest's
    bytes) defined, for an attack to go on from."""
    return f"""
import sys, os, json, hashlib
g = sys.modules['_jupyter_exec_generations']
root = g._root()
payload = {PAYLOAD}
h = hashlib.sha256(payload).hexdigest()
with open(os.path.join(root, 'objects', h), 'wb') as f:
    f.write(payload)
m = {{'format': g.FORMAT, 'version': 1, 'generation': {number}, 'cells': {cells},
     'created': 0, 'skipped': {{}}, 'environment': {{}},
     'names': {{'x': {{'kind': 'pickle', 'hash': h, 'size': len(payload),
                      'parts': [len(payload)], 'type': 'int'}}}}}}
data = json.dumps(m).encode()
with open(os.path.join(root, 'gen-{number}.json'), 'wb') as f:
    f.write(data)
"""
