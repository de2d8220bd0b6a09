"""Output floods: host memory stays bounded and nothing is lost (the in-kernel stream guard).

Host memory is measured in a child process of its own (``ru_maxrss`` is a
peak, so it must belong to a process that did nothing but this), with a bound
far from what was measured (a few MB) and far below what an unguarded host
needs (hundreds of MB for these sizes), so the test is robust under load and
still fails if the guard stops working.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_exec import Session
from jupyter_exec.engine import guard
from jupyter_exec.engine.kernel import start_kernel
from jupyter_exec.engine.outputs import DEFAULT_MAX_STREAM_CHARS

MiB = 1 << 20
HOST_BOUND = 200 * MiB

_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from jupyter_exec import Session

    work_dir, code = sys.argv[1], sys.argv[2]
    with Session(work_dir=work_dir, name="flood", timeout=300) as s:
        s.execute("x = 1")
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        e = s.execute(code)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        files = {m: str(p) for r in e.results for m, p in r.files.items()}
        print(json.dumps({"status": e.status, "growth": peak - base, "files": files,
                          "spilled": [str(p) for p in e.spilled], "stdout": e.stdout[-200:]}))
    """
)


def _flood_in_child(work_dir: Path, code: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(work_dir), code],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(MiB):
            digest.update(block)
    return digest.hexdigest()


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        ("one line", "print('x' * (256 << 20), end='')"),
        ("many lines", "for _ in range(4096): print('y' * 65535)"),
    ],
)
def test_a_256_mib_flood_costs_the_host_little_and_loses_nothing(
    tmp_path: Path, kind: str, code: str
) -> None:
    result = _flood_in_child(tmp_path, code)
    assert result["status"] == "ok"
    assert isinstance(result["growth"], int)
    assert result["growth"] < HOST_BOUND, result
    spilled = result["spilled"]
    assert isinstance(spilled, list)
    assert len(spilled) == 1
    assert Path(spilled[0]).stat().st_size == 256 << 20
    nb = json.loads((tmp_path / "flood.ipynb").read_text())
    (stream,) = [o for o in nb["cells"][-1]["outputs"] if o["output_type"] == "stream"]
    text = "".join(stream["text"])
    assert len(text) < DEFAULT_MAX_STREAM_CHARS * 1.1
    assert "268,435,456 characters in all" in text  # the marker counts what the kernel kept back


def test_the_spill_file_is_exactly_what_was_printed(session: Session) -> None:
    code = textwrap.dedent(
        """
        import hashlib, sys
        h = {"stdout": hashlib.sha256(), "stderr": hashlib.sha256()}
        for i in range(60000):
            for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
                line = f"{name} {i} é€😀\\n"
                stream.write(line)
                h[name].update(line.encode())
        stream.write("no newline at the end")
        h["stderr"].update(b"no newline at the end")
        digests = {k: v.hexdigest() for k, v in h.items()}
        """
    )
    e = session.execute(code)
    assert e.status == "ok"
    assert e.truncated
    digests = session.execute("print(digests)", timeout=30).stdout
    by_name = {p.name.split("-")[-1].removesuffix(".txt"): p for p in e.spilled}
    assert set(by_name) == {"stdout", "stderr"}
    for name, path in by_name.items():
        assert _sha256(path) in digests, name
    assert e.stdout.endswith("stdout 59999 é€😀\n")
    assert e.stderr.endswith("no newline at the end")
    leftovers = [p.name for p in session.files_dir.iterdir() if p.name.endswith(".rest")]
    assert leftovers == []


def test_a_flood_cut_by_a_timeout_keeps_what_was_printed(
    fresh_session: Callable[..., Session],
) -> None:
    s = fresh_session(timeout=60)
    e = s.execute("import time\nprint('a' * 3_000_000)\ntime.sleep(60)", timeout=3)
    assert e.status == "timeout"
    (spilled,) = e.spilled
    assert spilled.stat().st_size == 3_000_001
    assert s.execute("print(1 + 1)").stdout == "2\n"  # the guard is per cell: the next is whole


def test_the_guard_leaves_no_names_behind(session: Session) -> None:
    session.execute("pass")  # the guard is installed by now
    names = session.execute("print(sorted(k for k in globals() if not k.startswith('_')))")
    assert "guard" not in names.stdout, names.stdout
    assert "install" not in names.stdout, names.stdout


async def test_other_clients_cells_pass_whole(tmp_path: Path) -> None:
    """A request without our metadata (a person in JupyterLab, any other client) is untouched."""
    handle = await start_kernel(cwd=tmp_path)
    try:
        assert await guard.install(handle, tmp_path)
        msg_id = handle.kc.execute("print('p' * 2_000_000, end='')")
        received = 0
        while True:
            msg = await handle.iopub.get(60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                received += len(msg["content"]["text"])
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        assert received == 2_000_000
        assert not list(tmp_path.rglob("*.rest"))
    finally:
        await handle.km.shutdown_kernel(now=True)
        handle.kc.stop_channels()


def test_a_link_swapped_in_for_the_kernels_file_is_not_followed(
    fresh_session: Callable[..., Session], tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET " * 1000)
    s = fresh_session()
    code = textwrap.dedent(
        f"""
        import os
        print('z' * 1_000_000)
        folder = {str(s.files_dir)!r}
        for name in os.listdir(folder):
            if name.endswith('.rest'):
                os.unlink(os.path.join(folder, name))
                os.symlink({str(secret)!r}, os.path.join(folder, name))
        """
    )
    e = s.execute(code)
    assert e.status == "ok", e.error
    for path in e.spilled:
        assert "TOP SECRET" not in path.read_text()
    assert secret.read_text() == "TOP SECRET " * 1000
    assert not [p for p in s.files_dir.iterdir() if p.name.endswith(".rest") and p.is_symlink()]


def test_a_100_mib_image_is_saved_by_the_kernel_and_shown_from_its_file(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import hashlib, os
        from IPython.display import Image, display
        png = b"\\x89PNG\\r\\n\\x1a\\n" + os.urandom(100 << 20)
        display(Image(data=png, format="png"))
        print(hashlib.sha256(png).hexdigest())
        """
    )
    result = _flood_in_child(tmp_path, code)
    assert result["status"] == "ok"
    assert isinstance(result["growth"], int)
    assert result["growth"] < HOST_BOUND, result
    files = result["files"]
    assert isinstance(files, dict)
    image = Path(files["image/png"])
    assert image.stat().st_size == (100 << 20) + 8
    assert _sha256(image) in str(result["stdout"])
    notebook = tmp_path / "flood.ipynb"
    assert notebook.stat().st_size < 1 << 20
    (display,) = [
        o
        for o in json.loads(notebook.read_text())["cells"][-1]["outputs"]
        if o["output_type"] == "display_data"
    ]
    html = "".join(display["data"]["text/html"])
    assert f'src="{image.relative_to(tmp_path).as_posix()}"' in html  # relative to the notebook
    assert "image/png" not in display["data"]


def test_saved_file_claims_from_the_kernel_are_checked(session: Session, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    code = textwrap.dedent(
        f"""
        import os
        from IPython.display import publish_display_data
        prefix = get_ipython()._jupyter_exec_guard.large["prefix"]
        os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)  # made on first use
        os.symlink({str(secret)!r}, prefix + "-1.png")
        for claim in (prefix + "-1.png", "../" + {secret.name!r}, {str(secret)!r}):
            publish_display_data({{"text/plain": "x"}},
                                 {{"jupyter_exec": {{"saved": {{"image/png": claim}}}}}})
        """
    )
    e = session.execute(code)
    assert e.status == "ok", e.error
    assert len(e.results) == 3
    for result in e.results:
        assert "image/png" not in result.files
    assert secret.read_text() == "TOP SECRET"
