"""The SDK's ``fork``, snapshots and ``on_timeout: pause`` against a server whose sandboxes
run in the hardened Docker container: the checks of branching_checks.py. A fork or a
sandbox from a snapshot is a container of its own, its state loaded from a checkpoint the
parent's container wrote."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from branching_checks import (
    forks_carry_files_and_state,
    forks_work_in_their_own_folder,
    snapshots_start_sandboxes,
    timeout_pauses_and_use_resumes,
)
from e2b_server_helpers import API_KEY, Running, run_server

from jupyter_exec.e2b import E2BConfig
from tests.conftest import docker_engine

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def docker_api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    docker_engine().close()
    root = tmp_path_factory.mktemp("e2b-docker-api")
    config = E2BConfig(root_dir=root, ports=(0,), api_key=API_KEY,
                       session_options={"backend": "docker"})  # fmt: skip
    yield from run_server(config)


@pytest.fixture
def docker_env(docker_api_server: Running, monkeypatch: pytest.MonkeyPatch) -> Running:
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    monkeypatch.setenv("E2B_API_URL", docker_api_server.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", docker_api_server.url)
    monkeypatch.setenv("E2B_API_KEY", API_KEY)
    return docker_api_server


def test_fork_of_a_docker_sandbox(docker_env: Running) -> None:
    forks_carry_files_and_state(docker_env)


def test_a_docker_fork_works_in_its_own_folder(docker_env: Running) -> None:
    forks_work_in_their_own_folder(docker_env)


def test_snapshots_of_a_docker_sandbox(docker_env: Running) -> None:
    snapshots_start_sandboxes(docker_env)


def test_on_timeout_pause_of_a_docker_sandbox(docker_env: Running) -> None:
    timeout_pauses_and_use_resumes(docker_env)
