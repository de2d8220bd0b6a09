"""Environments: one way to say where code runs, mapped onto session options.

The virtual environment test makes a real venv (cached across runs under
``~/.cache/jupyter-exec-tests``) and checks that ``pip install`` in a shell
block installs into the kernel's own environment.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from jupyter_exec import InvalidArgument, KernelStartError, Session
from jupyter_exec.agents.codeblocks import extract_code_blocks, prepare_block
from jupyter_exec.engine.environments import (
    DockerEnv,
    SystemPython,
    VirtualEnv,
    parse_environment,
)

CACHE = Path(os.environ.get("JUPYTER_EXEC_TEST_CACHE", Path.home() / ".cache/jupyter-exec-tests"))


def test_parse_strings() -> None:
    assert parse_environment(None) == SystemPython()
    assert parse_environment("local") == SystemPython()
    assert parse_environment("python:python3") == SystemPython("python3")
    assert parse_environment("venv:/opt/env", packages=["pandas"]) == VirtualEnv(
        "/opt/env", packages=("pandas",)
    )
    assert parse_environment("venv", python_version="3.12") == VirtualEnv(python="3.12")
    assert parse_environment("local", packages=["x"]) == VirtualEnv(packages=("x",))
    assert parse_environment("docker:my/image", packages=["polars"]) == DockerEnv(
        image="my/image", pip_packages=("polars",)
    )
    assert parse_environment(sys.executable) == SystemPython(sys.executable)
    with pytest.raises(ValueError, match="unknown environment"):
        parse_environment("nowhere")


def test_docker_maps_to_backend_options(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("polars\n")
    env = DockerEnv(
        pip_packages=("duckdb",),
        requirements_file=str(requirements),
        options={"memory": "1g"},
    )
    assert env.backend == "docker"
    assert env.session_options() == {
        "backend": "docker",
        "docker": {
            "network": False,
            "pip_packages": ["duckdb"],
            "requirements_file": str(requirements),
            "memory": "1g",
        },
    }


def test_system_python() -> None:
    assert SystemPython().session_options() == {"python": sys.executable}
    with pytest.raises(InvalidArgument, match="no-such-python-here"):
        SystemPython("no-such-python-here").session_options()


def test_an_interpreter_that_is_not_executable_is_named(tmp_path: Path) -> None:
    fake = tmp_path / "python3"
    fake.write_text("not a program\n")
    fake.chmod(0o644)
    with pytest.raises(InvalidArgument, match="is not executable") as info:
        SystemPython(str(fake)).session_options()
    assert str(fake) in str(info.value)
    with pytest.raises(InvalidArgument, match="chmod"):
        Session(work_dir=tmp_path / "w", python=fake)
    assert not (tmp_path / "w").exists()  # a failed start leaves no folder it made


def test_managed_venvs_are_keyed_by_content(tmp_path: Path) -> None:
    one = VirtualEnv(packages=("a", "b"), cache_dir=str(tmp_path))
    same = VirtualEnv(packages=("b", "a"), cache_dir=str(tmp_path))
    other = VirtualEnv(packages=("a",), cache_dir=str(tmp_path))
    assert one.location(one.spec("3.11")) == same.location(same.spec("3.11"))
    assert one.location(one.spec("3.11")) != other.location(other.spec("3.11"))
    assert one.location(one.spec("3.11")) != one.location(one.spec("3.12"))


@pytest.mark.skipif(shutil.which("uv") is not None, reason="uv would try to download it")
def test_unknown_python_version_is_explained(tmp_path: Path) -> None:
    with pytest.raises(KernelStartError, match=r"no Python 2\.1 found"):
        VirtualEnv(python="2.1", cache_dir=str(tmp_path)).session_options(lambda line: None)


@pytest.mark.timeout(600)
def test_venv_on_demand_and_pip_in_a_shell_block(tmp_path: Path) -> None:
    """A venv made on demand runs the kernel; `pip install` in sh makes `import` work next."""
    lines: list[str] = []
    env = VirtualEnv(cache_dir=str(CACHE / "venvs"))
    options = env.session_options(lines.append)
    venv = Path(options["python"]).parent.parent
    assert (venv / "pyvenv.cfg").is_file()
    if lines:  # made now (cold cache): progress was shown
        assert any("virtual environment ready" in line for line in lines)

    started = time.monotonic()
    again: list[str] = []
    assert env.session_options(again.append) == options
    assert again == []  # cached: nothing to do
    assert time.monotonic() - started < 5

    message = (
        "```sh\npip uninstall -y -q tomli_w; pip install -q tomli_w\n```\n"
        "```python\nimport sys, tomli_w\nprint(sys.prefix)\ntomli_w.dumps({'a': 1})\n```"
    )
    with Session(work_dir=tmp_path, timeout=300, **options) as session:
        executions = [
            session.execute(prepare_block(b, session.work_dir))
            for b in extract_code_blocks(message)
        ]
    assert executions[0].ok, executions[0].stderr
    assert executions[1].ok, executions[1].error
    assert executions[1].stdout.strip() == str(venv)
    assert executions[1].text == "'a = 1\\n'"


async def test_a_network_policy_goes_with_a_docker_environment_only() -> None:
    from jupyter_exec import NetworkPolicy
    from jupyter_exec.engine.environments import with_network
    from jupyter_exec.options import SessionOptions
    from jupyter_exec.session.launch import resolve_environment

    policy = NetworkPolicy(allow=["pypi.org", "files.pythonhosted.org"])
    env = DockerEnv(network={"allow": ["pypi.org", "files.pythonhosted.org"]})  # mapping form
    assert env.policy == policy
    assert env.session_options() == {
        "backend": "docker",
        "docker": {"network": False},  # the container has no network: the proxy is its way out
        "network": policy,
    }
    assert parse_environment("docker:img", network=policy) == DockerEnv(image="img", network=policy)
    assert parse_environment("docker", network=True) == DockerEnv(network=True)
    # Session(environment=DockerEnv(network=policy)) keeps the policy when the environment resolves
    resolved = await resolve_environment(SessionOptions(environment=env))
    assert resolved.backend == "docker"
    assert resolved.network == policy
    for where in (None, "local", "venv", f"python:{sys.executable}"):
        with pytest.raises(InvalidArgument, match="enforced only for Docker kernels"):
            parse_environment(where, network=policy)
    with pytest.raises(InvalidArgument, match="already has the whole network"):
        with_network(DockerEnv(network=True), policy)
    with pytest.raises(InvalidArgument, match="not a URL"):
        DockerEnv(network={"allow": ["https://pypi.org"]})
