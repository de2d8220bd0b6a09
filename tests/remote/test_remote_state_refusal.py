"""``save_state=True`` asked for a remote kernel that cannot keep state is refused when the
session is created, naming why; left at its default, the same kernel runs without state.

Two kernels on a real jupyter_server cannot keep state: Bash (not IPython: nothing to
save a namespace with) and an IPython kernel whose folder cannot be written (it runs in
``/proc``, where no one, root included, can make a file).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_servers import Server, kernels_on, run_server

from jupyter_exec import AsyncSession, InvalidArgument

pytestmark = pytest.mark.timeout(180)

NO_FOLDER = (
    "import os; os.chdir('/proc'); from ipykernel import kernelapp; kernelapp.launch_new_instance()"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("refusal")
    spec = base / "data" / "kernels" / "nofolder"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-c", NO_FOLDER, "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "No folder", "language": "python"})
    )
    env = {"JUPYTER_PATH": str(base / "data")}
    with run_server("jupyter_server", base / "server", env=env) as running:
        yield running


def remote(server: Server, tmp_path: Path, kernel_name: str, **kwargs: object) -> AsyncSession:
    return AsyncSession(
        work_dir=tmp_path,
        backend="remote",
        url=server.url,
        token=server.token,
        kernel_name=kernel_name,
        timeout=60,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("kernel_name", "reason"),
    [
        ("bash", "it runs 'bash', and only an IPython kernel's namespace is saved"),
        ("nofolder", "No such file or directory"),
    ],
)
async def test_save_state_asked_of_a_kernel_that_cannot_keep_it_is_refused_at_creation(
    server: Server, tmp_path: Path, kernel_name: str, reason: str
) -> None:
    before = set(kernels_on(server))
    session = remote(server, tmp_path, kernel_name, save_state=True)
    with pytest.raises(InvalidArgument) as refused:
        await session.start()
    message = str(refused.value)
    assert f"save_state=True, but the remote kernel {kernel_name!r} cannot keep its state" in (
        message
    )
    assert reason in message
    assert set(kernels_on(server)) == before  # the kernel it started is gone


@pytest.mark.parametrize(("kernel_name", "code", "out"), [("bash", "echo $((6 * 7))", "42\n")])
async def test_by_default_the_same_kernel_runs_without_state_silently(
    server: Server, tmp_path: Path, kernel_name: str, code: str, out: str
) -> None:
    async with remote(server, tmp_path / "bash", kernel_name) as session:
        ran = await session.execute(code)
        assert ran.ok, ran.error
        assert ran.stdout == out
    async with remote(server, tmp_path / "nofolder", "nofolder") as session:
        ran = await session.execute("x = 6 * 7\nx")
        assert ran.ok, ran.error
        assert ran.text == "42"


async def test_save_state_asked_of_a_kernel_that_can_keep_it_is_set_up_at_creation(
    server: Server, tmp_path: Path
) -> None:
    async with remote(server, tmp_path, "python3", save_state=True) as session:
        generations = session._state.durable.generations
        assert generations.installed is session._kernel  # before any cell
        assert (await session.execute("kept = 41")).ok
        await session.flush()
        died = await session.execute("import os; os._exit(1)")
        assert died.recovered is not None, died.error
        assert (await session.execute("kept + 1")).text == "42"
