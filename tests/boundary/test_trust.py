"""Whom a saved state may be loaded into (:func:`jupyter_exec.boundary.trust.check_origin`):
the rule alone, with origins as the host stamps them. A remote kernel's state goes only to a
kernel of the same server; a Docker kernel's never to a kernel on this host."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_exec.boundary.trust import check_origin
from jupyter_exec.exceptions import CheckpointError

LOCAL = {"backend": "local"}
DOCKER = {"backend": "docker", "image": "jupyter-exec/kernel:latest"}
GATEWAY = {"backend": "remote", "server": "http://127.0.0.1:8888/"}
OTHER = {"backend": "remote", "server": "http://gateway.example.org/"}
UNKNOWN = {"backend": "remote"}


@pytest.mark.parametrize(
    ("origin", "kernel"),
    [(LOCAL, LOCAL), (LOCAL, DOCKER), (DOCKER, DOCKER), (GATEWAY, GATEWAY), (LOCAL, GATEWAY)],
)
def test_allowed(origin: dict[str, Any], kernel: dict[str, Any]) -> None:
    check_origin("g", origin, kernel, trusted=False)


@pytest.mark.parametrize(
    ("origin", "kernel", "said"),
    [
        (DOCKER, LOCAL, "a Docker kernel"),
        (GATEWAY, LOCAL, "a remote kernel (server http://127.0.0.1:8888/)"),
        (GATEWAY, DOCKER, "this session's kernel is a Docker kernel"),
        (GATEWAY, OTHER, "server http://gateway.example.org/"),
        (UNKNOWN, UNKNOWN, "a remote kernel"),
    ],
)
def test_refused_unless_trusted(origin: dict[str, Any], kernel: dict[str, Any], said: str) -> None:
    with pytest.raises(CheckpointError, match="it was not loaded") as refused:
        check_origin("g", origin, kernel, trusted=False)
    assert said in str(refused.value)
    check_origin("g", origin, kernel, trusted=True)  # the person's word
