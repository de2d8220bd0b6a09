"""``@authorized`` on the ``exec`` resource: an authorizer that denies it gets 403 everywhere."""

from __future__ import annotations

from typing import Any

import pytest
from jupyter_server.auth import Authorizer
from server_helpers import call_path, spec_operations
from traitlets.config import Config


class DenyExec(Authorizer):
    """Allows everything except the jupyter-exec resource."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource != "exec"


@pytest.fixture
def jp_server_config() -> Config:
    return Config(
        {
            "ServerApp": {
                "jpserver_extensions": {"jupyter_exec.server": True},
                "authorizer_class": DenyExec,
            }
        }
    )


async def test_every_endpoint_is_authorized_on_the_exec_resource(jp_fetch) -> None:
    assert (await jp_fetch("api", "status")).code == 200  # authenticated, other resources allowed
    for path, method in sorted(spec_operations()):
        response = await jp_fetch(
            *call_path(path).strip("/").split("/"),
            method=method,
            body=b"{}" if method == "POST" else None,
            raise_error=False,
        )
        assert response.code == 403, (path, method, response.code)
