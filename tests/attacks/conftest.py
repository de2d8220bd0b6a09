"""The attack tests reuse the servers of the other test folders: their helpers are importable.

``e2b_server_helpers`` (a real E2B server on a loop of its own) and
``server_helpers`` (a real ``jupyter server`` process) live beside the tests they
were written for; this puts those folders on the path, nothing more.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
for folder in ("e2b", "server"):
    if str(TESTS / folder) not in sys.path:
        sys.path.insert(0, str(TESTS / folder))
