"""The server's proof that it is the one ``jupyter-exec gateway`` configured (runs in the server).

Before the command sends its token to whatever answers on the gateway's port, the answer must
prove it read the generated config: the config holds a key random per start
(``c.GatewayProof.key``) and the server answers ``GET <base>/jupyter-exec/proof?challenge=C``,
with no token, by ``HMAC-SHA256(key, C)``. A process that held the port first cannot answer, so
it never sees the token (:meth:`jupyter_exec.cluster.gateway.GatewayProcess.wait_ready`).

How the handler gets into each server, each by its documented extension point:

* Kernel Gateway: this module is its API "personality" (``KernelGatewayApp.api``), the
  websocket personality plus the proof route. It is also on the server's command line, so a
  Kernel Gateway whose config never loaded has no key and exits at once, instead of serving
  with its defaults (no token);
* Jupyter Server: this module is a server extension (``ServerApp.jpserver_extensions``).

A server without a key exits with :data:`CONFIG_FAILED`, after saying why on stderr.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import string
import sys
from typing import Any

from jupyter_server.utils import url_path_join
from kernel_gateway.jupyter_websocket import (  # type: ignore[import-untyped]
    JupyterWebsocketPersonality,
)
from tornado import web
from traitlets import Unicode
from traitlets.config import Configurable

__all__ = [
    "CONFIG_FAILED",
    "PROOF_PATH",
    "GatewayProof",
    "ProofHandler",
    "ProvingPersonality",
    "answer",
    "create_personality",
]

PROOF_PATH = "/jupyter-exec/proof"
"""The proof's route, under the server's base URL."""

CONFIG_FAILED = 78
"""The server's exit status when its generated config did not load (``EX_CONFIG``)."""

MAX_CHALLENGE = 128
_HEX = frozenset(string.hexdigits)


def answer(key: str, challenge: str) -> str:
    """The proof for ``challenge``: ``HMAC-SHA256(key, challenge)`` in hex."""
    return hmac.new(key.encode(), challenge.encode(), hashlib.sha256).hexdigest()


def refuse_to_start(reason: str) -> None:
    """Say why on stderr and end the server process now (traitlets would log and go on)."""
    print(f"[jupyter-exec gateway] {reason}: the server does not start", file=sys.stderr)
    sys.stderr.flush()
    os._exit(CONFIG_FAILED)


class GatewayProof(Configurable):
    """The per-start key, set by the generated config."""

    key = Unicode("", config=True, help="The key the proof route answers with (random per start).")

    def checked_key(self) -> str:
        """The key; a server without one (its config did not load) does not start."""
        if len(self.key) < 32:
            refuse_to_start("no proof key: the generated config did not load")
        return str(self.key)


class ProofHandler(web.RequestHandler):
    """``GET ?challenge=<hex>`` -> the proof, no token needed (it tells nothing but 'ours')."""

    def initialize(self, key: str) -> None:
        self._key = key

    def get(self) -> None:
        challenge = self.get_query_argument("challenge", "")
        if not 16 <= len(challenge) <= MAX_CHALLENGE or not set(challenge) <= _HEX:
            raise web.HTTPError(400)
        self.set_header("Content-Type", "text/plain")
        self.set_header("Cache-Control", "no-store")
        self.finish(answer(self._key, challenge))


class ProvingPersonality(JupyterWebsocketPersonality):  # type: ignore[misc]
    """Kernel Gateway's websocket personality, plus the proof route."""

    def create_request_handlers(self) -> list[Any]:
        key = GatewayProof(parent=self.parent).checked_key()
        pattern = url_path_join("/", self.parent.base_url, PROOF_PATH)
        handlers: list[Any] = super().create_request_handlers()
        return [(pattern, ProofHandler, {"key": key}), *handlers]


def create_personality(*args: Any, **kwargs: Any) -> ProvingPersonality:
    """Kernel Gateway's entry point for an API module (``KernelGatewayApp.api``)."""
    return ProvingPersonality(*args, **kwargs)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Jupyter Server: add the proof route."""
    key = GatewayProof(parent=serverapp).checked_key()
    pattern = url_path_join(serverapp.base_url, PROOF_PATH)
    serverapp.web_app.add_handlers(".*$", [(pattern, ProofHandler, {"key": key})])
