"""Removing a kernel container that someone else is removing already: gone when we return.

Two reaps at once (two workers' tests, a reap beside the parent-death watchdog) each list the
same orphan; the second ``docker rm -f`` is answered 409 at once while the first goes on. A
reap that then said "removed" found the container still there (a stress run of the orphan
test, once in nine): ``force_remove`` now waits for the engine's ``removed`` condition.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import docker
import docker.errors
import pytest
import requests

from jupyter_exec.docker.reap import LABEL, REMOVAL_WAIT, force_remove
from jupyter_exec.exceptions import BackendError


def _api_error(status: int, text: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError(text, response=response, explanation=text)


class _Api:
    """The two Engine calls ``force_remove`` makes, answered as told; the waits recorded."""

    def __init__(self, removal: Exception | None, wait: Exception | None = None) -> None:
        self.removal, self.wait_answer = removal, wait
        self.waits: list[tuple[str, dict[str, Any]]] = []

    def remove_container(self, container_id: str, *, force: bool) -> None:
        assert force
        if self.removal is not None:
            raise self.removal

    def wait(self, container_id: str, **kwargs: Any) -> dict[str, Any]:
        self.waits.append((container_id, kwargs))
        if self.wait_answer is not None:
            raise self.wait_answer
        return {"StatusCode": 137}


class _Client:
    def __init__(self, api: _Api) -> None:
        self.api = api


def test_a_removal_already_in_progress_is_waited_for() -> None:
    api = _Api(_api_error(409, "removal of container abc is already in progress"))
    force_remove(_Client(api), "abc")  # type: ignore[arg-type]
    assert api.waits == [("abc", {"timeout": REMOVAL_WAIT, "condition": "removed"})]


def test_a_removal_that_ended_before_the_wait_returns() -> None:
    api = _Api(_api_error(409, "in progress"), wait=docker.errors.NotFound("no such container"))
    force_remove(_Client(api), "abc")  # type: ignore[arg-type]
    assert len(api.waits) == 1


def test_a_container_already_gone_is_not_waited_for() -> None:
    api = _Api(docker.errors.NotFound("no such container"))
    force_remove(_Client(api), "abc")  # type: ignore[arg-type]
    assert api.waits == []


def test_a_removal_the_engine_refuses_is_a_backend_error() -> None:
    api = _Api(_api_error(500, "driver failed"))
    with pytest.raises(BackendError, match="driver failed"):
        force_remove(_Client(api), "abc")  # type: ignore[arg-type]
    assert api.waits == []


def _removed_twice_at_once(client: docker.DockerClient, container_id: str) -> list[str]:
    """Two ``force_remove`` of one container, started together; what each found afterwards."""
    both = threading.Barrier(2)
    found: list[str] = []

    def remove() -> None:
        try:
            both.wait()
            force_remove(client, container_id)
            client.containers.get(container_id)
            found.append("still there after its removal returned")
        except docker.errors.NotFound:
            found.append("gone")
        except BaseException as exc:  # shown by the caller's assertion
            found.append(repr(exc))

    threads = [threading.Thread(target=remove) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return found


@pytest.mark.docker
def test_two_removals_at_once_both_return_with_the_container_gone(
    kernel_image: str, docker_client: docker.DockerClient
) -> None:
    """A real engine: its 409 to the second removal, and its ``removed`` wait, as the fake's."""
    for _ in range(5):
        container = docker_client.containers.run(
            kernel_image, ["sleep", "300"], detach=True, labels={LABEL: "0"}, network_mode="none"
        )
        try:
            assert _removed_twice_at_once(docker_client, str(container.id)) == ["gone", "gone"]
        finally:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                container.remove(force=True)
