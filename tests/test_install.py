"""The development install behaves like a user's wheel install where it matters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_the_server_extension_is_enabled_in_this_environment() -> None:
    jupyter = Path(sys.executable).with_name("jupyter")
    listing = subprocess.run(
        [str(jupyter), "server", "extension", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = (listing.stdout + listing.stderr).splitlines()
    ours = [line for line in lines if line.strip().startswith("jupyter_exec.server ")]
    assert ours, "jupyter_exec.server is not listed by `jupyter server extension list`"
    assert "enabled" in ours[0]
    assert any("jupyter_exec.server" in line and "OK" in line for line in lines)
