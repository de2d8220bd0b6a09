"""The E2B server's ports and limits: the numbers its command line shows as defaults.

A leaf module, so ``jupyter-exec e2b --help`` (and every other command, whose
parser is built with this one) shows them without loading the server.
"""

from __future__ import annotations

__all__ = ["CODE_PORT", "ENVD_PORT", "MAX_SANDBOX_TIMEOUT", "MAX_UPLOAD"]

CODE_PORT = 49999
"""The code interpreter's port in the SDK's debug mode."""
ENVD_PORT = 49983
"""envd's port in the SDK's debug mode."""
MAX_UPLOAD = 1 << 30
"""The files route's default body limit (1 GiB); every other route takes far less."""
MAX_SANDBOX_TIMEOUT = 86_400.0
"""The longest timeout a client may give a sandbox: 24 hours, E2B's own maximum."""
