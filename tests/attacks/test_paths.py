"""Attacks on the path boundary, as a kernel that plants links, FIFOs and huge files would make.

Each test plants what a hostile kernel can write in its own folder (a symbolic link to ``/``
or out of the work dir, a FIFO, a sparse 1 TB file) and then uses the host-side surface that
reads or resolves paths there: the MCP tools, resume, replay, the CLI. Each attack must fail
with a clear refusal of our own and leave the asset untouched. The Docker-kernel and E2B
attacks are in ``test_paths_docker.py``.

The last test holds the rule that makes these hold for the next surface too: nothing in the
package resolves a path (``.resolve()``, ``os.path.realpath``) except the one resolver,
:mod:`jupyter_exec.boundary.paths`, and a short list of paths of trusted origin.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import errno
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from cli_helpers import run_cli

from jupyter_exec import NotebookError, Session, StorageError, WorkDirError
from jupyter_exec.boundary.paths import inside, pin_dir, read_regular, write_bytes

PACKAGE = Path(__file__).parents[2] / "jupyter_exec"
SECRET = "TOPSECRET-host-only-4711"
TERABYTE = 1 << 40

# Paths the package may resolve, each of trusted origin (never a client's, a notebook's or a
# kernel-writable folder's): (module, enclosing function), with why.
TRUSTED_RESOLVES = {
    # The server's own configured root_dir: links above it are the administrator's.
    ("server/paths.py", "__init__"),
    # The package's own kernelspec folder, next to this source.
    ("docker/resources.py", "kernels_dir"),
    # A Dockerfile the person names on the command line, to build an image from.
    ("docker/image.py", "_build_python_image"),
    # Compared with a local kernel's /proc/<pid>/fd links (real paths); nothing is opened by it.
    ("state/branching.py", "writing_files"),
    # A local sandbox's own folder (the server made it), compared with each process's
    # /proc/<pid>/cwd link (a real path) to count what works in it; nothing is opened by it.
    ("e2b/metrics.py", "local_sample"),
    # Is the host's checkpoint key inside a folder a kernel sees? A comparison of real paths,
    # so that a link cannot hide the key from it; nothing is opened through the result.
    ("boundary/trust.py", "check_outside"),
    # Runs inside the kernel, which is the attacker's side of the boundary already: it only
    # tells which opened files are under the work dir; the host hashes them again through
    # boundary.paths (notebook/envdiff.py) and never trusts the kernel's paths.
    ("inkernel/env.py", "__init__"),
}


def _notebook_with(text: str, marker: Path) -> str:
    """A notebook whose one cell prints ``text`` and, if it ever runs, creates ``marker``."""
    nb = nbformat.v4.new_notebook()
    nb.cells.append(
        nbformat.v4.new_code_cell(f"print({text!r}); open({str(marker)!r}, 'w').write('ran')")
    )
    return nbformat.writes(nb)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside every work dir, holding what the attacker wants."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET)
    (folder / "secret.ipynb").write_text(_notebook_with(SECRET, tmp_path / "ran-outside"))
    return folder


# -- the MCP tools (over the official SDK's stdio client) ------------------------------------


@contextlib.asynccontextmanager
async def _mcp(work_root: Path) -> AsyncIterator[Any]:
    mcp = pytest.importorskip("mcp")
    params = mcp.StdioServerParameters(
        command=sys.executable,
        args=["-m", "jupyter_exec.mcp", "--work-dir", str(work_root), "--timeout", "60"],
    )
    async with (
        mcp.stdio_client(params) as streams,
        mcp.ClientSession(streams[0], streams[1]) as client,
    ):
        await client.initialize()
        yield client


def _texts(result: Any) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def _is_error(result: Any) -> bool:
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


@pytest.mark.timeout(240)
async def test_f8_mcp_tools_refuse_links_and_fifos_planted_by_the_kernel(
    tmp_path: Path, outside: Path
) -> None:
    root = tmp_path / "mcp"
    async with _mcp(root) as client:
        plant = (
            "import os\n"
            f"os.symlink({str(outside)!r}, 'esc')\n"
            f"os.symlink({str(outside / 'secret.txt')!r}, 'leak.txt')\n"
            "os.mkdir('sub')\n"
            f"os.symlink({str(outside)!r}, 'sub/inner')\n"
            "os.mkfifo('pipe.txt')\n"
            "print('planted')"
        )
        planted = await client.call_tool("execute_code", {"code": plant, "session": "k"})
        assert "planted" in _texts(planted)

        for path in ("esc/secret.txt", "leak.txt", "sub/inner/secret.txt"):
            started = time.monotonic()
            result = await client.call_tool("read_file", {"session": "k", "path": path})
            assert _is_error(result), path
            assert SECRET not in _texts(result)
            assert "symbolic link" in _texts(result), _texts(result)
            assert time.monotonic() - started < 30
        fifo = await client.call_tool("read_file", {"session": "k", "path": "pipe.txt"})
        assert _is_error(fifo)  # answered at once: a FIFO is never opened
        assert "not a regular file" in _texts(fifo)

        listed = await client.call_tool("list_files", {"session": "k", "path": "esc"})
        assert _is_error(listed)
        assert "symbolic link" in _texts(listed)
        everything = _texts(await client.call_tool("list_files", {"session": "k"}))
        assert "secret" not in everything  # links are not entered while walking
        assert "k.ipynb" in everything

        # The kernel replaces its own notebook with a link to a notebook outside.
        swap = (
            f"os.rename('k.ipynb', 'old.ipynb'); os.symlink({str(outside / 'secret.ipynb')!r},"
            " 'k.ipynb')"
        )
        await client.call_tool("execute_code", {"code": swap, "session": "k"})
        notebook = await client.call_tool("read_notebook", {"session": "k"})
        assert _is_error(notebook)
        assert SECRET not in _texts(notebook)
        assert "symbolic link" in _texts(notebook), _texts(notebook)
    assert (outside / "secret.txt").read_text() == SECRET
    assert json.loads((outside / "secret.ipynb").read_text())["cells"][0]["outputs"] == []


@pytest.mark.timeout(240)
async def test_f8_mcp_read_file_is_bounded_before_reading(tmp_path: Path) -> None:
    root = tmp_path / "mcp"
    async with _mcp(root) as client:
        plant = (
            "with open('huge.txt', 'wb') as f:\n"
            "    f.write(b'head of the file\\n')\n"
            f"    f.truncate({TERABYTE})\n"  # sparse: no disk, 1 TB to a reader
            "print('planted')"
        )
        assert "planted" in _texts(
            await client.call_tool("execute_code", {"code": plant, "session": "big"})
        )
        started = time.monotonic()
        result = await client.call_tool("read_file", {"session": "big", "path": "huge.txt"})
        assert not _is_error(result), _texts(result)  # read whole, it would be a MemoryError
        shown = _texts(result)
        assert shown.startswith("head of the file")
        assert f"{TERABYTE:,} bytes" in shown
        assert time.monotonic() - started < 30
        assert "1,099,511,627,776 bytes" in _texts(
            await client.call_tool("list_files", {"session": "big"})
        )


# -- resume and replay -----------------------------------------------------------------------


def test_f8_resume_refuses_a_notebook_the_kernel_swapped_for_a_link(
    tmp_path: Path, outside: Path
) -> None:
    work = tmp_path / "work"
    session = Session(work_dir=work, name="analysis", timeout=60)
    try:
        session.execute("x = 1")
        with pytest.raises(NotebookError, match="symbolic link"):  # its record is not written
            session.execute(
                "import os\nos.rename('analysis.ipynb', 'kept.ipynb')\n"
                f"os.symlink({str(outside / 'secret.ipynb')!r}, 'analysis.ipynb')"
            )
    finally:
        with contextlib.suppress(NotebookError):
            session.close()
    assert (work / "analysis.ipynb").is_symlink()
    with pytest.raises(NotebookError, match="symbolic link"):
        Session.resume(work / "analysis.ipynb")
    assert not (tmp_path / "ran-outside").exists()  # refused before any cell of it ran
    assert json.loads((outside / "secret.ipynb").read_text())["cells"][0]["outputs"] == []
    assert sorted(p.name for p in outside.iterdir()) == ["secret.ipynb", "secret.txt"]


def test_f8_replay_of_a_fifo_returns_promptly_with_a_clear_error(tmp_path: Path) -> None:
    fifo = tmp_path / "x.ipynb"
    os.mkfifo(fifo)
    started = time.monotonic()
    done = run_cli("replay", str(fifo), timeout=60)  # a hang fails here, with TimeoutExpired
    assert time.monotonic() - started < 60
    assert done.returncode != 0
    assert "not a regular file" in done.stderr, done.stderr
    assert "internal error" not in done.stderr
    assert "Traceback" not in done.stderr


def test_f8_reads_never_open_a_fifo_or_a_device_and_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(StorageError, match="not a regular file") as refused:
            read_regular(path)
        assert refused.value.errno == errno.EINVAL
    huge = tmp_path / "huge"
    with huge.open("wb") as f:
        f.truncate(TERABYTE)
    with pytest.raises(StorageError, match="JUPYTER_EXEC_MAX_READ_MB") as too_big:
        read_regular(huge)
    assert too_big.value.errno == errno.EFBIG
    small = tmp_path / "small"
    small.write_bytes(b"x" * 3000)
    monkeypatch.setenv("JUPYTER_EXEC_MAX_READ_MB", "0.001")  # 1,048 bytes
    with pytest.raises(StorageError, match="1,048-byte limit"):
        read_regular(small)


# -- the resolver itself ---------------------------------------------------------------------


def test_f1_the_resolver_follows_no_link_a_kernel_can_plant(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "box").mkdir(parents=True)
    (root / "box" / "esc").symlink_to("/")
    if os.geteuid() == 0:
        os.lchown(root / "box" / "esc", 65532, 65532)  # as the kernel's uid made it
    for relative in ("box/esc/tmp/x", "box/esc/etc", "box/esc"):
        with pytest.raises(StorageError, match="symbolic link") as refused:
            inside(root, relative, create=True)
        assert refused.value.errno == errno.ELOOP
        with pytest.raises(StorageError, match="symbolic link"):
            pin_dir(root / relative)
    with pytest.raises(WorkDirError):
        inside(root, "box/../../etc")
    # A link only root can have made (root's, in a folder no one else writes) is followed.
    (root / "admin").mkdir(mode=0o755)
    (root / "admin" / "data").symlink_to(root / "box")
    if os.geteuid() == 0:
        with pin_dir(root / "admin" / "data") as pinned:
            assert pinned.path == root / "box"
    else:  # ours, and we are not root: a kernel running as us could have made it
        with pytest.raises(StorageError, match="symbolic link"):
            pin_dir(root / "admin" / "data")


def test_f1_a_work_dir_reached_through_a_kernel_link_is_never_a_trusted_root(
    tmp_path: Path,
) -> None:
    """Another session's folder swapped for a link: host writes there refuse, go nowhere."""
    victim = tmp_path / "victim"
    victim.mkdir()
    lent = tmp_path / "sandbox"  # a folder a kernel may write (group-writable, as a loan shows)
    lent.mkdir()
    os.chmod(lent, 0o775)
    (lent / "sub").symlink_to(victim)
    with pytest.raises(StorageError, match="symbolic link") as refused:
        write_bytes(lent / "sub", "s.ipynb", b"{}")
    assert refused.value.errno == errno.ELOOP
    assert list(victim.iterdir()) == []
    # A link the person made in a folder only they can write still leads to their work dir.
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    (mine / "project").symlink_to(victim)
    write_bytes(mine / "project", "s.ipynb", b"{}")
    assert (victim / "s.ipynb").read_bytes() == b"{}"


def _resolving_calls(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, call, enclosing function) of every ``.resolve()``/``realpath`` call in ``tree``."""
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = function
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = child.name
            if isinstance(child, ast.Call) and isinstance(child.func, (ast.Attribute, ast.Name)):
                called = child.func.attr if isinstance(child.func, ast.Attribute) else child.func.id
                # Path.resolve() takes no argument (dict-like .resolve(key) is something else)
                if called == "realpath" or (called == "resolve" and not child.args):
                    found.append((child.lineno, called, function))
            visit(child, name)

    visit(tree, "<module>")
    return found


def test_f1_nothing_but_the_resolver_resolves_a_path() -> None:
    offending: list[str] = []
    allowed_seen: set[tuple[str, str]] = set()
    for source in sorted(PACKAGE.rglob("*.py")):
        module = source.relative_to(PACKAGE).as_posix()
        if module == "boundary/paths.py":
            continue  # the resolver
        for line, called, function in _resolving_calls(ast.parse(source.read_text())):
            if (module, function) in TRUSTED_RESOLVES:
                allowed_seen.add((module, function))
                continue
            offending.append(f"{module}:{line} {called}() in {function}")
    assert not offending, (
        "paths must be reached through jupyter_exec.boundary.paths (inside, pin_dir, Folder), "
        "never resolved: " + "; ".join(offending)
    )
    assert allowed_seen == TRUSTED_RESOLVES, "an allow-list entry is stale: remove it"
    # The scan itself sees what it is after (it would pass vacuously otherwise).
    sample = ast.parse("import os\nos.path.realpath(p)\nPath(p).resolve()\nd.resolve(key)\n")
    assert [c[1] for c in _resolving_calls(sample)] == ["realpath", "resolve"]


# -- E2B downloads and uploads (a local debug sandbox: the files are what matter) -------------


@pytest.fixture(scope="module")
def e2b_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("e2b_code_interpreter")
    sys.path.insert(0, str(Path(__file__).parents[1] / "e2b"))  # the E2B tests' helpers
    from e2b_server_helpers import API_KEY, run_server

    from jupyter_exec.e2b import E2BConfig

    root = tmp_path_factory.mktemp("e2b-files-attack")
    yield from run_server(E2BConfig(root_dir=root, ports=(0,), debug=True, api_key=API_KEY))


@pytest.fixture
def e2b_sandbox(e2b_local: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    from e2b_code_interpreter import Sandbox

    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", e2b_local.url)
    return Sandbox.create()


def _rss() -> int:
    """This process's resident memory in bytes (the E2B server runs in a thread of it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_f8_e2b_download_of_a_sparse_terabyte_is_streamed_in_bounded_memory(
    e2b_local: Any, e2b_sandbox: Any
) -> None:
    made = e2b_sandbox.run_code(
        f"f = open('huge.bin', 'wb'); f.write(b'start'); f.truncate({TERABYTE}); f.close()\n"
        "import os; os.path.getsize('huge.bin')"
    )
    assert made.text == str(TERABYTE), made
    before = _rss()
    stream = e2b_sandbox.files.read("huge.bin", format="stream")
    received = 0
    first = b""
    try:
        for chunk in stream:
            first = first or chunk
            received += len(chunk)
            if received >= 96 * 1024 * 1024:
                break
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    assert first.startswith(b"start")
    assert received >= 96 * 1024 * 1024
    assert _rss() - before < 64 * 1024 * 1024  # a few chunks, not the file (nor 96 MB)
    # The server is fine, and a FIFO or a link is refused rather than opened.
    e2b_sandbox.run_code(
        f"import os; os.mkfifo('pipe'); os.symlink({str(Path('/etc/hostname'))!r}, 'host')"
    )
    from e2b import InvalidArgumentException

    for name in ("pipe", "host"):
        started = time.monotonic()
        with pytest.raises(InvalidArgumentException):
            e2b_sandbox.files.read(name)
        assert time.monotonic() - started < 30


def test_f8_e2b_multipart_upload_writes_the_requested_path_only(
    e2b_local: Any, e2b_sandbox: Any
) -> None:
    import httpx

    home = Path(e2b_local.root, "debug_sandbox_id")
    url = f"{e2b_local.url}/files"
    headers = {"E2b-Sandbox-Id": e2b_sandbox.sandbox_id}
    one = httpx.post(
        url,
        params={"path": "/home/user/asked.txt"},
        files={"file": ("elsewhere.txt", b"payload", "application/octet-stream")},
        headers=headers,
        timeout=30,
    )
    assert one.status_code == 200, one.text
    assert (home / "asked.txt").read_bytes() == b"payload"
    assert not (home / "elsewhere.txt").exists()
    two = httpx.post(
        url,
        params={"path": "/home/user/asked.txt"},
        files=[
            ("file", ("a.txt", b"first", "application/octet-stream")),
            ("file", ("b.txt", b"second", "application/octet-stream")),
        ],
        headers=headers,
        timeout=30,
    )
    assert two.status_code == 400, two.text
    assert "one path" in two.json()["message"]
    assert not (home / "a.txt").exists()
    assert not (home / "b.txt").exists()
    assert (home / "asked.txt").read_bytes() == b"payload"


# -- REST: what a kernel planted in its work dir is a 4xx with the reason, never a 500/507 -------


def test_f10_rest_refusals_of_planted_links_are_4xx(tmp_path: Path, outside: Path) -> None:
    import requests

    sys.path.insert(0, str(Path(__file__).parents[1] / "server"))  # the REST tests' helpers
    from server_helpers import JupyterProcess, tiny_png

    png = base64.b64encode(tiny_png()).decode()
    with JupyterProcess(tmp_path / "jp") as server:
        api = f"{server.url}/api/exec"
        made = requests.post(
            f"{api}/sessions", json={"name": "rec", "work_dir": "w"}, headers=server.headers,
            timeout=120,
        )  # fmt: skip
        assert made.status_code == 201, made.text
        session = f"{api}/sessions/{made.json()['id']}"
        try:
            plants = {
                # its output folder swapped for a link out: the image is not written there
                "rec_files": (
                    f"import os, base64; os.symlink({str(outside)!r}, 'rec_files')\n"
                    "from IPython.display import Image, display\n"
                    f"display(Image(data=base64.b64decode({png!r})))",
                    400,
                    "StorageError",
                ),
                # its notebook swapped for a link to a notebook outside: not overwritten
                "rec.ipynb": (
                    f"import os; os.rename('rec.ipynb', 'kept.ipynb')\n"
                    f"os.symlink({str(outside / 'secret.ipynb')!r}, 'rec.ipynb')",
                    409,
                    "NotebookError",
                ),
            }
            for what, (code, status, error) in plants.items():
                answer = requests.post(
                    f"{session}/execute", json={"code": code}, headers=server.headers, timeout=120
                )
                assert answer.status_code == status, (what, answer.text)
                assert answer.json()["error"] == error, what
                assert "symbolic link" in answer.json()["message"], what
        finally:
            requests.delete(session, headers=server.headers, timeout=120)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.ipynb", "secret.txt"]
    assert json.loads((outside / "secret.ipynb").read_text())["cells"][0]["outputs"] == []
