"""The host side of the lent-folder attacks, run as one (non-root) user in a process of its own.

``python tests/attacks/lent_scenario.py CASE BASE`` runs CASE with every folder under BASE and
prints one JSON line: what the kernel saw (its uid), what the host answered after the kernel
swapped a folder for a link (``refused``: the error's text), and what the folder outside holds
(``outside``: it must stay empty). ``test_lent_folder_links`` starts it as uid 4242 when the
test runs as root, so the host process, and with it the Docker kernel, runs as that user: the
developer-laptop case, where a link the kernel plants is owned by the host's own uid.

Cases:

* ``e2b``: the real E2B SDK against a Docker-backed server; a context in ``/home/user/ctx``;
  the default context's kernel swaps ``ctx`` for a link to ``BASE/outside``; the context runs
  another cell (its notebook and state signatures are host writes into ``ctx``).
* ``nested``: two Docker sessions, the second's work dir inside the first's; the first's kernel
  swaps the second's folder for a link; the second runs another cell.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
for folder in (REPO, REPO / "tests" / "e2b"):
    sys.path.insert(0, str(folder))


def _swap(folder: str, outside: Path) -> str:
    """Kernel code: put ``folder`` aside and plant a link to ``outside`` in its place."""
    return (
        f"import os; os.rename({folder!r}, {folder + '.real'!r}); "
        f"os.symlink({str(outside)!r}, {folder!r}); os.getuid()"
    )


def e2b(base: Path) -> dict[str, Any]:
    from e2b import SandboxException
    from e2b_code_interpreter import Sandbox
    from e2b_server_helpers import API_KEY, run_server

    from jupyter_exec.e2b import E2BConfig

    outside = base / "outside"
    outside.mkdir()
    root = base / "e2b"
    root.mkdir()
    config = E2BConfig(root_dir=root, ports=(0,), debug=True, api_key=API_KEY,
                       session_options={"backend": "docker"})  # fmt: skip
    server = run_server(config)
    running = next(server)
    found: dict[str, Any] = {"host_uid": os.geteuid()}
    try:
        os.environ.update(E2B_DEBUG="true", E2B_SANDBOX_URL=running.url, E2B_API_KEY=API_KEY)
        sandbox = Sandbox.create()
        sandbox.files.make_dir("/home/user/ctx")
        context = sandbox.create_code_context(cwd="/home/user/ctx")
        found["before"] = sandbox.run_code("x = 1; x", context=context).text
        swapped = sandbox.run_code(_swap("ctx", outside))
        found["kernel_uid"] = swapped.text
        found["swap_error"] = None if swapped.error is None else swapped.error.value
        try:
            after = sandbox.run_code("y = 2; y", context=context)
            found["refused"] = (
                "" if after.error is None else f"{after.error.name}: {after.error.value}"
            )
        except SandboxException as exc:
            found["refused"] = str(exc)
        found["files_write"] = ""
        try:  # a file written through the swapped folder is refused too
            sandbox.files.write("/home/user/ctx/planted.txt", "x")
        except SandboxException as exc:
            found["files_write"] = str(exc)
        sandbox.kill()
    finally:
        next(server, None)
    found["outside"] = sorted(os.listdir(outside))
    return found


async def nested(base: Path) -> dict[str, Any]:
    from jupyter_exec import AsyncSession, JupyterExecError

    outside = base / "outside"
    first_dir, second_dir = base / "first", base / "first" / "second"
    for folder in (outside, first_dir, second_dir):
        folder.mkdir()
    found: dict[str, Any] = {"host_uid": os.geteuid()}
    first = AsyncSession(work_dir=first_dir, name="first", backend="docker")
    second = AsyncSession(work_dir=second_dir, name="second", backend="docker")
    await first.start()
    try:
        await second.start()
        try:
            found["before"] = (await second.execute("x = 1; x")).text
            swapped = await first.execute(_swap("second", outside))
            found["kernel_uid"] = swapped.text
            found["swap_error"] = swapped.error
            try:
                await second.execute("y = 2; y")
                found["refused"] = ""
            except JupyterExecError as exc:  # the record cannot be saved: said, not done
                found["refused"] = f"{type(exc).__name__}: {exc}"
        finally:
            await second.close()
    finally:
        await first.close()
    found["outside"] = sorted(os.listdir(outside))
    return found


def main() -> None:
    case, base = sys.argv[1], Path(sys.argv[2])
    found = e2b(base) if case == "e2b" else asyncio.run(nested(base))
    print(json.dumps(found, default=str))


if __name__ == "__main__":
    main()
