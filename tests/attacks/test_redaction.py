"""Finding 7 (a secret in a kernel reaches every stream) and finding 10's deep JSON, as an attacker.

The attacker is the kernel: it holds a network policy's secret (an allowed host echoed the
header back; here it is handed over reversed, so the cell's source never holds it) and prints
it whole, one character per flush, split across two writes of stderr, base64- and URL-encoded,
in a display (as a value and as a key) and in an exception. Every way out of the process is
read: the Python API's ``on_output`` events, Execution, notebook and spilled stream file; REST
server-sent events and the live cell in the shared document of a collaboration room (the
room's every update replayed, so a secret shown for a moment counts); the real E2B SDK's
``run_code`` callbacks and result, and a command's beside it; the real MCP client's tool
result. None may hold the secret
in any of those forms, and each must show that something was redacted.

Deep JSON: a real kernel displays JSON nested 100,000 levels deep (and metadata 500 deep)
through ``IPython.display`` with its own session's packer; the cell gets a note naming the
limit, the next cell runs, and the notebook on disk is valid nbformat with every cell.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from pytest_jupyter import jupyter_server as _plugin
from server_helpers import install_docker_kernelspec
from traitlets.config import Config

from jupyter_exec import AsyncSession, NetworkPolicy
from jupyter_exec.engine.outputs import MAX_OUTPUT_DEPTH
from tests.conftest import docker_engine

_FixtureType = type(pytest.fixture(lambda: None))
globals().update(  # pytest-jupyter's real servers, as tests/server/conftest.py takes them
    {name: obj for name, obj in vars(_plugin).items() if isinstance(obj, _FixtureType)}
)

TEST_IMAGE = os.environ.get("JX_TEST_IMAGE", "jupyter-exec/kernel:latest")
SECRET = "Bearer jx-attack-5e1f0c-token"
TOKEN = SECRET.removeprefix("Bearer ")
REDACTED = "[secret redacted]"
POLICY = {"allow": ["api.test"], "secrets": {"api.test": {"Authorization": SECRET}}}

FORMS = {
    "value": SECRET,
    "token": TOKEN,
    "base64": base64.b64encode(SECRET.encode()).decode(),
    "base64 of the token": base64.b64encode(TOKEN.encode()).decode(),
    "url": urllib.parse.quote(SECRET, safe=""),
    "url+": urllib.parse.quote_plus(SECRET),
}

# The kernel's side of the attack. The per-character writes flush each one (ipykernel then
# sends each as a message of its own, though nothing here counts on how output is chunked).
LEAK = (
    "import base64, sys, urllib.parse\n"
    f"secret = {SECRET[::-1]!r}[::-1]\n"
    "print('whole:', secret)\n"
    "for ch in secret:\n"
    "    sys.stdout.write(ch); sys.stdout.flush()\n"
    "print()\n"
    "sys.stderr.write(secret[:11]); sys.stderr.flush(); sys.stderr.write(secret[11:] + '\\n')\n"
    "print('b64:', base64.b64encode(secret.encode()).decode())\n"
    "print('b64 token:', base64.b64encode(secret.split()[1].encode()).decode())\n"
    "print('url:', urllib.parse.quote(secret, safe=''), urllib.parse.quote_plus(secret))\n"
    "display({'text/plain': 'shown ' + secret, 'application/json': {secret: [secret]}},"
    " raw=True)\n"
    "print('ends with the start of it:', secret[:12], end='', flush=True)\n"
)
RAISE = f"raise ValueError({SECRET[::-1]!r}[::-1])"


def assert_clean(what: str, text: str, *, redacted: int = 1) -> None:
    """``text`` holds no form of the secret, and at least ``redacted`` redaction marks."""
    for form, value in FORMS.items():
        assert value not in text, f"the secret ({form}) reached {what}"
    assert text.count(REDACTED) >= redacted, f"nothing was redacted in {what}: {text[:2000]}"


def assert_streams_clean(what: str, events: list[dict[str, Any]]) -> None:
    """Each stream's events, put together as a client shows them, hold no form of the secret."""
    for name in ("stdout", "stderr"):
        text = "".join(e["text"] for e in events if e.get("name") == name and "text" in e)
        assert_clean(f"{name} of {what}", text, redacted=1)


def docker_available() -> None:

    docker_engine().close()


# -- the Python API: events, Execution, notebook, spilled text ---------------------------------


@pytest.mark.docker
async def test_f7_python_api_events_execution_notebook_and_spill(
    kernel_image: str, tmp_path: Path
) -> None:
    events: list[dict[str, Any]] = []
    async with AsyncSession(
        work_dir=tmp_path / "w",
        backend="docker",
        docker={"image": kernel_image},
        network=NetworkPolicy(**POLICY),  # type: ignore[arg-type]
        max_output_chars=4000,
    ) as session:
        # a flood past the budget: the full text goes to a spill file, written as it comes
        # (first: the kernel's own spill cannot yet write where a display's file went)
        flood = await session.execute(
            LEAK.split("print('whole")[0] + "for i in range(300):\n    print(i, secret)\n"
        )
        assert flood.truncated
        assert flood.spilled
        leaked = await session.execute(LEAK, on_output=events.append)
        assert leaked.status == "ok", leaked.error
        raised = await session.execute(RAISE, on_output=events.append)
        assert raised.error is not None
        assert raised.error.ename == "ValueError"
        notebook = Path(session.notebook_path or "").read_text(encoding="utf-8")

    streamed = json.dumps(events)
    assert_clean("the on_output events", streamed, redacted=10)
    assert_streams_clean("the on_output events", events)
    # The text held back at the end (the start of the secret that never came) was sent last.
    assert "ends with the start of it: Bearer jx-at" in "".join(
        e.get("text", "") for e in events if e.get("name") == "stdout"
    )
    assert_clean("the Execution", json.dumps(leaked.to_dict()), redacted=9)
    assert leaked.stdout.count(REDACTED) == 6
    assert leaked.stderr == f"{REDACTED}\n"
    assert_clean("the error", json.dumps(raised.to_dict()), redacted=2)
    assert_clean("the notebook", notebook, redacted=20)
    spilled = "".join(p.read_text(encoding="utf-8") for p in flood.spilled)
    assert_clean("the spilled stream", spilled, redacted=300)


# -- REST: server-sent events and the live cell of a collaboration room -------------------------


@pytest.fixture
async def jp_asyncio_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


@pytest.fixture
def jp_server_config() -> Config:
    return Config(
        {
            "ServerApp": {
                "jpserver_extensions": {
                    "jupyter_exec.server": True,
                    "jupyter_server_fileid": True,
                    "jupyter_server_ydoc": True,
                }
            },
            "JupyterExecApp": {"timeout": 120.0},
            "YDocExtension": {
                "document_save_delay": 0.1,
                "ystore_class": "jupyter_server_ydoc.stores.TempFileYStore",
            },
        }
    )


@pytest.fixture
def docker_kernelspec(jp_data_dir: Path) -> str:
    """The server's ``python3-docker`` kernelspec on the test image."""
    docker_available()
    return install_docker_kernelspec(jp_data_dir, TEST_IMAGE)


async def _call(jp_fetch: Any, method: str, *parts: str, body: Any = None) -> tuple[int, Any]:
    response = await jp_fetch(
        "api", "exec", *parts, method=method, raise_error=False,
        body=None if body is None and method != "POST" else json.dumps(body or {}),
    )  # fmt: skip
    text = response.body.decode() if response.body else ""
    return response.code, json.loads(text) if text.strip() else None


async def _stream(jp_fetch: Any, sid: str, code: str) -> str:
    chunks: list[bytes] = []
    await jp_fetch(
        "api", "exec", "sessions", sid, "execute", "stream", method="POST",
        body=json.dumps({"code": code}), streaming_callback=chunks.append, request_timeout=300,
    )  # fmt: skip
    return b"".join(chunks).decode()


def _stream_texts(ydoc: Any) -> str:
    from jupyter_ydoc import YNotebook  # type: ignore[import-untyped]

    cells = YNotebook(ydoc).get()["cells"]
    return json.dumps([c.get("outputs", []) for c in cells])


@pytest.mark.docker
async def test_f7_rest_server_sent_events_and_live_cells(
    jp_fetch: Any, jp_serverapp: Any, jp_root_dir: Path, docker_kernelspec: str
) -> None:
    from pycrdt import Doc

    from jupyter_exec.server.live import collaboration

    status, model = await _call(
        jp_fetch, "POST", "sessions", body={"name": "leak", "backend": "docker", "network": POLICY}
    )
    assert status == 201, model
    sid = model["id"]
    try:
        app = collaboration(jp_serverapp)
        assert app is not None
        doc = await app.get_document(
            path=model["notebook"]["path"], content_type="notebook", file_format="json",
            copy=False, create=True,
        )  # fmt: skip
        replica = Doc()
        replica.apply_update(doc.ydoc.get_update())  # the document as the attack starts
        updates: list[bytes] = []
        subscription = doc.ydoc.observe(lambda event: updates.append(event.update))
        sse = await _stream(jp_fetch, sid, LEAK)
        sse += await _stream(jp_fetch, sid, RAISE)
        doc.ydoc.unobserve(subscription)
        assert "event: result" in sse
        assert_clean("the server-sent events", sse, redacted=12)
        outputs = [json.loads(line[6:]) for line in sse.splitlines() if line.startswith("data: ")]
        assert_streams_clean("the server-sent events", outputs)

        # The shared document as every collaborator saw it, after each update in turn.
        seen: list[str] = []
        for update in updates:
            replica.apply_update(update)
            seen.append(_stream_texts(replica))
        assert any(REDACTED in state for state in seen[:-1])  # live, before the record
        for state in seen:
            assert_clean("the shared document", state, redacted=0)
        assert_clean("the shared document", seen[-1], redacted=9)
    finally:
        assert (await _call(jp_fetch, "DELETE", "sessions", sid))[0] == 204
    notebook = Path(jp_root_dir, model["notebook"]["path"]).read_text(encoding="utf-8")
    assert_clean("the REST session's notebook", notebook, redacted=0)  # (the room may lag)


# -- E2B: the real SDK's run_code -------------------------------------------------------------


@pytest.fixture
def e2b_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    docker_available()
    from e2b_code_interpreter import Sandbox

    from jupyter_exec.e2b import E2BConfig
    from tests.e2b.e2b_server_helpers import API_KEY, run_server

    options = {"backend": "docker", "docker": {"image": TEST_IMAGE}}
    config = E2BConfig(
        root_dir=tmp_path / "e2b", ports=(0,), debug=True, api_key=API_KEY,
        session_options={**options, "network": NetworkPolicy(**POLICY)},  # type: ignore[arg-type]
    )  # fmt: skip
    config.root_dir.mkdir()
    for running in run_server(config):
        monkeypatch.setenv("E2B_DEBUG", "true")
        monkeypatch.setenv("E2B_SANDBOX_URL", running.url)
        yield Sandbox.create()


@pytest.mark.docker
def test_f7_e2b_run_code_callbacks_and_result(e2b_sandbox: Any) -> None:
    got: list[str] = []
    out: list[dict[str, Any]] = []
    execution = e2b_sandbox.run_code(
        LEAK,
        on_stdout=lambda m: out.append({"name": "stdout", "text": m.line}),
        on_stderr=lambda m: out.append({"name": "stderr", "text": m.line}),
        on_result=lambda r: got.append(json.dumps([r.text, r.json])),
        timeout=240,
    )
    assert execution.error is None, execution.error
    assert_clean("the E2B callbacks", json.dumps([got, out]), redacted=10)
    assert_streams_clean("the E2B callbacks", out)
    result = {
        "logs": [execution.logs.stdout, execution.logs.stderr],
        "results": [[r.text, r.json] for r in execution.results],
    }
    assert_clean("the E2B execution", json.dumps(result), redacted=9)
    # A command beside the kernel goes through the same proxy: its output is redacted too.
    command = (
        f'python3 -c "s = {SECRET[::-1]!r}[::-1]; import sys, base64\n'
        "for c in s: sys.stdout.write(c); sys.stdout.flush()\n"
        'print(); print(base64.b64encode(s.encode()).decode()); print(s, file=sys.stderr)"'
    )
    chunks: list[dict[str, Any]] = []
    ran = e2b_sandbox.commands.run(
        command,
        on_stdout=lambda t: chunks.append({"name": "stdout", "text": t}),
        on_stderr=lambda t: chunks.append({"name": "stderr", "text": t}),
        timeout=120,
    )
    assert_streams_clean("an E2B command's callbacks", chunks)
    assert_clean("an E2B command's result", json.dumps([ran.stdout, ran.stderr]), redacted=3)
    raised = e2b_sandbox.run_code(RAISE, timeout=240)
    assert raised.error is not None
    error = [raised.error.name, raised.error.value, raised.error.traceback]
    assert_clean("the E2B error", json.dumps(error), redacted=2)


# -- MCP: the real client's tool result --------------------------------------------------------


@pytest.mark.docker
async def test_f7_mcp_tool_result(kernel_image: str, tmp_path: Path, short_tmp: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    policy.chmod(0o600)
    root = tmp_path / "mcp"
    # The secret comes from the kernel itself: the proxy never dials, so the system's CAs do.
    system_ca = Path(ssl.get_default_verify_paths().openssl_cafile)
    async with _mcp(
        tmp_path, short_tmp, system_ca, "--work-dir", str(root), "--env", f"docker:{kernel_image}",
        "--network-policy", str(policy),
    ) as client:  # fmt: skip
        answers = []
        for code in (LEAK, RAISE):
            result = await client.call_tool("execute_code", {"code": code, "session": "m"})
            answers.append(json.dumps([c.model_dump() for c in result.content]))
    assert_clean("the MCP tool results", "".join(answers), redacted=9)
    (notebook,) = root.rglob("m.ipynb")
    assert_clean("the MCP session's notebook", notebook.read_text(encoding="utf-8"), redacted=9)


# -- finding 10: JSON nested deeper than anyone can save ---------------------------------------

DEEP = (
    "from IPython.display import JSON, display\n"
    "session = get_ipython().kernel.session\n"
    "pack = session.pack\n"
    "def deep_pack(obj):  # what the kernel sends, nested past any parser's limit\n"
    "    data = pack(obj)\n"
    "    data = data.replace(b'\"DEEP\"', b'[' * 100_000 + b']' * 100_000)\n"
    "    return data.replace(b'\"HALF\"', b'{\"a\": ' * 500 + b'1' + b'}' * 500)\n"
    "session.pack = deep_pack\n"
    "try:\n"
    "    display(JSON({'deep': 'DEEP'}))\n"
    "    display({'text/plain': 'meta'}, metadata={'x': 'HALF'}, raw=True)\n"
    "    display(JSON({'x': 'HALF'}))\n"
    "finally:\n"
    "    session.pack = pack\n"
    "print('still here')\n"
)


def _assert_deep_recorded(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    deep, after = notebook.cells[-2:]
    notes = [o["data"]["text/plain"] for o in deep.outputs if o["output_type"] == "display_data"]
    assert len(notes) == 3
    assert all(f"more than {MAX_OUTPUT_DEPTH} levels deep" in n for n in notes), notes
    assert "".join(o.get("text", "") for o in deep.outputs) == "still here\n"
    assert after.outputs[0]["text"] == "next\n"


async def test_f10_deep_json_from_a_kernel_keeps_the_notebook_valid(tmp_path: Path) -> None:
    async with AsyncSession(work_dir=tmp_path / "w") as session:
        first = await session.execute("x = 1")
        deep = await session.execute(DEEP)
        assert deep.status == "ok", deep.error
        assert deep.stdout == "still here\n"
        after = await session.execute("print('next')")
        assert after.stdout == "next\n"
        path = Path(session.notebook_path or "")
    assert first.cell_index == 0
    assert after.cell_index == 2
    _assert_deep_recorded(path)


# The kernel rewrites the session's notebook file itself (it is in the work dir), with a cell
# and metadata nested ``n`` deep: past what can be parsed, or only past what can be written.
FILL = (
    "import json\n"
    "def fill(path, n):\n"
    "    deep = '[' * n + ']' * n\n"
    "    nb = json.load(open(path))\n"
    "    cell = {'cell_type': 'code', 'id': f'deep{n}', 'metadata': {}, 'source': '',\n"
    "            'execution_count': None, 'outputs': ['DEEP']}\n"
    "    nb['cells'].append(cell)\n"
    "    nb['metadata']['deep'] = 'DEEP'\n"
    "    open(path, 'w').write(json.dumps(nb).replace('\"DEEP\"', deep))\n"
)


async def test_f10_deep_json_in_a_rest_session_keeps_its_notebook_valid(
    jp_fetch: Any, jp_root_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    status, model = await _call(jp_fetch, "POST", "sessions", body={"name": "deep"})
    assert status == 201, model
    sid = model["id"]
    path = Path(jp_root_dir, model["notebook"]["path"])

    async def run(code: str) -> str:
        status, out = await _call(jp_fetch, "POST", "sessions", sid, "execute", body={"code": code})
        assert (status, out["status"]) == (200, "ok"), out
        return str(out["stdout"])

    try:
        assert await run(FILL) == ""
        for depth in (100_000, 500):  # every later save met this file
            await run(f"fill({str(path)!r}, {depth})")
            assert await run("print('saved')") == "saved\n"
            nbformat.validate(nbformat.read(path, as_version=4))
        assert await run(DEEP) == "still here\n"
        assert await run("print('next')") == "next\n"
    finally:
        assert (await _call(jp_fetch, "DELETE", "sessions", sid))[0] == 204
    # the saves met the kernel's files (and said what they left out)
    assert "nested too deep); keeping the previous layout" in caplog.text
    assert "dropping 1 cell(s) nested too deep" in caplog.text
    assert "metadata of" in caplog.text
    _assert_deep_recorded(path)
    notebook = nbformat.read(path, as_version=4)
    assert len(notebook.cells) == 7  # every agent cell; the kernel's deep ones are gone
    assert "deep" not in notebook.metadata


# Shared with the tests these come from (fixtures are found by their names in this module).
from tests.docker.conftest import docker_client, kernel_image  # noqa: E402
from tests.docker.test_policy_state_mcp import _mcp, short_tmp  # noqa: E402

__all__ = ["docker_client", "kernel_image", "short_tmp"]
