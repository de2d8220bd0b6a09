"""A Docker session's network policy follows its state: forks, undo, restore, recovery.

Every kernel made from a policy session's state runs in its container and goes out through
its proxy; each must also record its cells' connections and redact the policy's secrets,
and the proxy must be closed once, by the session that started it. Python API here; the
MCP server in test_policy_state_mcp.py. A test HTTPS server on loopback is reached by a name
mapped in the proxy's own resolver (as in test_docker_network_policy.py; secrets go over
verified TLS only); ``/echo`` quotes the request's ``Authorization`` header, so the secret the
proxy adds comes back to the kernel and must be redacted from what is recorded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec import AsyncSession, Execution, NetworkPolicy
from jupyter_exec.network.shared import SharedProxy
from tests.tls_servers import answering, https_echo

pytestmark = pytest.mark.docker

SECRET = "Bearer jx-state-51d0e2-secret"

FETCH = """
import urllib.request
def fetch(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()
"""


_Echo = answering("hello {path}")  # (the tests fetch ``/echo`` only)


@pytest.fixture
def echo_tls(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The echo server over TLS: its port and its authority's file."""
    with https_echo(_Echo, tmp_path / "ca", "web.test") as served:
        yield served


@pytest.fixture
def echo_port(echo_tls: tuple[int, Path]) -> int:
    return echo_tls[0]


@pytest.fixture
def echo_ca(echo_tls: tuple[int, Path]) -> Path:
    return echo_tls[1]


def _received(since: int) -> list[str | None]:
    """The Authorization header of each request the server got after the first ``since``."""
    return [headers.get("Authorization") for headers in _Echo.seen[since:]]


def _policy(ca: Path) -> NetworkPolicy:
    return NetworkPolicy(
        allow=["web.test", "127.0.0.1"],
        secrets={"web.test": {"Authorization": SECRET}},
        extra_ca=ca,
    )


async def _echoed(session: AsyncSession, port: int) -> Execution:
    """Fetch the echo through the policy; the reply holds the secret the proxy added."""
    before = len(_Echo.seen)
    execution = await session.execute(f"print(fetch('https://web.test:{port}/echo'))")
    execution.raise_for_error()
    assert _received(before) == [SECRET]  # the proxy added it; the server saw it
    return execution


def _checked(session: AsyncSession, execution: Execution, port: int) -> None:
    """Recorded like the first kernel's cells: the connection, and the secret redacted."""
    assert [(c.host, c.port, c.decision, c.secret) for c in execution.connections] == [
        ("web.test", port, "allowed", True)
    ]
    assert execution.stdout.strip() == "you sent [secret redacted]"
    assert SECRET not in json.dumps(execution.to_dict())
    text = Path(session.notebook_path or "").read_text(encoding="utf-8")
    assert SECRET not in text
    last = json.loads(text)["cells"][-1]
    assert [c["host"] for c in last["metadata"]["jupyter_exec"]["network"]] == ["web.test"]


def _count_closes(owner: Any) -> list[int]:
    """Calls of the proxy's own ``close`` from now on (a shared view's close is not one)."""
    calls: list[int] = []
    close = owner.close

    async def counted() -> None:
        calls.append(1)
        await close()

    owner.close = counted
    return calls


async def test_fork_undo_restore_and_recovery_keep_recording_and_redacting(
    kernel_image: str, tmp_path: Path, echo_port: int, echo_ca: Path
) -> None:
    session = AsyncSession(
        work_dir=tmp_path / "w",
        name="p",
        backend="docker",
        docker={"image": kernel_image},
        network=_policy(echo_ca),
        undo_steps=3,
    )
    async with session:
        owner = session._kernel.network  # type: ignore[union-attr]
        assert not isinstance(owner, SharedProxy)  # the session started it: its own
        closes = _count_closes(owner)
        (await session.execute(FETCH)).raise_for_error()
        _checked(session, await _echoed(session, echo_port), echo_port)
        await session.checkpoint("fetched")

        # a fork: its own kernel in the container, its own record, the same proxy
        (fork,) = await session.fork(name="f")
        try:
            assert isinstance(fork._kernel.network, SharedProxy)  # type: ignore[union-attr]
            _checked(fork, await _echoed(fork, echo_port), echo_port)
            _checked(session, await _echoed(session, echo_port), echo_port)  # parent unchanged
        finally:
            await fork.close()
        assert closes == []  # the fork's end is not the proxy's
        assert owner.folder.is_dir()

        # undo: a kernel from the snapshot serves the session now
        (await session.execute("x = 1")).raise_for_error()
        await session.undo()
        _checked(session, await _echoed(session, echo_port), echo_port)

        # restore a checkpoint: another kernel from its snapshot
        await session.restore("fetched")
        _checked(session, await _echoed(session, echo_port), echo_port)

        # that kernel dies: the one recovery starts goes on recording and redacting
        died = await session.execute("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        assert died.status == "died"
        assert died.error is not None
        assert "came back from its snapshot" in died.error.evalue
        _checked(session, await _echoed(session, echo_port), echo_port)
        folder = owner.folder
        assert closes == []
    assert closes == [1]  # closed once, with the session
    assert not folder.exists()


async def test_a_fork_of_a_fork_and_its_undo_share_the_one_proxy(
    kernel_image: str, tmp_path: Path, echo_port: int, echo_ca: Path
) -> None:
    """Views of views still reach the session's proxy; no kernel but the first closes it."""
    async with AsyncSession(
        work_dir=tmp_path / "w",
        name="p",
        backend="docker",
        docker={"image": kernel_image},
        network=_policy(echo_ca),
        undo_steps=2,
    ) as session:
        owner = session._kernel.network  # type: ignore[union-attr]
        closes = _count_closes(owner)
        (await session.execute(FETCH)).raise_for_error()
        (child,) = await session.fork(name="c")
        async with child:
            (grandchild,) = await child.fork(name="g")
            async with grandchild:
                (await grandchild.execute("y = 2")).raise_for_error()
                await grandchild.undo()
                _checked(grandchild, await _echoed(grandchild, echo_port), echo_port)
            _checked(child, await _echoed(child, echo_port), echo_port)
        assert closes == []
        _checked(session, await _echoed(session, echo_port), echo_port)
    assert closes == [1]
