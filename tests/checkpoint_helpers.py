"""Writing checkpoint manifests in tests, as this host's jupyter-exec signs them.

Tests that need a checkpoint "taken elsewhere" (another environment) or a
hostile manifest past its MAC sign it with the test run's key
(``JUPYTER_EXEC_CHECKPOINT_KEY``, set in tests/conftest.py): what they test is
then the check after the MAC, not the MAC itself.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_exec.boundary import trust as checkpoint_trust

__all__ = ["key_env", "manifest_body", "resign", "signed_manifest"]


def key_env() -> dict[str, str]:
    """The test run's checkpoint key, for a subprocess started with a bare environment (the MCP
    SDK's stdio client passes only a safe few variables): never the user's own key."""
    return {checkpoint_trust.KEY_ENV: os.environ[checkpoint_trust.KEY_ENV]}


def signed_manifest(body: Any) -> str:
    """The text of a manifest for ``body``, with its checksum and this host's MAC."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(canonical).hexdigest()
    return json.dumps({"sha256": digest, "mac": checkpoint_trust.mac(canonical), "body": body})


def manifest_body(folder: Path) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((folder / "manifest.json").read_text())["body"]
    return body


def resign(folder: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit a checkpoint's manifest body and sign it again, as this host would have."""
    body = manifest_body(folder)
    change(body)
    (folder / "manifest.json").write_text(signed_manifest(body))
