"""Attacks on ``run_code(language=...)``: a client's word picking a kernel, or shell code in envs.

A client names a language; the server's fixed table (``jupyter_exec.e2b.languages``)
is the only thing that turns it into a kernelspec. The attacker plants a
kernelspec of its own on the kernel search path and asks for it by name, by a
path, by a kernelspec name that is not a language; it sends ``envs=`` whose
names are shell code to a bash context and values that are shell code to
every language; it asks a Docker sandbox for a language its image lacks. Each
is refused with a 400 that says why, or runs as plain data, and the marker the
attack would write never appears.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b.exceptions import SandboxException
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import API_KEY, Running, run_server

from jupyter_exec.e2b import E2BConfig
from tests.e2b.conftest import debug_env, debug_server  # noqa: F401
from tests.language_kernels import language_kernels  # noqa: F401

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore:Passing unrecognized arguments:DeprecationWarning"),
]


@pytest.fixture
def planted(language_kernels: Path, tmp_path: Path) -> Path:  # noqa: F811
    """A kernelspec named ``evil`` beside the real ones, whose kernel would write a marker."""
    marker = tmp_path / "evil-ran"
    spec = language_kernels / "kernels" / "evil"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "evil", "language": "evil"})
    )
    return marker


@pytest.mark.parametrize(
    "language",
    ["evil", "EVIL", "../evil", "kernels/evil", "ir", "deno", "python3/../evil", "r\x00"],
)
def test_a_language_naming_a_planted_kernelspec_starts_no_kernel(
    debug_env: Running,  # noqa: F811
    planted: Path,
    language: str,
) -> None:
    sandbox = Sandbox.create()
    with pytest.raises(SandboxException, match=r"400.*does not run"):
        sandbox.run_code("1", language=language)
    with pytest.raises(SandboxException, match=r"400.*does not run"):
        sandbox.create_code_context(language=language)
    assert not planted.exists()
    assert sandbox.run_code("1 + 1").text == "2"  # the sandbox is untouched


def test_a_bash_env_name_that_is_shell_code_is_refused(
    debug_env: Running,  # noqa: F811
    language_kernels: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    marker = tmp_path / "name-ran"
    sandbox = Sandbox.create()
    for name in (f"X=1; touch {marker}; Y", f"$(touch {marker})", "1ABC", "A B"):
        with pytest.raises(SandboxException, match=r"400.*cannot be an environment variable"):
            sandbox.run_code("echo hi", language="bash", envs={name: "v"})
    assert not marker.exists()


@pytest.mark.parametrize("language", ["bash", "r", "js", "python", "java"])
def test_env_values_that_are_code_stay_data_in_every_language(
    debug_env: Running,  # noqa: F811
    language_kernels: Path,  # noqa: F811
    tmp_path: Path,
    language: str,
) -> None:
    marker = tmp_path / "value-ran"
    touch = {
        "bash": f"$(touch {marker})`touch {marker}`'; touch {marker}; '",
        "r": f'"); file.create("{marker}"); ("',
        "js": f"`); Deno.writeTextFileSync('{marker}', 'x'); (`",
        "python": f"'); open({str(marker)!r}, 'w'); ('",
        "java": f'\\u0022); new java.io.File("{marker}").createNewFile(); ("',
    }[language]
    sandbox = Sandbox.create()
    sandbox.run_code("1", language=language, envs={"E2B_ATTACK": touch + '\\"\n'})
    assert not marker.exists()


@pytest.fixture(scope="module")
def docker_debug_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A debug-mode server whose sandboxes' kernels run in Docker on the Python-only kernel
    image (none is started here)."""
    root = tmp_path_factory.mktemp("e2b-docker-languages")
    docker = {"image": "jupyter-exec/kernel:latest"}
    config = E2BConfig(root_dir=root, ports=(0,), debug=True, api_key=API_KEY,
                       session_options={"backend": "docker", "docker": docker})  # fmt: skip
    yield from run_server(config)


@pytest.mark.parametrize("language", ["r", "js", "ts", "bash", "java"])
def test_a_docker_sandbox_asked_for_a_language_its_image_lacks_is_refused(
    docker_debug_server: Running, monkeypatch: pytest.MonkeyPatch, language: str
) -> None:
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", docker_debug_server.url)
    monkeypatch.setenv("E2B_API_KEY", API_KEY)
    sandbox = Sandbox.create()
    why = r"400.*(has Python only|Java has no Docker kernel)"
    with pytest.raises(SandboxException, match=why):
        sandbox.run_code("1", language=language)
    with pytest.raises(SandboxException, match=why):
        sandbox.create_code_context(language=language)
    assert {c.language for c in sandbox.list_code_contexts()} == {"python"}
