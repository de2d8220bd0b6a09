"""The attack tests reuse the servers of the other test folders: their helpers are importable.

``e2b_server_helpers`` (a real E2B server on a loop of its own) and
``server_helpers`` (a real ``jupyter server`` process) live beside the tests they
were written for; this puts those folders on the path; the E2B fixtures are imported below.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
for folder in ("e2b", "server"):
    if str(TESTS / folder) not in sys.path:
        sys.path.insert(0, str(TESTS / folder))

# The E2B suite's own server fixtures (API mode, a token per sandbox), shared rather than copied:
# ``api_server`` is a module-scoped server, ``api_env`` points the SDK at it.
# ``jupyter-exec gateway`` on the loopback cluster, one per module, as the cluster tests have it
# (a module using it imports ``loopback_cluster`` as those do).
from tests.cluster.conftest import gateway  # noqa: E402, F401
from tests.e2b.conftest import api_env, api_server  # noqa: E402, F401
