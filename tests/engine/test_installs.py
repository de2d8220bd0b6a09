"""The in-kernel helpers go to a new kernel process in one silent request, each with its own
outcome: a session's first cell sends one request before the cell, and one helper's refusal
is still its own (the others install; one that needs it is not tried, and not refused)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec import AsyncSession
from jupyter_exec.engine.installs import Installs, Outcome
from jupyter_exec.engine.kernel import KernelHandle, start_kernel
from jupyter_exec.inkernel import Install
from jupyter_exec.inkernel import env as inkernel_env
from jupyter_exec.inkernel import streams as inkernel_streams

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def kernel(tmp_path: Path) -> AsyncIterator[KernelHandle]:
    handle = await start_kernel(cwd=tmp_path)
    try:
        yield handle
    finally:
        handle.kc.stop_channels()
        await handle.km.shutdown_kernel(now=True)


def _count_silent(kernel: KernelHandle, sent: list[str]) -> None:
    """Note every silent request ``kernel`` is sent from now on that installs something (a
    module's source in its code or its expressions; the idle session's asks carry none)."""
    original = kernel.run_silent

    async def counted(code: str, deadline: float, **kwargs: Any) -> dict[str, Any] | None:
        text = code + "".join((kwargs.get("expressions") or {}).values())
        if "compile(" in text:
            sent.append(text)
        return await original(code, deadline, **kwargs)

    kernel.run_silent = counted  # type: ignore[method-assign]


async def _in_kernel(kernel: KernelHandle, expression: str) -> str:
    reply = await kernel.run_silent("", time.monotonic() + 30, expressions={"r": expression})
    assert reply is not None
    return str(reply["user_expressions"]["r"]["data"]["text/plain"])


async def test_a_refused_entry_is_its_own(kernel: KernelHandle, tmp_path: Path) -> None:
    installs = Installs(kernel, tmp_path)
    probe = installs.probe()
    assert installs.probe() == probe  # one probe per batch, whoever asks
    outcomes: dict[str, Outcome] = {}

    def note(name: str) -> Any:
        return lambda outcome: outcomes.__setitem__(name, outcome)

    guard = inkernel_streams.install_entry("no-such-probe")  # the kernel does not find it
    installs.add(guard, note("guard"))
    needs_guard = Install(
        "after", inkernel_env.__file__, "_jupyter_exec_test", "report()", ("guard",)
    )
    installs.add(needs_guard, note("after"))
    env = Install("environment", inkernel_env.__file__, inkernel_env.MODULE, "install('.')")
    installs.add(env, note("environment"))
    sent: list[str] = []
    _count_silent(kernel, sent)

    await installs.send()

    assert len(sent) == 1
    assert outcomes["guard"].refused
    assert not outcomes["guard"].ok
    assert "does not share the session's work dir" in outcomes["guard"].why
    assert outcomes["guard"].refusal.startswith("the kernel could not do it: RuntimeError: ")
    assert not outcomes["after"].ok
    assert not outcomes["after"].refused
    assert outcomes["environment"].ok
    assert not (tmp_path / probe).exists()  # the probe goes with the batch
    modules = await _in_kernel(
        kernel,
        "str(sorted(m for m in __import__('sys').modules if m.startswith('_jupyter_exec')))",
    )
    assert inkernel_env.MODULE in modules
    assert "_jupyter_exec_test" not in modules  # never tried: never registered
    names = await _in_kernel(kernel, "str(sorted(k for k in globals() if not k.startswith('_')))")
    for leaked in ("entries", "done", "result", "module", "loaded", "ns"):
        assert f"'{leaked}'" not in names, names


async def test_a_dead_kernel_tells_every_entry(kernel: KernelHandle, tmp_path: Path) -> None:
    await kernel.km.shutdown_kernel(now=True)
    installs = Installs(kernel, tmp_path)
    outcomes: list[Outcome] = []
    env = Install("environment", inkernel_env.__file__, inkernel_env.MODULE, "install('.')")
    installs.add(env, outcomes.append)
    from jupyter_exec.exceptions import KernelNotAliveError

    with pytest.raises(KernelNotAliveError):
        await installs.send(timeout=20)
    assert len(outcomes) == 1
    assert outcomes[0].died
    assert not outcomes[0].refused


async def test_a_sessions_first_cell_installs_every_helper_in_one_request(
    tmp_path: Path,
) -> None:
    async with AsyncSession(work_dir=tmp_path, undo_steps=0) as session:
        kernel = session.kernel_slot.kernel
        assert kernel is not None
        sent: list[str] = []
        _count_silent(kernel, sent)

        first = await session.execute("x = 1")
        assert first.ok

        assert len(sent) == 1, [code[:80] for code in sent]  # the batch, then the cell
        assert kernel.stream_guard is True
        assert kernel.environment_capture is True
        durable = session._state.durable
        assert durable.installed is kernel
        assert durable.generations.installed is kernel
        assert not list(tmp_path.glob(".jupyter-exec-probe-*"))
        await session.execute("y = 2")
        assert len(sent) == 1  # the next cell asks for nothing more
        await session.restart()
        await session.execute("z = 3")
        assert len(sent) == 2  # a new process: its own batch
        assert kernel.stream_guard is True
        assert durable.generations.installed is kernel
        flood = await session.execute("print('a' * 3_000_000)")
        assert flood.spilled  # the guard is live in the restarted process


async def test_a_kernel_of_the_hosts_python_runs_the_hosts_bytecode(
    kernel: KernelHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same bytecode magic: the kernel loads what the host compiled (here a stand-in that
    marks itself); another magic, or bytecode it cannot load: it compiles the source."""
    import base64
    import importlib.util
    import marshal

    import jupyter_exec.inkernel as loader

    source = "def install(*args):\n    pass\n"
    marked = compile(source + "MARK = 'bytecode'\n", "<test>", "exec", dont_inherit=True)
    stand_in = base64.b64encode(marshal.dumps(marked)).decode()

    async def install_as(module: str, compiled: str, magic: bytes | None = None) -> str:
        monkeypatch.setattr(loader, "_module_text", lambda *_: (source, compiled))
        if magic is not None:
            monkeypatch.setattr(importlib.util, "MAGIC_NUMBER", magic)
        installs = Installs(kernel, tmp_path)
        outcomes: list[Outcome] = []
        installs.add(Install("t", inkernel_env.__file__, module, "install()"), outcomes.append)
        await installs.send()
        monkeypatch.undo()
        assert outcomes[0].ok, outcomes
        return await _in_kernel(
            kernel, f"getattr(__import__('sys').modules[{module!r}], 'MARK', 'source')"
        )

    assert await install_as("_jx_test_a", stand_in) == "'bytecode'"
    assert await install_as("_jx_test_b", stand_in, magic=b"\x00\x00\r\n") == "'source'"
    assert await install_as("_jx_test_c", "bm90IG1hcnNoYWw=") == "'source'"  # not marshal
